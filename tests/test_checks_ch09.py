"""Chapter 09's own checker tests: what is particular to its checks beyond the contract (reference full marks, blank
notebook, every catalogued wrong and valid answer, hidden inputs that change with the seed: tests/chapter_contract.py).

- generate is graded on exact tokens: every hidden model's greedy choices (and the visible model's) win by a margin
  that rounding cannot close, on several seeds;
- counts are exact Python ints (a float FLOP count is not accepted);
- mistakes written here (wrong code the catalogue does not list) fail with a helpful message.
"""

import inspect

import pytest
import torch

from autograder.checks import ch09_complexity_kv_cache as checks
from autograder.checks import run_check
from solutions import ch09_complexity_kv_cache as ref

CHAPTER = "09-complexity-kv-cache"


@pytest.mark.parametrize("seed", [0, 1, 7, 1234])
def test_hidden_models_have_a_comfortable_top2_margin(seed):
    """Tokens are compared exactly: each hidden case's model (float64, full recomputation) must choose every token
    with a top-2 logit gap of at least MIN_MARGIN, far above float32 rounding (~1e-6 here)."""
    for case in checks._generate_cases(seed):
        spec, prompt, steps = case.args
        model = ref.TinyDecoder(**spec.init).double().eval()
        model.load_state_dict(spec.state, strict=False)
        assert checks._margin(model, prompt, steps) >= checks.MIN_MARGIN, case.label
        assert spec.init["d_model"] <= 16 and spec.init["n_layers"] <= 2 and spec.init["vocab_size"] <= 12, "keep hidden models tiny"


def test_hidden_generate_inputs_change_with_the_seed():
    first, second = (checks._generate_cases(s)[0].args for s in (3, 4))
    assert not torch.equal(first[0].state["head.weight"], second[0].state["head.weight"])


def test_visible_model_has_a_comfortable_top2_margin():
    """The visible check builds its model from torch.manual_seed(VISIBLE_MODEL_SEED) and compares tokens exactly."""
    torch.manual_seed(checks.VISIBLE_MODEL_SEED)
    model = ref.TinyDecoder(vocab_size=10, d_model=8, n_heads=2, n_layers=2, d_ff=16, max_len=16).double().eval()
    with torch.no_grad():
        model.head.weight.mul_(4.0)
    for prompt, steps in ((torch.tensor([[1, 7, 3], [4, 4, 0]]), 6), (torch.tensor([[5]]), 7)):
        assert checks._margin(model, prompt, steps) >= 0.09


@pytest.mark.usefixtures("grading_env")
def test_a_float_flop_count_is_not_an_int():
    with pytest.raises(AssertionError):
        run_check(CHAPTER, "matmul_flops_hidden", lambda m, k, p, batch=1: 2.0 * batch * m * k * p)


@torch.no_grad()
def _generate_whole_sequence_with_cache(model, idx, max_new_tokens, use_cache=True, return_logits=False):
    caches, rows = model.new_cache(idx.size(0)), []
    for _ in range(max_new_tokens):
        logits = model.forward_step(idx, caches) if use_cache else model(idx)  # everything again, into the same cache
        rows.append(logits[:, -1])
        idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return (idx, torch.stack(rows, 1)) if return_logits else idx


@torch.no_grad()
def _generate_batch_of_one(model, idx, max_new_tokens, use_cache=True, return_logits=False):
    rows = []
    for _ in range(max_new_tokens):
        logits = model(idx)
        rows.append(logits[:, -1])
        idx = torch.cat([idx, logits[:, -1].argmax().view(1, 1)], dim=1)  # argmax over everything: batch 1 only
    return (idx, torch.stack(rows, 1)) if return_logits else idx


@pytest.mark.usefixtures("grading_env")
def test_feeding_the_whole_sequence_with_the_cache_is_told_to_feed_the_newest_token():
    with pytest.raises(AssertionError, match=r"idx\[:, -1:\]"):
        run_check(CHAPTER, "generate_hidden", _generate_whole_sequence_with_cache)


@pytest.mark.usefixtures("grading_env")
def test_a_generate_for_batch_1_only_is_told_about_the_batch():
    with pytest.raises(AssertionError, match="each sequence of the batch"):
        run_check(CHAPTER, "generate_hidden", _generate_batch_of_one)


@pytest.mark.usefixtures("grading_env")
def test_the_reference_generate_and_cache_pass():
    run_check(CHAPTER, "generate_hidden", ref.generate)
    run_check(CHAPTER, "KVCache_hidden", ref.fill_kv_cache)


@pytest.mark.usefixtures("grading_env")
def test_a_cache_step_that_attends_to_the_unfilled_part_fails():
    """attention_step must attend to the p + s keys it returns, not to a longer (zero-padded) buffer."""

    def padded(q_new, k_new, v_new, k_cache=None, v_cache=None):
        out, k_all, v_all = ref.attention_step(q_new, k_new, v_new, k_cache, v_cache)
        pad = torch.zeros_like(k_all[..., :2, :])  # two unfilled positions of a preallocated buffer
        k_buf, v_buf = torch.cat([k_all, pad], -2), torch.cat([v_all, pad], -2)
        s, total = q_new.size(-2), k_buf.size(-2)
        scores = q_new @ k_buf.transpose(-2, -1) / q_new.size(-1) ** 0.5
        keep = torch.ones(s, total, dtype=torch.bool, device=q_new.device).tril(diagonal=total - s)
        return torch.softmax(scores.masked_fill(~keep, float("-inf")), -1) @ v_buf, k_all, v_all

    with pytest.raises(AssertionError, match="output of padded .*wrong values"):
        run_check(CHAPTER, "attention_step_hidden", padded)


_CONCAT_CACHE = '''
import torch

class KVCache:
    """Preallocated buffers (as the visible check sees at construction), but append grows by torch.cat."""

    def __init__(self, batch, n_heads, max_len, d_k, dtype=torch.float32, device=None):
        self.k = torch.zeros(batch, n_heads, max_len, d_k, dtype=dtype, device=device)
        self.v = torch.zeros(batch, n_heads, max_len, d_k, dtype=dtype, device=device)
        self.length, self._k, self._v = 0, None, None

    def append(self, k_new, v_new):
        self._k = k_new if self._k is None else torch.cat([self._k, k_new], dim=2)
        self._v = v_new if self._v is None else torch.cat([self._v, v_new], dim=2)
        self.length += k_new.size(2)
        return self._k, self._v
'''


def test_a_cache_that_grows_by_concatenation_fails_the_full_cache_contract_hidden():
    """The exercise: "If the cache is full, raise RuntimeError" (the visible check asks it too): hidden as well."""
    run_check("09-complexity-kv-cache", "KVCache_hidden", {**vars(ref)}, seed=0, device="cpu")
    namespace = {**vars(ref)}
    exec(compile(_CONCAT_CACHE, "<cell-kv>", "exec"), namespace)
    # fill_kv_cache is the course's (read-only): defined in the notebook, so it builds the learner's KVCache
    exec(compile(inspect.getsource(ref.fill_kv_cache), "<cell-fill>", "exec"), namespace)
    with pytest.raises(AssertionError, match="should raise RuntimeError"):
        run_check("09-complexity-kv-cache", "KVCache_hidden", namespace, seed=0, device="cpu")

"""Chapter 07's own checker tests: the hidden cases agree with PyTorch's own modules and losses (what the exercise
text promises), the forbidden built-ins cost the points while log_softmax and an idle nn.Dropout do not, and
mistakes outside the catalogue of wrong answers are named on the hidden cases.

What every chapter must keep (reference full marks, blank notebook, every catalogued wrong and valid answer,
hidden inputs that change with the seed, the notebooks): tests/chapter_contract.py; each hidden check's
catalogued mistakes named as themselves: tests/test_mistake_catalogues.py.

Tolerances: float64 against PyTorch, atol 1e-12 (a few matmuls, a softmax and two LayerNorms of width <= 16 on
O(1) values lose ~1e-15).
"""

import pytest
import torch
import torch.nn.functional as F

from autograder.checks import builtins, case_salt, generator, grader_weights, run_check
from autograder.checks import ch07_ffn_layernorm as checks
from solutions import ch02_qkv_attention as ch02
from solutions import ch04_multi_head as ch04
from solutions import ch07_ffn_layernorm as ref

CHAPTER = "07-ffn-layernorm"
ATOL = 1e-12
SEEDS = (0, 1, 7)


def _namespace(**overrides):
    """A notebook's namespace: the course's code of chapters 2 and 4, the reference of this chapter, and overrides."""
    return {**vars(ch02), **vars(ch04), **vars(ref), **overrides}


# --- The hidden cases agree with PyTorch ------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_hidden_encoder_layer_cases_equal_nn_transformer_encoder_layer(seed):
    # Every hidden case, with the grader's weights: the reference equals PyTorch's layer fed the inverted mask
    # (its True = ignore), in both norm_first settings.
    for i, case in enumerate(checks._enc_cases(seed)):
        layer = ref.EncoderLayer(**case.init)
        layer.load_state_dict(grader_weights(layer, generator(seed, case_salt("EncoderLayer_hidden", i))), strict=False)
        layer = layer.double().eval()
        torch_layer = ref.copy_to_torch_encoder_layer(layer).eval()
        x = case.inputs[0].double()
        mask = case.kwargs.get("mask")
        if mask is None:
            theirs = torch_layer(x)
        elif mask.dim() == 4:  # (B, 1, 1, T) padding
            theirs = torch_layer(x, src_key_padding_mask=~mask[:, 0, 0, :])
        else:
            theirs = torch_layer(x, src_mask=~mask)
        with torch.no_grad():
            ours = layer(x, mask)
        torch.testing.assert_close(ours, theirs.detach(), atol=ATOL, rtol=0, msg=lambda m: f"{case.label}: {m}")


@pytest.mark.parametrize("seed", SEEDS)
def test_hidden_label_smoothing_cases_equal_f_cross_entropy(seed):
    for case in checks._lsce_cases(seed):
        logits, target, eps = case.args
        logits = logits.double()
        ignore = case.kwargs.get("ignore_index", -100)
        expected = F.cross_entropy(logits, target, label_smoothing=eps, ignore_index=ignore)
        got = ref.label_smoothed_cross_entropy(logits, target, eps, **case.kwargs)
        torch.testing.assert_close(got, expected, atol=ATOL, rtol=0, msg=lambda m: f"{case.label}: {m}")


@pytest.mark.parametrize("seed", SEEDS)
def test_hidden_layer_norm_cases_equal_f_layer_norm(seed):
    for case in checks._layer_norm_cases(seed):
        x, w, b = (a.double() if a is not None else None for a in case.args)
        eps = case.kwargs.get("eps", 1e-5)
        expected = F.layer_norm(x, (x.shape[-1],), w, b, eps)
        torch.testing.assert_close(ref.layer_norm(x, w, b, eps), expected, atol=1e-9, rtol=1e-12, msg=lambda m: f"{case.label}: {m}")


def test_the_grader_weights_map_onto_pytorchs_layer_names():
    # The state dict of the graded EncoderLayer has nn.LayerNorm's parameter names (norm1.weight, ...), so the
    # course's LayerNorm is a drop-in for nn.LayerNorm in state dicts.
    names = set(ref.EncoderLayer(8, 2, 16).state_dict())
    assert {"norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias", "ff.linear1.weight", "ff.linear2.bias"} <= names


# --- What is forbidden, and what is not ---------------------------------------------------------------------


def test_every_check_forbids_the_normalisation_and_loss_built_ins_but_not_softmax_or_dropout():
    for gid, check in checks.CHECKS.items():
        groups = {g.name for g in builtins.groups_touched(check.forbidden)}
        assert {"layer_norm", "cross_entropy", "nll_loss", "transformer_layers"} <= groups, gid
        # log_softmax is how label smoothing is written
        assert "softmax" not in groups, gid
        # nn.Dropout stays in the modules (idle in eval: the observers would note it); only inverted_dropout forbids it
        assert ("dropout" in groups) == (gid == "inverted_dropout_hidden"), gid
    assert "LayerNorm" in checks.SHORTCUT_NAMES and "CrossEntropyLoss" in checks.SHORTCUT_NAMES
    # honest code writes self.dropout = nn.Dropout(p): never refused by the static reading
    assert "Dropout" not in checks.SHORTCUT_NAMES and "dropout" not in checks.SHORTCUT_NAMES
    # the guard lets F.dropout return its input where it computes nothing (the modules in eval)
    assert "dropout" in builtins.idle_identity(checks.CHECKS["inverted_dropout_hidden"].forbidden)


@pytest.mark.usefixtures("grading_env")
def test_calling_f_cross_entropy_earns_nothing():
    def shortcut(logits, target, eps, ignore_index=-100):
        return F.cross_entropy(logits, target, label_smoothing=eps, ignore_index=ignore_index)

    with pytest.raises(AssertionError, match="F.cross_entropy"):
        run_check(CHAPTER, "label_smoothed_cross_entropy_hidden", shortcut)


@pytest.mark.usefixtures("grading_env")
def test_calling_f_layer_norm_earns_nothing():
    def shortcut(x, weight, bias, eps=1e-5):
        return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)

    with pytest.raises(AssertionError, match="F.layer_norm"):
        run_check(CHAPTER, "layer_norm_hidden", shortcut)


@pytest.mark.usefixtures("grading_env")
def test_f_log_softmax_is_allowed_in_label_smoothing():
    def with_f_log_softmax(logits, target, eps, ignore_index=-100):
        keep = target != ignore_index
        log_p = F.log_softmax(logits, dim=-1)
        nll = -log_p.gather(-1, target.masked_fill(~keep, 0)[:, None])[:, 0]
        loss = (1 - eps) * nll - eps * log_p.mean(dim=-1)
        return (loss * keep).sum() / keep.sum()

    run_check(CHAPTER, "label_smoothed_cross_entropy_hidden", with_f_log_softmax)


# --- Mistakes named on the hidden cases --------------------------------------------------------------------------


@pytest.mark.usefixtures("grading_env")
def test_noam_off_by_one_is_named():
    def off_by_one(step, d_model, warmup):
        if step < 1:
            raise ValueError("step >= 1")
        return ref.noam_lr(step + 1, d_model, warmup)

    with pytest.raises(AssertionError, match="off by one"):
        run_check(CHAPTER, "noam_lr_hidden", off_by_one)
    run_check(CHAPTER, "noam_lr_hidden", ref.noam_lr)


@pytest.mark.usefixtures("grading_env")
def test_noam_without_the_step_0_check_fails_with_the_reason():
    def no_check(step, d_model, warmup):
        return d_model**-0.5 * min(step**-0.5 if step else float("inf"), step * warmup**-1.5)

    with pytest.raises(AssertionError, match="ValueError"):
        run_check(CHAPTER, "noam_lr_hidden", no_check)


@pytest.mark.usefixtures("grading_env")
def test_a_pre_ln_layer_with_a_final_norm_inside_is_named():
    wrong = checks.ENC_MISTAKES[next(k for k in checks.ENC_MISTAKES if k.startswith("a LayerNorm after the FFN"))]
    with pytest.raises(AssertionError, match="final LayerNorm belongs after the last layer"):
        run_check(CHAPTER, "EncoderLayer_hidden", _namespace(EncoderLayer=wrong))
    run_check(CHAPTER, "EncoderLayer_hidden", _namespace())


# --- inverted_dropout: judged by its properties ----------------------------------------------------------------


def _dropout(draw, scale=True, p1_zeros=True):
    def inverted_dropout(x, p, generator=None, training=True):
        if not training or p == 0:
            return x
        if p == 1 and p1_zeros:
            return torch.zeros_like(x)
        keep = draw(x, p, generator).to(x.device)
        return x * keep / (1 - p) if scale else x * keep
    return inverted_dropout


def _rand_keep(x, p, g):
    return torch.rand(x.shape, generator=g, device=x.device if g is None else g.device) >= p


def _bernoulli(prob_kept):
    def draw(x, p, g):
        return torch.bernoulli(torch.full(x.shape, prob_kept(p), dtype=x.dtype, device=x.device if g is None else g.device), generator=g)
    return draw


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize("seed", SEEDS)
def test_any_honest_draw_of_the_mask_passes(seed):
    # Each draws other numbers from the generator than the reference: accepted on every seed.
    run_check(CHAPTER, "inverted_dropout_hidden", ref.inverted_dropout, seed=seed)
    run_check(CHAPTER, "inverted_dropout_hidden", _dropout(_bernoulli(lambda p: 1 - p)), seed=seed)
    run_check(CHAPTER, "inverted_dropout_hidden", _dropout(lambda x, p, g: torch.rand(x.shape, generator=g, dtype=x.dtype) < 1 - p), seed=seed)


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize("wrong, message", [
    (_dropout(_bernoulli(lambda p: p)), "keeps an entry with probability p instead of 1 - p"),
    (_dropout(_rand_keep, scale=False), "not scaled"),
    (_dropout(_rand_keep, p1_zeros=False), "return zeros"),
    (_dropout(lambda x, p, g: torch.rand(x.shape, device=x.device) >= p), "generators seeded alike"),
    (lambda x, p, generator=None, training=True: F.dropout(x, p, training), "F.dropout"),
])
def test_dropout_mistakes_are_named(wrong, message):
    with pytest.raises(AssertionError, match=message):
        run_check(CHAPTER, "inverted_dropout_hidden", wrong)


# --- Valid alternatives beyond the notebook trials (in-process: cheap) -------------------------------------------


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize("seed", SEEDS)
def test_layer_norm_through_the_mean_of_squares_passes(seed):
    def layer_norm(x, weight, bias, eps=1e-5):
        mean = x.mean(-1, keepdim=True)
        var = (x * x).mean(-1, keepdim=True) - mean * mean  # E[x^2] - E[x]^2
        y = (x - mean) / (var + eps).sqrt()
        return y * (1 if weight is None else weight) + (0 if bias is None else bias)

    run_check(CHAPTER, "layer_norm_hidden", layer_norm, seed=seed)


class _InlineEncoderLayer(ref.EncoderLayer):
    """The same layer written without the branch helpers, the mask inverted twice (as a learner fresh from
    nn.TransformerEncoderLayer might write it)."""

    def forward(self, x, mask=None):
        ignore = None if mask is None else ~mask  # PyTorch's convention ...
        allowed = None if ignore is None else ~ignore  # ... and back to the course's
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, allowed)[0])
            return x + self.dropout2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, allowed)[0]))
        return self.norm2(x + self.dropout2(self.ff(x)))


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize("seed", SEEDS)
def test_an_encoder_layer_written_inline_passes(seed):
    run_check(CHAPTER, "EncoderLayer_hidden", _namespace(EncoderLayer=_InlineEncoderLayer), seed=seed)

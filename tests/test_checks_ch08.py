"""Chapter 08's own checker tests: the grader's decoding cases are what they claim (rows ending at different steps,
no near ties), the training cases can tell a pad_id taken as 0 from padding left in the loss, the model of the last
two exercises does not depend on the learner's DecoderLayer, forgetting zero_grad shows in the weights (not the
losses), and the reference agrees with nn.TransformerDecoderLayer on the hidden cases themselves.

What every chapter must keep (reference full marks, blank notebook, every catalogued wrong and valid answer,
hidden inputs that change with the seed, the notebooks): tests/chapter_contract.py; each hidden check's
catalogued mistakes named as themselves: tests/test_mistake_catalogues.py."""

import pytest
import torch

from autograder.authoring import kit
from autograder.checks import ch08_encoder_decoder as checks
from autograder.checks import generator, grader_weights, run_local
from solutions import ch08_encoder_decoder as ref

SEEDS = (3, 21)


def _failure(grade_id, fn, seed, namespace=None):
    """The hidden check's message for `fn` (AssertionError), or None when it passes."""
    try:
        run_local(checks.CHECKS[grade_id], fn, seed=seed, namespace={**vars(ref), **(namespace or {})})
    except AssertionError as failure:
        return str(failure)
    return None


# --- The grader's cases are what they claim ------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS + (1234,))
def test_decoding_cases_end_as_labelled_and_have_no_near_ties(seed):
    for case in checks._greedy_cases(seed):
        model_arg, src, max_len, bos, eos = case.args
        model = checks.toy_model(model_arg.init, model_arg.state)
        path, gap = checks.free_run(model, src, case.kwargs["src_mask"], max_len)
        assert gap >= checks.GAP_MIN, f"{case.label}: near tie {gap:.2e} on the greedy path"
        ends = [s for s in checks.first_steps(path, eos) if s is not None]
        assert ends, f"{case.label}: no row produces the end token"
        if "never" in case.label:
            assert len(ends) < src.size(0), case.label
        else:
            assert len(ends) == src.size(0) and max(ends) - min(ends) >= 2, f"{case.label}: rows end at steps {ends}"
        out = ref.greedy_decode(model, src, max_len, bos, eos, **case.kwargs)
        assert out.shape[1] == 1 + (max(ends) if len(ends) == src.size(0) else max_len)


def test_train_cases_make_pad_id_zero_visible():
    """The case with pad_id 7 has the real token 0 in its labels, so a learner who ignores 0 instead of pad_id
    gets another loss than a learner who ignores nothing (two different mistakes, told apart)."""
    case = checks._train_cases(SEEDS[0])[1]
    tgt, pad_id = case.args[2], case.args[4]
    assert pad_id != 0 and (tgt[:, 1:] == 0).any() and (tgt[:, 1:] == pad_id).any()


def test_decoder_cases_agree_with_torch():
    """The reference is graded as 'nn.TransformerDecoderLayer with the same weights': on the hidden cases
    themselves, with the masks passed in PyTorch's convention."""
    for i, case in enumerate(checks._decoder_cases(SEEDS[0])):
        layer = ref.DecoderLayer(**case.init).double().eval()
        layer.load_state_dict(grader_weights(layer, generator(SEEDS[0], f"{checks.DECODER_SALT}#{i}")))
        theirs = ref.copy_to_torch_decoder_layer(layer).eval()
        x, memory, tgt_mask, mem_mask = case.inputs
        kwargs = {}
        if tgt_mask is not None:
            kwargs["tgt_mask"] = ~tgt_mask if tgt_mask.dim() == 2 else None
            if tgt_mask.dim() == 4:  # causal AND target padding: PyTorch takes them apart
                kwargs["tgt_mask"] = ~torch.ones(x.size(1), x.size(1), dtype=torch.bool).tril()
                kwargs["tgt_key_padding_mask"] = ~tgt_mask[:, 0, -1, :]  # the last query sees every real key
        if mem_mask is not None:
            kwargs["memory_key_padding_mask"] = ~mem_mask[:, 0, 0, :]
        ours = layer(x, memory, tgt_mask, mem_mask)
        expected = theirs(x, memory, **kwargs)
        real = torch.ones(ours.shape[:2], dtype=torch.bool) if tgt_mask is None or tgt_mask.dim() == 2 else tgt_mask[:, 0, -1, :]
        torch.testing.assert_close(ours[real], expected[real], atol=1e-10, rtol=0, msg=case.label)


def test_greedy_and_train_do_not_use_the_learners_decoder_layer():
    """ToyTranslator, the model of exercises 3 and 4, is built from the given blocks only: a broken DecoderLayer
    in the notebook changes nothing there (no double penalty)."""
    broken = checks.DECODER_MISTAKES[checks.INVERTED]
    assert checks.INVERTED in _failure("DecoderLayer_hidden", broken, SEEDS[0], {"DecoderLayer": broken})
    assert _failure("greedy_decode_hidden", ref.greedy_decode, SEEDS[0], {"DecoderLayer": broken}) is None
    assert _failure("train_step_hidden", ref.train_step, SEEDS[0], {"DecoderLayer": broken}) is None
    assert not any(isinstance(m, ref.DecoderLayer) for m in ref.ToyTranslator(9, 10, 8, 2).modules())


def test_zero_grad_forgotten_shows_on_the_second_step():
    """The visible check's two SGD steps: forgetting zero_grad leaves both losses (each computed before its
    update) as they are, and changes the weights after the second update: hence the check compares the weights."""
    init = {"src_vocab": 9, "tgt_vocab": 10, "d_model": 8, "n_heads": 2}
    src = torch.tensor([[3, 5, 7, 4], [6, 8, 0, 0]])
    keep = torch.tensor([[True, True, True, True], [True, True, False, False]]).reshape(2, 1, 1, 4)
    tgt = torch.tensor([[1, 4, 9, 3, 2, 0], [1, 8, 2, 0, 0, 0]])
    right = checks.train_run(kit.demo_module, init)(src, tgt, keep, 0, eps=0.1, lr=0.5, steps=2)
    wrong = checks.train_variants(kit.demo_module, init)[
        next(d for d in checks.TRAIN_MISTAKES if "never cleared" in d)](src, tgt, keep, 0, eps=0.1, lr=0.5, steps=2)
    assert torch.equal(right[:2], wrong[:2]) and (right[2:] - wrong[2:]).abs().max() > 1e-3


@pytest.mark.parametrize("left_out_of", ["encode", "decode"])
def test_greedy_decode_that_leaves_src_mask_out_of_encode_or_decode_fails(left_out_of):
    """The grader's ToyTranslator uses src_mask in encode (it pools the real source positions) as in decode."""
    run_local(checks.CHECKS["greedy_decode_hidden"], ref.greedy_decode, seed=0, device="cpu")
    wrong = checks._greedy_variant(mask_to="decode" if left_out_of == "encode" else "encode")
    assert f"Likely mistake: src_mask is not passed on to model.{left_out_of}" in _failure("greedy_decode_hidden", wrong, 0)


@pytest.mark.parametrize("seed", SEEDS + (1234,))
def test_the_first_decoding_case_tells_where_src_mask_was_left_out_on_any_cpu(seed):
    """Grading seeds are drawn at random, and the learner's float32 kernels are not the grader's float64 ones: on
    the first case (the one reported) the paths with src_mask left out of encode, of decode and of both have no
    near tie, and the four results (right, and the three mistakes) all differ, so each is named as itself.
    (A catalogue with only "left out of both", and no tie check, named the one-sided mistakes on 1 seed in 2.)"""
    case = checks._greedy_cases(seed)[0]
    model_arg, src, max_len, bos, eos = case.args
    model, mask = checks.toy_model(model_arg.init, model_arg.state), case.kwargs["src_mask"]
    for where in ("encode", "decode", "both"):
        gap = checks.free_run(checks._MaskLeftOut(model, where), src, mask, max_len)[1]
        assert gap >= checks.GAP_MIN, f"{case.label}: src_mask left out of {where}: near tie {gap:.2e}"
    outputs = {name: checks._greedy_variant(**kw)(model, src, max_len, bos, eos, **case.kwargs) for name, kw in (
        ("right", {}), ("left out of both", {"use_mask": False}), ("left out of decode", {"mask_to": "encode"}),
        ("left out of encode", {"mask_to": "decode"}))}
    same = [(a, b) for a in outputs for b in outputs if a < b and outputs[a].shape == outputs[b].shape and torch.equal(outputs[a], outputs[b])]
    assert not same, f"{case.label}: these give the same tokens: {same}"


def test_train_step_that_ignores_the_optimizer_it_is_given_fails():
    """The hidden case passes Adam: a train_step that makes its own SGD gives other parameters after its steps."""
    assert any("optimizer" in c.kwargs for c in checks._train_cases(0))
    assert "the optimizer it is given is ignored" in _failure("train_step_hidden", checks._train_variant(own_optimizer=True), 0)


def test_decoder_layer_without_branch_dropout_fails_in_train_mode():
    """train() cases with dropout: the grader's seeded masks show a DecoderLayer with no dropout on its branches."""
    assert "no dropout on the residual branches" in _failure("DecoderLayer_hidden", checks._dec(branch_dropout=False), 0)

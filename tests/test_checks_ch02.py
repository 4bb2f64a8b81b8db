"""Chapter 02's own checker tests: each must fail, with the right diagnosis, on wrong code written here (devices,
dtypes, in-place edits, forbidden built-ins, fully masked rows, callers of a wrong softmax); the visible-check helpers.

What every chapter must keep (reference full marks, blank notebook, every catalogued wrong and valid answer,
hidden inputs that change with the seed, the notebooks): tests/chapter_contract.py; each hidden check's
catalogued mistakes named as themselves: tests/test_mistake_catalogues.py."""

import math

import harness
import pytest
import torch

from autograder.checks import visible
from autograder.checks import run_local
from autograder import registry
from autograder.checks import ch02_qkv_attention as checks
from autograder.checks import run_check
from solutions import ch02_qkv_attention as ref

CHAPTER = "02-qkv-attention"
M = harness.material(CHAPTER)
trials = registry.answers(CHAPTER)  # the chapter's test data: wrong answers, valid alternatives

# --- Hidden checks ---------------------------------------------------------------------------------


@pytest.mark.usefixtures("grading_env")
def test_meta_pass_catches_a_mask_created_on_the_cpu():
    def sdpa_with_cpu_tensor(q, k, v, mask=None):
        # A typical device bug: a tensor made on the CPU regardless of where q lives.
        out, weights = ref.scaled_dot_product_attention(q, k, v, mask)
        keep = torch.ones(weights.shape[-2:], dtype=torch.bool)  # no device=q.device
        return out, weights.masked_fill(~keep, 0.0)

    with pytest.raises(AssertionError, match="device"):
        run_check(CHAPTER, "scaled_dot_product_attention_hidden", sdpa_with_cpu_tensor)


@pytest.mark.usefixtures("grading_env")
def test_dtype_loss_is_reported():
    def softmax_in_float32(x, dim=-1):
        return ref.stable_softmax(x.float(), dim)

    with pytest.raises(AssertionError, match="dtype"):
        run_check(CHAPTER, "stable_softmax_hidden", softmax_in_float32)


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize(
    "wrong,message",
    [
        (lambda d_k, n, g: (1.0, 1.0 / d_k), "expected about d_k"),
        (lambda d_k, n, g: ref.dot_product_variance(d_k, n, None), "same generator"),
        (lambda d_k, n, g: (lambda r: (r[0], r[0] / d_k**2))(ref.dot_product_variance(d_k, n, g)), "divide by sqrt(d_k), not d_k"),
        (lambda d_k, n, g: torch.tensor(ref.dot_product_variance(d_k, n, g)), "tuple of two Python floats"),
    ],
)
def test_variance_check_fails_on_wrong_experiments(wrong, message):
    with pytest.raises(AssertionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run_check(CHAPTER, "dot_product_variance_hidden", wrong)


# --- Visible-check helpers (copied into every notebook) ---------------------------------------------


def test_expect_close_passes_on_right_and_names_a_known_mistake():
    expected = torch.tensor([0.2, 0.3, 0.5])
    visible.expect_close(expected + 1e-6, expected, "w")
    wrong = torch.tensor([0.5, 0.3, 0.2])
    with pytest.raises(visible.CheckFailed, match="reversed"):
        visible.expect_close(wrong, expected, "w", mistakes={"reversed": wrong.clone()})
    with pytest.raises(visible.CheckFailed, match="largest difference"):
        visible.expect_close(torch.tensor([0.1, 0.1, 0.8]), expected, "w", mistakes={"reversed": wrong})


def test_expect_attention_weights_reports_rows_not_summing_to_one():
    expected = torch.tensor([[0.5, 0.5], [0.25, 0.75]])
    visible.expect_attention_weights(expected.clone(), expected)
    with pytest.raises(visible.CheckFailed, match="sum to 1"):
        visible.expect_attention_weights(torch.tensor([[0.5, 0.0], [0.25, 0.75]]), expected)


def test_expect_shape_and_near():
    visible.expect_shape(torch.zeros(2, 3), (2, 3), "x")
    with pytest.raises(visible.CheckFailed, match=r"shape \(3, 2\)"):
        visible.expect_shape(torch.zeros(3, 2), (2, 3), "x")
    visible.expect_near(63.0, 64.0, "v", rel=0.08)
    with pytest.raises(visible.CheckFailed, match="expected about 64"):
        visible.expect_near(1.0, 64.0, "v", rel=0.08)
    with pytest.raises(visible.CheckFailed, match="Python float"):
        visible.expect_near(torch.tensor(64.0), 64.0, "v")


def test_call_turns_exceptions_into_diagnoses():
    def not_done(x):
        raise NotImplementedError()

    with pytest.raises(visible.CheckFailed, match="not implemented yet"):
        visible.call(not_done, 1)
    q = torch.randn(3, 2)
    with pytest.raises(visible.CheckFailed, match="K is not transposed"):
        visible.call(checks.SDPA_MISTAKES["K is not transposed: the scores are Q Kᵀ, not Q K"], q, q, q, error_hints=checks.ERROR_HINTS)
    assert math.isclose(visible.call(lambda x: x + 1, 1), 2)


@pytest.mark.usefixtures("grading_env")
def test_learner_editing_inputs_in_place_is_reported():
    def sdpa_scaling_q_in_place(q, k, v, mask=None):
        q /= 2.0  # wrong, and it edits the caller's tensor
        return ref.scaled_dot_product_attention(q, k, v, mask)

    def right_values_but_zeroes_v_afterwards(q, k, v, mask=None):
        out = ref.scaled_dot_product_attention(q, k, v, mask)
        v.zero_()
        return out

    for fn in (sdpa_scaling_q_in_place, right_values_but_zeroes_v_afterwards):
        with pytest.raises(AssertionError, match="changed its input tensors in place"):
            run_check(CHAPTER, "scaled_dot_product_attention_hidden", fn)


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize("shortcut", [
    lambda x, dim=-1: torch.softmax(x, dim=dim),
    lambda x, dim=-1: x.softmax(dim),
    lambda x, dim=-1: torch.nn.functional.softmax(x, dim=dim),
    lambda x, dim=-1: torch.special.softmax(x, dim),
    lambda x, dim=-1: torch.exp(torch.log_softmax(x, dim=dim)),
])
def test_forbidden_built_ins_earn_nothing_even_when_right(shortcut):
    with pytest.raises(AssertionError, match="the built-in this exercise asks you to write yourself"):
        run_check(CHAPTER, "stable_softmax_hidden", shortcut)


@pytest.mark.usefixtures("grading_env")
def test_calling_torch_sdpa_is_caught_however_it_is_reached():
    sdpa = getattr(torch.nn.functional, "scaled_" + "dot_product_attention")  # hidden from a text search

    def via_alias(q, k, v, mask=None):
        out = sdpa(q, k, v, attn_mask=mask)
        return out, ref.scaled_dot_product_attention(q, k, v, mask)[1]

    with pytest.raises(AssertionError, match="F.scaled_dot_product_attention"):
        run_check(CHAPTER, "scaled_dot_product_attention_hidden", via_alias)


def test_expect_mask_passes_the_mask_and_fails_on_dtype_entries_or_a_named_mistake():
    causal = torch.ones(3, 3, dtype=torch.bool).tril()
    visible.expect_mask(causal.clone(), causal, "mask")
    with pytest.raises(visible.CheckFailed, match="masks are boolean"):
        visible.expect_mask(causal.float(), causal, "mask")
    with pytest.raises(visible.CheckFailed, match=r"\(shape \(1, 3, 3\), expected \(3, 3\)\).*this mistake: an extra dimension"):
        visible.expect_mask(causal[None], causal, "mask", mistakes={"an extra dimension": causal[None]})
    with pytest.raises(visible.CheckFailed, match="this mistake: triu instead of tril"):
        visible.expect_mask(causal.T.clone(), causal, "mask", mistakes={"triu instead of tril": causal.T})
    with pytest.raises(visible.CheckFailed, match="3 entries differ"):
        visible.expect_mask(torch.ones(3, 3, dtype=torch.bool), causal, "mask", mistakes={"triu instead of tril": causal.T})


# --- Issue 15: what a learner met (fully masked rows, precision, callers of a wrong callee, visible catches) ----


@pytest.mark.usefixtures("grading_env")
def test_a_query_with_no_allowed_key_may_give_nan_or_zeros_but_not_equal_weights():
    plan = checks.CHECKS["scaled_dot_product_attention_hidden"].plan(7, "cpu")
    masks = [c.args[3] for c in plan if len(c.args) > 3]  # the calls' masks (CPU tensors, whatever the device)
    assert any(not mask.any(dim=-1).all() for mask in masks), \
        "the hidden cases must contain a query whose keys are all masked (the visible check shows one)"

    def zeros_there(q, k, v, mask=None):  # what F.scaled_dot_product_attention returns for such a row
        out, weights = ref.scaled_dot_product_attention(q, k, v, mask)
        return out.nan_to_num(0.0), weights.nan_to_num(0.0)

    run_check(CHAPTER, "scaled_dot_product_attention_hidden", zeros_there)
    with pytest.raises(AssertionError, match=r"large negative number \(e\.g\. -1e9\)"):
        run_check(CHAPTER, "scaled_dot_product_attention_hidden", checks.SDPA_MISTAKES[next(m for m in checks.SDPA_MISTAKES if "-1e9" in m)])


@pytest.mark.usefixtures("grading_env")
def test_a_softmax_computed_in_float32_and_cast_back_is_told_precision_was_lost():
    def cast_back(x, dim=-1):
        x32 = x.float()
        e = torch.exp(x32 - x32.amax(dim=dim, keepdim=True))
        return (e / e.sum(dim=dim, keepdim=True)).to(x.dtype)

    with pytest.raises(AssertionError, match="cast back"):
        run_check(CHAPTER, "stable_softmax_hidden", cast_back)


@pytest.mark.usefixtures("grading_env")
def test_variance_returning_tensors_is_told_in_words():
    with pytest.raises(AssertionError) as failure:
        run_check(CHAPTER, "dot_product_variance_hidden", lambda d_k, n, g: tuple(torch.tensor(r) for r in ref.dot_product_variance(d_k, n, g)))
    assert "a tensor, a tensor" in str(failure.value) and ".item()" in str(failure.value)
    assert "Returned(" not in str(failure.value)


_MATRIX_ONLY_SOFTMAX = trials.WRONG_ANSWERS["softmax_for_matrices_only"].new


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize("softmax", [
    _MATRIX_ONLY_SOFTMAX,  # raises on vectors and batches
    "def stable_softmax(x, dim=-1):\n    x_max = x.amax(dim=dim, keepdim=True)\n    e = torch.exp(x.sub_(x_max))\n    return e / e.sum(dim=dim, keepdim=True)\n",
    "def stable_softmax(x, dim=-1):\n    x32 = x.float()\n    e = torch.exp(x32 - x32.amax(dim=dim, keepdim=True))\n    return (e / e.sum(dim=dim, keepdim=True)).to(x.dtype)\n",
], ids=["raises on batches", "edits its input in place", "float32 cast back"])
def test_correct_callers_keep_their_points_when_the_softmax_is_wrong(softmax):
    namespace = harness.namespace_of(M, sources={"stable_softmax": softmax})
    with pytest.raises(AssertionError):
        run_local(checks.CHECKS["stable_softmax_hidden"], namespace["stable_softmax"], namespace=namespace)
    for gid in ("scaled_dot_product_attention_hidden", "self_attention_hidden"):
        check = checks.CHECKS[gid]
        run_local(check, namespace[check.function], namespace=namespace)


@pytest.mark.usefixtures("grading_env")
def test_a_softmax_written_for_matrices_only_is_told_why():
    namespace = harness.namespace_of(M, sources={"stable_softmax": _MATRIX_ONLY_SOFTMAX})
    with pytest.raises(AssertionError, match="works only for matrices"):
        run_check(CHAPTER, "stable_softmax_hidden", namespace["stable_softmax"])


@pytest.mark.parametrize("wrong,cell,diagnosis", [
    ("softmax_float32_cast_back", "stable_softmax_visible", "precision is lost"),
    ("softmax_edits_its_input", "stable_softmax_visible", "changed its input x in place"),
    ("sdpa_d_k_from_dim_1", "scaled_dot_product_attention_visible", "d_k read from the wrong dimension"),
    ("sdpa_fill_minus_1e9", "scaled_dot_product_attention_visible", "-1e9"),
    ("sdpa_masked_fill_not_assigned", "scaled_dot_product_attention_visible", "the mask is not used"),
    ("self_attention_drops_mask", "self_attention_visible", "the mask is not used"),
    # a caller's visible check names the callee when the callee is what is wrong
    ("sdpa_returns_weights_first", "self_attention_visible", "fix exercise 2 first"),
    ("sdpa_missing_scale_with_self_attention_keywords", "self_attention_visible", "fix exercise 2 first"),
])
def test_the_visible_checks_name_what_the_hidden_ones_grade(wrong, cell, diagnosis):
    message = harness.learner_run(M, wrong=(wrong,)).message(cell)  # the contract's run of this wrong answer
    assert message, f"{wrong}: the visible check {cell} passes"
    assert diagnosis in message, message[:500]


@pytest.mark.parametrize("cases,reference,catalogue", [
    (checks._softmax_cases, ref.stable_softmax, checks.ALL_SOFTMAX_MISTAKES),
    (checks._attention_cases, ref.scaled_dot_product_attention, checks.SDPA_MISTAKES),
    (checks._self_attention_cases, ref.self_attention, checks.SELF_ATTENTION_MISTAKES),
], ids=["stable_softmax", "scaled_dot_product_attention", "self_attention"])
def test_each_catalogued_mistake_is_told_apart_from_the_others_where_it_is_named(cases, reference, catalogue):
    def same(a, b):
        a, b = (x if isinstance(x, tuple) else (x,) for x in (a, b))
        return all(x.shape == y.shape and torch.allclose(x, y, equal_nan=True, atol=1e-10, rtol=1e-8) for x, y in zip(a, b))

    for seed in (3, 7, 21):
        for case in cases(seed):
            args = tuple(a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in case.args)
            expected = reference(*args, **case.kwargs)
            outputs = {}
            for description, wrong in catalogue.items():
                try:
                    outputs[description] = wrong(*args, **case.kwargs)
                except Exception:
                    continue  # named by its error instead
            named = [d for d, out in outputs.items() if not same(out, expected)]
            for i, first in enumerate(named):
                for second in named[i + 1:]:
                    assert not same(outputs[first], outputs[second]), f"{case.label} (seed {seed}): {first!r} and {second!r} give the same values"

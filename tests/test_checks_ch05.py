"""Chapter 05's own checker tests: wrong code written here (devices, float masks, fills, rows with no allowed key,
SDPA), and what the notebook tells a learner beyond the contract: the leakage proof, a caller's visible check that
fails only by naming the callee at fault (notebooks run through tests/harness.py).

What every chapter must keep (reference full marks, blank notebook, every catalogued wrong and valid answer,
hidden inputs that change with the seed, the notebooks): tests/chapter_contract.py; each hidden check's
catalogued mistakes named as themselves: tests/test_mistake_catalogues.py.
"""

import harness
import pytest
import torch

from autograder import registry
from autograder.checks import visible
from autograder.checks import ch05_masks as checks
from autograder.checks import run_check
from solutions import ch05_masks as ref

CHAPTER = "05-masks"
M = harness.material(CHAPTER)
trials = registry.answers(CHAPTER)  # the chapter's test data: wrong answers, valid alternatives
FUNCTIONS = ("causal_mask", "padding_mask", "combine_masks", "masked_attention", "dependency_matrix", "causal_mask_bottom_right")


# --- Hidden checks on wrong code written here ------------------------------------------------------------


@pytest.mark.usefixtures("grading_env")
def test_meta_pass_catches_a_mask_created_on_the_cpu():
    def causal_mask_ignoring_device(n, device=None):
        return torch.ones(n, n, dtype=torch.bool).tril()  # the device argument is ignored

    with pytest.raises(AssertionError, match="meta"):
        run_check(CHAPTER, "causal_mask_hidden", causal_mask_ignoring_device)


@pytest.mark.usefixtures("grading_env")
def test_a_float_mask_is_told_that_masks_are_boolean():
    with pytest.raises(AssertionError, match="masks in this course are boolean"):
        run_check(CHAPTER, "causal_mask_hidden", lambda n, device=None: torch.ones(n, n, device=device).tril())


def _attention_hiding_nan(q, k, v, mask=None, fill_value=float("-inf")):
    """Rows with no allowed key returned as zeros (as F.scaled_dot_product_attention does) instead of NaN."""
    out, weights = ref.masked_attention(q, k, v, mask, fill_value)
    return out.nan_to_num(0.0), weights.nan_to_num(0.0)


@pytest.mark.usefixtures("grading_env")
def test_a_row_with_no_allowed_key_may_be_nan_or_zeros_with_the_default_fill():
    # The course's one rule (chapters 02 to 05): with fill -inf such a row is NaN (0/0) or all 0; both keep full marks.
    run_check(CHAPTER, "masked_attention_hidden", _attention_hiding_nan)
    run_check(CHAPTER, "masked_attention_hidden", ref.masked_attention)


@pytest.mark.usefixtures("grading_env")
def test_a_row_with_no_allowed_key_must_be_uniform_with_a_finite_fill():
    # Zeros are accepted where the formula gives NaN, not where it gives numbers: a finite fill gives uniform weights.
    def zeros_whatever_the_fill(q, k, v, mask=None, fill_value=float("-inf")):
        out, weights = ref.masked_attention(q, k, v, mask, fill_value)
        if mask is None:
            return out, weights
        empty = ~mask.any(dim=-1, keepdim=True)
        return out.masked_fill(empty, 0.0), weights.masked_fill(empty, 0.0)

    with pytest.raises(AssertionError, match="row 2 is uniform"):
        run_check(CHAPTER, "masked_attention_hidden", zeros_whatever_the_fill)


@pytest.mark.usefixtures("grading_env")
def test_a_hard_coded_fill_is_caught_by_what_it_does_wrong():
    # -1e9 gives uniform weights over the masked keys of a row with no allowed key, where fill -inf gives NaN (or 0).
    def hard_coded(q, k, v, mask=None, fill_value=float("-inf")):
        return ref.masked_attention(q, k, v, mask, -1e9)

    with pytest.raises(AssertionError, match="a hard-coded fill such as -1e9") as failure:
        run_check(CHAPTER, "masked_attention_hidden", hard_coded)
    assert "default fill -inf" in str(failure.value)


@pytest.mark.usefixtures("grading_env")
def test_a_fill_that_cannot_survive_float64_loses_the_points_the_visible_check_takes():
    # The visible check uses fill_value=torch.finfo(torch.float64).min; the hidden check has that case too (in float64
    # only: float32 scores cannot hold it), so a fill made as a float32 tensor (-inf) fails both.
    def float32_fill(q, k, v, mask=None, fill_value=float("-inf")):
        scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
        if mask is not None:
            scores = torch.where(mask, scores, torch.tensor(fill_value))
        weights = torch.softmax(scores, dim=-1)
        return weights @ v, weights

    with pytest.raises(AssertionError, match=r"finfo\(torch.float64\).min \(float64 only\)") as failure:
        run_check(CHAPTER, "masked_attention_hidden", float32_fill)
    assert "converted to float32" in str(failure.value)
    calls = checks.CHECKS["masked_attention_hidden"].plan(0, "cpu")
    only64 = [c for c in calls if checks.FLOAT64_ONLY in c.label]
    assert only64 and all(c.dtype == torch.float64 and c.device == "cpu" for c in only64)


@pytest.mark.usefixtures("grading_env")
def test_mask_not_applied_and_mask_after_softmax_are_told_apart():
    def not_applied(q, k, v, mask=None, fill_value=float("-inf")):
        return ref.masked_attention(q, k, v, None, fill_value)

    def after_softmax(q, k, v, mask=None, fill_value=float("-inf")):
        out, weights = ref.masked_attention(q, k, v, None)
        if mask is not None:
            weights = weights.masked_fill(~mask, 0.0)
        return weights @ v, weights

    with pytest.raises(AssertionError) as failure:
        run_check(CHAPTER, "masked_attention_hidden", not_applied)
    assert "the mask is not applied at all" in str(failure.value) and "after the softmax" not in str(failure.value)
    with pytest.raises(AssertionError) as failure:
        run_check(CHAPTER, "masked_attention_hidden", after_softmax)
    assert "mask applied after the softmax" in str(failure.value) and "not applied at all" not in str(failure.value)


@pytest.mark.usefixtures("grading_env")
def test_a_padding_mask_that_reads_the_lengths_values_keeps_its_points():
    # .tolist() cannot run on 'meta' lengths: that proves no device mistake (the mask is made on lengths.device).
    def by_loop(lengths, max_len):
        lengths = torch.as_tensor(lengths)
        mask = torch.zeros(len(lengths), max_len, dtype=torch.bool, device=lengths.device)
        for b, n in enumerate(lengths.tolist()):
            mask[b, :n] = True
        return mask[:, None, None, :]

    run_check(CHAPTER, "padding_mask_hidden", by_loop)
    visible.expect_meta(by_loop, torch.empty(3, dtype=torch.long, device="meta"), 4, shape=(3, 1, 1, 4), what="padding_mask on meta")


@pytest.mark.usefixtures("grading_env")
def test_sdpa_is_forbidden_in_masked_attention():
    import torch.nn.functional as F

    def via_sdpa(q, k, v, mask=None, fill_value=float("-inf")):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), ref.masked_attention(q, k, v, mask, fill_value)[1]

    with pytest.raises(AssertionError, match="F.scaled_dot_product_attention"):
        run_check(CHAPTER, "masked_attention_hidden", via_sdpa)


# --- Learner trials: the student notebook, filled in, with one edit ----------------------------------------


def test_visible_checks_print_that_they_passed_and_the_leakage_proof(capsys):
    # (That they pass is the chapter contract's; how long they take is measured by scripts/time_visible_checks.py.)
    assert not harness.run_notebook(harness.filled(M)).failures()
    out = capsys.readouterr().out
    assert all(f"{f}: visible checks passed" in out for f in FUNCTIONS), out
    assert "No future leakage" in out


@pytest.mark.parametrize("name", list(trials.WRONG_ANSWERS))
def test_no_other_visible_check_fails_for_a_mistake_or_blames_the_wrong_function(name, capsys):
    # A caller's visible check may fail for its callee's mistake only by naming that callee (e.g. a bottom-right mask
    # built from a wrong causal_mask); the leakage proof in dependency_matrix's check never fails for it.
    wrong = trials.WRONG_ANSWERS[name]
    outcomes = harness.learner_run(M, wrong=(name,)).outcomes  # the chapter contract's run of this wrong answer
    for gid, error in outcomes.items():
        if error is None or not str(gid).endswith("_visible") or gid == f"{wrong.function}_visible":
            continue
        owner = gid.removesuffix("_visible")
        assert owner != "dependency_matrix", f"{name}: dependency_matrix's visible check fails for another exercise's mistake: {error!r}"
        assert f"uses your {wrong.function}" in str(error) and owner in {e.function for e in wrong.also}, \
            f"{name}: the visible check {gid} fails without naming {wrong.function}: {error!r}"
    capsys.readouterr()


def test_a_bottom_right_mask_built_from_a_wrong_causal_mask_is_told_so_visibly():
    message = harness.learner_run(M, wrong=("causal_triu_with_bottom_right_from_it",)).message("causal_mask_bottom_right_visible")
    assert "uses your causal_mask, which is not right yet" in message and "exercise 1 only" in message
    valid = harness.run_notebook(harness.filled(M, valid=["bottom_right_from_own_causal"]), visible={"causal_mask_bottom_right_visible"})
    assert valid.message("causal_mask_bottom_right_visible") is None


def test_a_mistake_in_masked_attention_is_shown_by_the_leakage_proof_only(capsys):
    # The proof in exercise 5's visible check runs YOUR attention; a leak is reported there, but
    # dependency_matrix's own checks (visible and hidden) still pass.
    ns = harness.namespace_of(M, ["attention_zero_fill"])
    capsys.readouterr()
    assert harness.run_cell(M.student, "dependency_matrix_visible", ns) is None
    out = capsys.readouterr().out
    assert "dependency_matrix: visible checks passed" in out and "your attention leaks" in out


# --- Build-time helpers ---------------------------------------------------------------------------------


def test_reference_gradients_helper_matches_autograd(gen):
    q, k, v = (torch.randn(4, 2, generator=gen, dtype=torch.float64) for _ in range(3))
    r1, r2 = torch.randn(4, 2, generator=gen, dtype=torch.float64), torch.randn(4, 4, generator=gen, dtype=torch.float64)
    grads = checks.reference_gradients(q, k, v, ref.causal_mask(4), r1, r2)
    qq = q.clone().requires_grad_(True)
    out, w = ref.masked_attention(qq, k, v, ref.causal_mask(4))
    ((out * r1).sum() + (w * r2).sum()).backward()
    torch.testing.assert_close(grads[0], qq.grad)

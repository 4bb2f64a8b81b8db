"""Chapter 05's checks: each must pass the reference AND fail, with the right diagnosis, on wrong code.

Learner trials run the generated student notebook's cells as a learner would (imports, check helpers, the
solution cells filled in from solutions/, the read-only cells), with one typical mistake or one valid
alternative applied as an edit of the reference source: every wrong answer must lose the points of its own
exercise with its diagnosis, and be caught by its visible check too; every valid alternative must pass both.
"""

import functools
import inspect

import nbformat
import pytest
import torch

from autograder import course, nbchecks
from autograder.checks import ch05_masks as checks
from autograder.checks import run_local
from solutions import ch05_masks as ref

CHAPTER = "05-masks"
FUNCTIONS = ("causal_mask", "padding_mask", "combine_masks", "masked_attention", "dependency_matrix", "causal_mask_bottom_right")
CATALOGUES = {
    "causal_mask": checks.CAUSAL_MISTAKES,
    "padding_mask": checks.PADDING_MISTAKES,
    "combine_masks": checks.COMBINE_MISTAKES,
    "masked_attention": checks.ATTENTION_MISTAKES,
    "dependency_matrix": checks.DEPENDENCY_MISTAKES,
    "causal_mask_bottom_right": checks.BOTTOM_RIGHT_MISTAKES,
}


def hidden(function):
    return getattr(checks, f"check_{function}")


# --- Hidden checks on the reference and on the catalogued mistakes ---------------------------------------


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize("function", FUNCTIONS)
def test_hidden_checks_pass_the_reference(function):
    hidden(function)(getattr(ref, function))


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize("seed", ["0", "1", "123"])
def test_hidden_checks_pass_the_reference_for_other_seeds(monkeypatch, seed):
    monkeypatch.setenv("COURSE_GRADING_SEED", seed)
    for function in FUNCTIONS:
        hidden(function)(getattr(ref, function))


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize("function,description", [(f, d) for f, catalogue in CATALOGUES.items() for d in catalogue])
def test_hidden_check_names_each_catalogued_mistake(function, description):
    with pytest.raises(AssertionError) as failure:
        hidden(function)(CATALOGUES[function][description])
    assert description in str(failure.value)


@pytest.mark.usefixtures("grading_env")
def test_meta_pass_catches_a_mask_created_on_the_cpu():
    def causal_mask_ignoring_device(n, device=None):
        return torch.ones(n, n, dtype=torch.bool).tril()  # the device argument is ignored

    with pytest.raises(AssertionError, match="meta"):
        checks.check_causal_mask(causal_mask_ignoring_device)


@pytest.mark.usefixtures("grading_env")
def test_a_float_mask_is_told_that_masks_are_boolean():
    with pytest.raises(AssertionError, match="masks in this course are boolean"):
        checks.check_causal_mask(lambda n, device=None: torch.ones(n, n, device=device).tril())


@pytest.mark.usefixtures("grading_env")
def test_fully_masked_row_must_be_nan_with_the_default_fill():
    # A learner who "fixes" the NaN row by zeroing it gets told: the exercise states the row is NaN.
    def attention_hiding_nan(q, k, v, mask=None, fill_value=float("-inf")):
        out, weights = ref.masked_attention(q, k, v, mask, fill_value)
        return out.nan_to_num(0.0), weights.nan_to_num(0.0)

    with pytest.raises(AssertionError, match="allows no key"):
        checks.check_masked_attention(attention_hiding_nan)


@pytest.mark.usefixtures("grading_env")
def test_sdpa_is_forbidden_in_masked_attention():
    import torch.nn.functional as F

    def via_sdpa(q, k, v, mask=None, fill_value=float("-inf")):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), ref.masked_attention(q, k, v, mask, fill_value)[1]

    with pytest.raises(AssertionError, match="F.scaled_dot_product_attention"):
        checks.check_masked_attention(via_sdpa)


@pytest.mark.usefixtures("grading_env")
def test_hidden_checks_use_the_grading_seed(monkeypatch):
    seen = []

    def spy(lengths, max_len):
        seen.append(lengths.clone() if lengths.device.type != "meta" else None)
        return ref.padding_mask(lengths, max_len)

    checks.check_padding_mask(spy)
    first = seen[0]
    seen.clear()
    monkeypatch.setenv("COURSE_GRADING_SEED", "8")
    checks.check_padding_mask(spy)
    assert not torch.equal(first, seen[0]) or first.shape != seen[0].shape, "a new grading seed must give new inputs"


# --- Learner trials: the student notebook, filled in, with one edit ----------------------------------------


@functools.lru_cache(maxsize=1)
def notebook_cells():
    nb = nbformat.read(course.student_notebook(CHAPTER), as_version=4)
    return [(c.metadata.get("nbgrader", {}), c.id, c.source) for c in nb.cells if c.cell_type == "code"]


def learner_namespace(edits=()):
    """Run the notebook's set-up, solution (reference + edits) and read-only cells, not the check cells."""
    ns = {"__name__": "__main__"}
    for meta, cell_id, source in notebook_cells():
        gid = meta.get("grade_id", cell_id)
        if meta.get("solution"):
            source = inspect.getsource(getattr(ref, gid))
            for function, old, new in edits:
                if function == gid:
                    assert old in source, f"the edit no longer applies to {gid}: {old!r}"
                    source = source.replace(old, new, 1)
        elif meta.get("grade") or gid.endswith("_visible") or not meta:
            continue  # hidden tests, visible checks, the optional cell
        exec(compile(source, gid, "exec"), ns)
    return ns


def visible_cell(function):
    return next(source for meta, _, source in notebook_cells() if meta.get("grade_id") == f"{function}_visible")


def run_visible(function, ns):
    exec(compile(visible_cell(function), f"{function}_visible", "exec"), ns)


def hidden_in(ns, function):
    run_local(checks.CHECKS[f"{function}_hidden"], ns[function], namespace=ns)


def test_visible_checks_pass_the_reference(capsys):
    # (How long they take is measured by scripts/time_visible_checks.py, not asserted here.)
    ns = learner_namespace()
    for function in FUNCTIONS:
        run_visible(function, ns)
    out = capsys.readouterr().out
    assert all(f"{f}: visible checks passed" in out for f in FUNCTIONS), out
    assert "No future leakage" in out


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize("name", list(checks.WRONG_ANSWERS))
def test_wrong_answer_loses_its_points_and_is_seen_by_its_visible_check(name):
    wrong = checks.WRONG_ANSWERS[name]
    ns = learner_namespace([(wrong.function, wrong.old, wrong.new)])
    with pytest.raises(AssertionError) as failure:
        hidden_in(ns, wrong.function)
    assert wrong.diagnosis in str(failure.value), str(failure.value)
    # no other exercise loses points for it
    for other in FUNCTIONS:
        if f"{other}_hidden" not in wrong.failing_cells:
            hidden_in(ns, other)
    if wrong.visible:
        with pytest.raises(Exception) as seen:
            run_visible(wrong.function, ns)
        assert isinstance(seen.value, nbchecks.CheckFailed) or type(seen.value).__name__ == "CheckFailed", repr(seen.value)


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize("name", list(checks.VALID_ALTERNATIVES))
def test_valid_alternative_passes_hidden_and_visible_checks(name, capsys):
    function, old, new = checks.VALID_ALTERNATIVES[name]
    ns = learner_namespace([(function, old, new)])
    hidden_in(ns, function)
    run_visible(function, ns)
    assert f"{function}: visible checks passed" in capsys.readouterr().out


@pytest.mark.parametrize("function", FUNCTIONS)
def test_every_graded_category_has_a_wrong_answer_caught_by_the_visible_check(function):
    check = checks.CHECKS[f"{function}_hidden"]
    seen = {w.category for w in checks.WRONG_ANSWERS.values() if w.function == function and w.visible}
    missing = [c for c in check.categories if c not in seen]
    assert not missing, f"{function}: no visible wrong answer of category {missing}"


def test_a_mistake_in_masked_attention_is_shown_by_the_leakage_proof_only(capsys):
    # The proof in exercise 5's visible check runs YOUR attention; a leak is reported there, but
    # dependency_matrix's own checks (visible and hidden) still pass.
    wrong = checks.WRONG_ANSWERS["attention_zero_fill"]
    ns = learner_namespace([(wrong.function, wrong.old, wrong.new)])
    run_visible("dependency_matrix", ns)
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

"""The chapter contract (tests/chapter_contract.py), run for every chapter with exercises, item by item: a new
chapter in the registry gets the whole contract by existing. Then the contract itself is tested: a copy of a
chapter broken in memory (a solution left in the student notebook, a heading with the wrong points, a wrong
answer its visible check misses, a check whose inputs ignore the seed, ...) must fail the item that guards it.

The items that run notebooks (reference, blank, wrong answers, valid alternatives) are the slow ones: each
catalogued answer is run once here, cell by cell in-process, and graded in-process; the sandboxed end-to-end
path is tested in test_pipeline.py.
"""

import dataclasses
import re
import types

import pytest

import chapter_contract as contract
import harness
from autograder import registry
from autograder.authoring.answers import Edit, ValidAnswer

CHAPTERS = registry.graded_chapters()

# Known breaches, for the chapter's helper to fix: (chapter, item name) -> why. strict: the mark must go when fixed.
KNOWN = {}
# Wrong answers whose visible check shows the learner's own exception rather than a CheckFailed diagnosis, and why.
RAW_ERRORS = {
    "02-qkv-attention": {"softmax_only_last_dim": "the learner's stable_softmax raises ValueError('only dim=-1 is supported') "
                                                   "itself, and the visible check shows it as is"},
}


@pytest.mark.parametrize("item", [
    pytest.param(item, id=item.__name__) for item in contract.CONTRACT])
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_keeps_the_contract(chapter, item, request):
    if (chapter, item.__name__) in KNOWN:
        request.applymarker(pytest.mark.xfail(strict=True, reason=KNOWN[(chapter, item.__name__)]))
    if item is contract.wrong_answers_are_caught:
        item(harness.material(chapter), raw_errors=RAW_ERRORS.get(chapter, {}))
    else:
        item(harness.material(chapter))


# --- A broken chapter fails the contract ---------------------------------------------------------------------
# Each test breaks one thing in a copy of a chapter's material and shows that the item guarding it raises, with
# a message that names what is broken. The notebook-running ones use one chapter and one answer (they are slow).

BROKEN = "02-qkv-attention"


def cell(nb, gid):
    return next(c for c in nb.cells if harness.grade_id(c) == gid)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_solution_left_in_the_student_notebook_fails(chapter):
    m = harness.material(chapter)
    for solution in harness.solution_cells(m.instructor):
        gid = solution.metadata.nbgrader.grade_id
        broken = m.changed()
        inside, outside = contract._regions(solution.source, contract.SOLUTION_MARKERS)
        cell(broken.student, gid).source = "\n".join(outside + inside)  # the instructor's cell, markers removed
        with pytest.raises(AssertionError, match=f"cell {gid} shows a solution line"):
            contract.student_notebook_hides_the_solutions(broken)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_solution_markers_or_hidden_tests_left_in_the_student_notebook_fail(chapter):
    m = harness.material(chapter)
    first_solution = harness.grade_id(harness.solution_cells(m.instructor)[0])
    first_graded = harness.grade_id(harness.graded_cells(m.instructor)[0])
    for gid, match in ((first_solution, "BEGIN SOLUTION"), (first_graded, "BEGIN HIDDEN TESTS")):
        broken = m.changed()
        cell(broken.student, gid).source = cell(m.instructor, gid).source
        with pytest.raises(AssertionError, match=match):
            contract.student_notebook_hides_the_solutions(broken)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_heading_whose_points_disagree_with_its_graded_cells_fails(chapter):
    broken = harness.material(chapter).changed()
    heading = next(c for c in broken.student.cells if c.cell_type == "markdown" and re.search(r"\(\d+ points?\)", c.source))
    heading.source = re.sub(r"\((\d+) (points?)\)", lambda h: f"({int(h.group(1)) + 1} points)", heading.source, count=1)
    with pytest.raises(AssertionError, match="announces"):
        contract.headings_announce_the_graded_points(broken)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_graded_points_that_differ_from_the_instructor_notebook_fail(chapter):
    broken = harness.material(chapter).changed()
    harness.graded_cells(broken.student)[0].metadata.nbgrader.points += 1
    with pytest.raises(AssertionError, match="graded cells and points differ"):
        contract.headings_announce_the_graded_points(broken)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_drifted_instructor_solution_fails(chapter):
    broken = harness.material(chapter).changed()
    solution = harness.solution_cells(broken.instructor)[-1]
    solution.source = solution.source.replace("### END SOLUTION", "    pass  # drifted\n### END SOLUTION", 1)
    with pytest.raises(AssertionError, match=f"solution cell {harness.grade_id(solution)} drifted"):
        contract.solution_cells_are_the_reference(broken)


@pytest.mark.parametrize("line", ["from autograder.checks import run_check", "import solutions.ch02_qkv_attention as ref",
                                  "import numpy as np", "ref = __import__('solutions')"])
def test_a_visible_cell_that_needs_more_than_torch_fails(line):
    broken = harness.material(BROKEN).changed()
    visible = cell(broken.student, "stable_softmax_visible")
    visible.source = line + "\n" + visible.source
    with pytest.raises(AssertionError, match="cell stable_softmax_visible imports"):
        contract.visible_cells_need_torch_alone(broken)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_check_whose_inputs_ignore_the_seed_fails(chapter):
    m = harness.material(chapter)
    drawing = [gid for gid, check in m.checks.CHECKS.items() if any(c.variable is None for c in check.plan(0, "cpu"))]
    assert drawing, "no check draws inputs"
    for gid in drawing:
        fixed = dataclasses.replace(m.checks.CHECKS[gid], plan=lambda seed, device, plan=m.checks.CHECKS[gid].plan: plan(0, device))
        broken = m.changed(checks=types.SimpleNamespace(CHECKS={**m.checks.CHECKS, gid: fixed}))
        with pytest.raises(AssertionError, match=f"{gid}: the same inputs"):
            contract.hidden_inputs_change_with_the_seed(broken)


def test_a_graded_category_without_a_visible_catch_fails():
    m = harness.material(BROKEN)
    without_shape = {n: w for n, w in m.wrong_answers.items() if not (w.category == "shape" and w.function == "stable_softmax")}
    broken = m.changed(answers=types.SimpleNamespace(WRONG_ANSWERS=without_shape, VALID_ANSWERS=m.valid_answers))
    with pytest.raises(AssertionError, match="stable_softmax_hidden: shape"):
        contract.every_graded_category_is_caught_visibly(broken)


def with_answers(m, wrong=None, valid=None):
    return m.changed(answers=types.SimpleNamespace(WRONG_ANSWERS=wrong or {}, VALID_ANSWERS=valid or {}))


def test_a_wrong_answer_its_visible_check_misses_fails():
    m = harness.material(BROKEN)
    name = next(n for n, w in m.wrong_answers.items() if w.function == "stable_softmax" and w.visible)
    broken = with_answers(m, {name: m.wrong_answers[name]})
    cell(broken.student, "stable_softmax_visible").source = "pass  # a visible check that checks nothing"
    with pytest.raises(AssertionError, match=f"{name}: its visible check stable_softmax_visible passes"):
        contract.wrong_answers_are_caught(broken)
    # ... and one marked visible=False that the visible check does catch: the mark must be honest
    hidden_only = {name: dataclasses.replace(m.wrong_answers[name], visible=False)}
    with pytest.raises(AssertionError, match="marked visible=False, but stable_softmax_visible catches it"):
        contract.wrong_answers_are_caught(with_answers(m, hidden_only))
    # ... and a visible check that fails with a raw error instead of a diagnosis
    raw = with_answers(m, {name: m.wrong_answers[name]})
    cell(raw.student, "stable_softmax_visible").source = "raise IndexError('a raw error, no diagnosis')"
    with pytest.raises(AssertionError, match="shows a raw error, not a diagnosis: IndexError"):
        contract.wrong_answers_are_caught(raw)
    contract.wrong_answers_are_caught(raw, raw_errors={name: "allowed here"})  # unless it is listed as the learner's own


def test_a_wrong_answer_that_costs_other_points_or_lacks_its_diagnosis_fails():
    m = harness.material(BROKEN)
    name = next(n for n, w in m.wrong_answers.items() if w.function == "stable_softmax" and w.visible)
    wrong = m.wrong_answers[name]
    elsewhere = {name: dataclasses.replace(wrong, fails=frozenset({"self_attention_hidden"}))}
    with pytest.raises(AssertionError, match=r"loses \d+ points in \['stable_softmax_hidden'\], expected \d+ in \['self_attention_hidden'\]"):
        contract.wrong_answers_are_caught(with_answers(m, elsewhere))
    undiagnosed = {name: dataclasses.replace(wrong, diagnosis="a diagnosis no check gives")}
    with pytest.raises(AssertionError, match="not 'a diagnosis no check gives'"):
        contract.wrong_answers_are_caught(with_answers(m, undiagnosed))


def test_a_valid_alternative_that_loses_points_fails():
    m = harness.material(BROKEN)
    wrong = next(w for w in m.wrong_answers.values() if w.function == "scaled_dot_product_attention" and w.visible)
    not_valid = {"not_valid": ValidAnswer(wrong.edits, why="a wrong answer posing as valid")}
    with pytest.raises(AssertionError, match=r"not_valid \(a wrong answer posing as valid\): "):
        contract.valid_answers_keep_full_marks(with_answers(m, valid=not_valid), seeds=(3,))


def test_an_edit_that_no_longer_applies_fails():
    m = harness.material(BROKEN)
    stale = {"stale": ValidAnswer((Edit("stable_softmax", "text the reference no longer has", "x"),))}
    with pytest.raises(AssertionError, match="stale: the edit of stable_softmax no longer applies"):
        contract.valid_answers_keep_full_marks(with_answers(m, valid=stale), seeds=(3,))


def test_a_reference_notebook_with_a_failing_visible_check_fails():
    broken = harness.material(BROKEN).changed()
    cell(broken.student, "self_attention_visible").source = "raise CheckFailed('a visible check that rejects the reference')"
    with pytest.raises(AssertionError, match="cell self_attention_visible raises CheckFailed: a visible check that rejects"):
        contract.reference_earns_full_marks(broken, seeds=(3,))


def test_an_untouched_notebook_that_earns_points_fails():
    m = harness.material(BROKEN)
    broken = m.changed()
    cell(broken.student, "stable_softmax").source = harness.cell_source(harness.filled(m), "stable_softmax")  # pre-filled
    with pytest.raises(AssertionError, match="stable_softmax_hidden earns its points in an untouched notebook"):
        contract.blank_notebook_earns_nothing(broken)

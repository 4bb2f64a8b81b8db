"""Every chapter's notebook tried as a learner would: the reference and each catalogued wrong answer
(WRONG_ANSWERS, edits of the reference source), run cell by cell like the notebook, then graded in-process.

Pinned here, for every chapter with exercises:
- the reference passes every visible check and every hidden check;
- each wrong answer marked `visible` is caught by its exercise's visible check;
- each wrong answer loses points exactly in the exercises it lists (a correct function never pays for
  another exercise's mistake), with its diagnosis in the hidden check's message;
- every category a hidden check grades (dtype, device, large inputs, generator, ...) has a wrong answer of
  that category which the visible check catches: green visible checks cannot hide lost points.
The sandboxed end-to-end path is tested in test_pipeline.py; this one is fast and names the failing step.
"""

import importlib

import nbformat
import pytest

from autograder import registry
from autograder.authoring import demo
from autograder.checks import run_local

SEED = 21
CHAPTERS = registry.graded_chapters()
TRIALS = [(chapter, name) for chapter in CHAPTERS for name in demo.catalogue(chapter)]
VALID = [(chapter, name) for chapter in CHAPTERS for name in demo.valid_answers(chapter)]
VALID_SEEDS = (3, 21, 1234)  # grading seeds are drawn at random: a valid answer must pass on each


def checks_of(chapter):
    return importlib.import_module(f"autograder.checks.{registry.module_name(chapter)}")


def run_notebook(nb):
    """Run a notebook's code cells in order in one namespace, as Jupyter would (graded cells hold only a
    comment in the student version); return (namespace, {grade id or index: exception raised or None})."""
    namespace = {"__name__": "__main__"}
    outcomes = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        key = cell.metadata.get("nbgrader", {}).get("grade_id", i)
        try:
            exec(compile(cell.source, f"<cell {i}>", "exec"), namespace)
            outcomes[key] = None
        except Exception as exc:  # a visible check that fails raises; that is what we look for
            outcomes[key] = exc
    return namespace, outcomes


def hidden_results(chapter, namespace, seed=SEED):
    """{hidden grade id: None (full marks) or the hidden check's message}."""
    results = {}
    for gid, check in checks_of(chapter).CHECKS.items():
        fn = namespace.get(check.function) if check.function else None
        try:
            if check.function and not callable(fn):
                raise AssertionError(f"{check.function} is not defined")
            run_local(check, fn, seed=seed, device="cpu", namespace=namespace)
            results[gid] = None
        except AssertionError as failure:
            results[gid] = str(failure)
    return results


@pytest.fixture(scope="module")
def reference_runs():
    return {chapter: run_notebook(demo.filled_submission(chapter)) for chapter in CHAPTERS}


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_reference_passes_every_visible_and_hidden_check(reference_runs, chapter):
    namespace, outcomes = reference_runs[chapter]
    failed = {k: repr(e)[:300] for k, e in outcomes.items() if e is not None}
    assert not failed, f"{chapter}: cells of the reference notebook failed: {failed}"
    lost = {k: m[:300] for k, m in hidden_results(chapter, namespace).items() if m}
    assert not lost, f"{chapter}: the reference loses hidden points: {lost}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_untouched_notebook_is_told_what_is_missing(chapter):
    nb = nbformat.read(registry.student_notebook(chapter), as_version=4)
    namespace, outcomes = run_notebook(nb)
    for gid, check in checks_of(chapter).CHECKS.items():
        visible = gid.replace("_hidden", "_visible")
        if visible in outcomes:
            assert outcomes[visible] is not None, f"{chapter}: the visible check {visible} passes an untouched notebook"
    messages = hidden_results(chapter, namespace)
    assert all(messages.values()), f"{chapter}: an untouched notebook earns points: {[k for k, m in messages.items() if not m]}"


@pytest.mark.parametrize("chapter,name", TRIALS)
def test_wrong_answer_is_caught_and_costs_only_its_own_exercise(chapter, name):
    wrong = demo.catalogue(chapter)[name]
    namespace, outcomes = run_notebook(demo.filled_submission(chapter, [name]))
    if wrong.visible:
        visible = f"{wrong.function}_visible"
        assert visible in outcomes, f"{chapter}: no visible check cell {visible!r}"
        assert outcomes[visible] is not None, f"{chapter}/{name}: the visible check {visible} does not catch this {wrong.category} mistake"
    results = hidden_results(chapter, namespace)
    lost = {gid for gid, message in results.items() if message}
    assert lost == set(wrong.failing_cells), f"{chapter}/{name}: lost points in {sorted(lost)}, expected {sorted(wrong.failing_cells)}: {results}"
    messages = " | ".join(results[g] for g in wrong.failing_cells)
    assert wrong.diagnosis in messages, f"{chapter}/{name}: the hidden check says {messages[:600]!r}, not {wrong.diagnosis!r}"


@pytest.mark.parametrize("chapter,name", VALID)
def test_valid_answer_written_unlike_the_reference_keeps_full_marks(chapter, name):
    namespace, outcomes = run_notebook(demo.filled_submission(chapter, valid=[name]))
    failed = {k: repr(e)[:400] for k, e in outcomes.items() if e is not None}
    assert not failed, f"{chapter}/{name} ({demo.valid_answers(chapter)[name].why}): visible cells fail: {failed}"
    for seed in VALID_SEEDS:
        lost = {k: m[:600] for k, m in hidden_results(chapter, namespace, seed).items() if m}
        assert not lost, f"{chapter}/{name} ({demo.valid_answers(chapter)[name].why}): loses hidden points on seed {seed}: {lost}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_graded_category_has_a_visible_catch(chapter):
    catalogue = demo.catalogue(chapter)
    missing = []
    for gid, check in checks_of(chapter).CHECKS.items():
        for category in check.categories:
            if category == "shape":
                continue  # every visible check checks shapes first
            if not any(w.visible and w.category == category and gid in w.failing_cells for w in catalogue.values()):
                missing.append(f"{gid}: {category}")
    assert not missing, f"{chapter}: hidden checks grade these categories with no visibly caught wrong answer: {missing}"

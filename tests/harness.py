"""The tests' one notebook harness: a chapter's material, its student notebook filled in and run cell by cell as a
learner runs it (the visible checks), its hidden checks run as plain `nbgrader autograde` runs them (in-process,
`autograder.checks.run_check`), and the points of its graded cells.

A learner's notebook is the generated student notebook with its solution cells filled in from solutions/
(`demo.filled_submission`), plus catalogued wrong answers or valid alternatives (autograder/source/<id>/answers.py),
each an edit of the reference source. Running it executes every code cell in order in one namespace, as Jupyter
would without a kernel; a cell that raises is recorded (a failing visible check raises CheckFailed) and the run goes
on, as a learner's would. The hidden checks then grade that namespace.

Everything a chapter test needs goes through here, so that the chapter contract (tests/chapter_contract.py) and
the chapter's own tests run a notebook the same way.
"""

import copy
import dataclasses
import functools
import importlib
from types import ModuleType

import nbformat

from autograder import registry
from autograder.authoring import build, demo
from autograder.checks import run_check

SEED = 21  # the grading seed of a single hidden run
SEEDS = (3, 21, 1234)  # grading seeds are drawn at random: what must hold on any seed is checked on these
DEVICE = "cpu"


@dataclasses.dataclass(frozen=True, eq=False)
class Material:
    """What a chapter's exercises are made of: the notebooks, the hidden checks, the test data and the reference.

    The chapter contract takes one of these, so that a test can break a copy in memory (a solution left in the
    student notebook, a heading with the wrong points, a check that ignores the seed) and see the contract fail.
    Hidden checks are still run by chapter id (`run_check`), as the notebooks run them."""

    chapter: str
    student: nbformat.NotebookNode  # the generated student notebook, chapters/<id>/exercises.ipynb
    checks: ModuleType  # autograder.checks.chNN_...: CHECKS by grade id
    answers: ModuleType  # autograder/source/<id>/answers.py: WRONG_ANSWERS, VALID_ANSWERS
    reference: ModuleType  # solutions.chNN_...
    given_instructor: nbformat.NotebookNode | None = None  # a changed copy; None: the chapter's, rendered when first read

    @property
    def instructor(self) -> nbformat.NotebookNode:
        """The rendered instructor notebook (solutions and hidden tests in): built on first use, as rendering takes
        seconds and most chapter tests need only the student notebook."""
        return self.given_instructor if self.given_instructor is not None else instructor_notebook(self.chapter)

    @property
    def wrong_answers(self) -> dict:
        return getattr(self.answers, "WRONG_ANSWERS", {})

    @property
    def valid_answers(self) -> dict:
        return getattr(self.answers, "VALID_ANSWERS", {})

    def changed(self, **fields) -> "Material":
        """A copy with some parts replaced (student=, instructor=, checks=, answers=, reference=); the notebooks
        not given are deep-copied, so the caller may edit them."""
        fields.setdefault("student", copy.deepcopy(self.student))
        fields["given_instructor"] = fields.pop("instructor", None) or copy.deepcopy(self.instructor)
        return dataclasses.replace(self, **fields)


@functools.lru_cache(maxsize=None)
def instructor_notebook(chapter: str) -> nbformat.NotebookNode:
    return build.instructor_notebook(chapter)


@functools.lru_cache(maxsize=None)
def material(chapter: str) -> Material:
    """The chapter's material as committed (once per test session; treat it as read-only)."""
    name = registry.module_name(chapter)
    return Material(
        chapter=chapter,
        student=nbformat.read(registry.student_notebook(chapter), as_version=4),
        checks=importlib.import_module(f"autograder.checks.{name}"),
        answers=registry.answers(chapter),
        reference=importlib.import_module(f"solutions.{name}"),
    )


# --- Cells --------------------------------------------------------------------------------------------------


def grade_id(cell):
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def solution_cells(nb) -> list:
    return [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]


def graded_cells(nb) -> list:
    return [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]


def points(nb) -> dict:
    """{grade id: points} of the notebook's graded (hidden-tests) cells, in notebook order."""
    return {grade_id(c): c.metadata.nbgrader.get("points", 0) for c in graded_cells(nb)}


def visible_cell_of(hidden_grade_id: str) -> str:
    """The visible check of a graded cell: 'f_hidden' -> 'f_visible' (the build's naming, in every chapter)."""
    return hidden_grade_id.removesuffix("_hidden") + "_visible"


def cell_source(nb, gid: str) -> str:
    return next(c.source for c in nb.cells if grade_id(c) == gid)


def with_sources(nb, sources: dict):
    """A copy of the notebook with the cells of these grade ids given these sources ({grade id: code})."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if grade_id(cell) in sources:
            cell.source = sources[grade_id(cell)]
    return nb


def filled(m: Material, wrong=(), valid=(), sources=None, edits=()):
    """The learner's notebook: the student notebook with every solution cell filled in from solutions/
    (demo.filled_submission), then the edits of these catalogued wrong answers and valid alternatives (names in
    m.answers) and any further `edits` (Edit or WrongAnswer objects), then whole cells replaced by `sources`
    ({grade id: code}). An edit that no longer applies raises ValueError."""
    nb = demo.filled_submission(m.chapter, student_nb=m.student)
    edits = ([e for name in wrong for e in m.wrong_answers[name].edits] + [e for name in valid for e in m.valid_answers[name].edits]
             + [e for edit in edits for e in getattr(edit, "edits", (edit,))])
    for cell in solution_cells(nb):
        for edit in edits:
            if edit.function == grade_id(cell):
                cell.source = demo.apply_edit(cell.source, edit)
    return with_sources(nb, sources or {})


# --- Running a notebook ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class NotebookRun:
    """What a learner saw: the namespace after the last cell, and each code cell's outcome (None, or the exception
    it raised), keyed by grade id (untagged cells by their index)."""

    namespace: dict
    outcomes: dict

    def error(self, key):
        """The exception a cell raised, or None (also None for a cell that was not run)."""
        return self.outcomes.get(key)

    def message(self, key) -> str | None:
        """'CheckFailed: ...' (type and message) of a cell that raised, or None."""
        error = self.outcomes.get(key)
        return None if error is None else f"{type(error).__name__}: {error}"

    def failures(self) -> dict:
        """{cell: 'Type: message'} of every cell that raised."""
        return {k: self.message(k) for k, e in self.outcomes.items() if e is not None}


def run_notebook(nb, visible=True) -> NotebookRun:
    """Run the notebook's code cells in order in one fresh namespace, as a learner does.

    visible: which exercises' visible checks run: True (all), False (none: the learner's functions only), or a
    set of visible grade ids. Other cells (imports, check helpers, given code, the hidden-tests cells, which hold
    only a comment in the student notebook) always run."""
    checks_of_exercises = {gid + "_visible" for gid in map(grade_id, solution_cells(nb))}
    namespace, outcomes = {"__name__": "__main__"}, {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        key = grade_id(cell) or i
        if key in checks_of_exercises and (visible is not True) and (not visible or key not in visible):
            continue
        try:
            exec(compile(cell.source, f"<cell {key}>", "exec"), namespace)
            outcomes[key] = None
        except Exception as exc:  # a visible check that fails raises: that is what is looked for
            outcomes[key] = exc
    return NotebookRun(namespace, outcomes)


def run_cell(nb, gid: str, namespace: dict) -> str | None:
    """Run one code cell of the notebook (by grade id) in an existing namespace, e.g. a visible check after a test
    put a learner's function in: 'Type: message' if it raises, else None."""
    try:
        exec(compile(cell_source(nb, gid), f"<cell {gid}>", "exec"), namespace)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def namespace_of(m: Material, wrong=(), sources=None, edits=()) -> dict:
    """The learner's namespace after running the filled-in notebook (see filled) without its visible checks (the
    learner's functions, the given cells, the check helpers): what a test grades, or runs one visible check on."""
    return run_notebook(filled(m, wrong, sources=sources, edits=edits), visible=False).namespace


@functools.lru_cache(maxsize=None)
def learner_run(m: Material, wrong=(), valid=()) -> NotebookRun:
    """run_notebook(filled(m, wrong, valid)), once per session for each (material, answers): the contract and a
    chapter's own test of the same catalogued answer share the run (read its outcomes; do not change its namespace).
    wrong, valid: tuples of names."""
    return run_notebook(filled(m, wrong, valid))


def hidden(m: Material, namespace: dict, seed=SEED, grade_ids=None) -> dict:
    """{grade id: None (full marks) or the hidden check's message}, each check run in this process by
    run_check(chapter, grade id, namespace) as the notebook's hidden-tests cell runs it."""
    results = {}
    for gid in m.checks.CHECKS:
        if grade_ids is not None and gid not in grade_ids:
            continue
        try:
            run_check(m.chapter, gid, namespace, seed=seed, device=DEVICE)
            results[gid] = None
        except AssertionError as failure:
            results[gid] = str(failure)
    return results


def lost(results: dict) -> dict:
    """The failing entries of hidden()'s results."""
    return {gid: message for gid, message in results.items() if message is not None}

"""Filled-in submissions, made from the student notebook and solutions/: the demo folder and the tests' corpus.

A submission is the generated student notebook with its solution cells replaced by the reference
functions, optionally with typical mistakes applied (each chapter's `WRONG_ANSWERS`, in autograder/source/<chapter>/answers.py).
Nothing here is typed by hand twice: the reference source comes from solutions/, the mistakes are edits of it.
"""

import copy
import importlib
import inspect
from pathlib import Path

import nbformat

from autograder import registry
from autograder.authoring.answers import WrongAnswer


# The demo folder: student -> wrong answers applied (None: the untouched, blank notebook).
DEMO_STUDENTS = {
    "alice": [],
    "bob": None,
    "carol": ["missing_scale"],
    "dave": ["inverted_mask"],
}
DEMO_CHAPTER = "02-qkv-attention"
DEMO_DIR = registry.ROOT / "autograder" / "demo"


def catalogue(chapter_id: str) -> dict:
    """The chapter's catalogue of typical wrong answers, as edits of the reference source."""
    return getattr(registry.answers(chapter_id), "WRONG_ANSWERS", {})


def valid_answers(chapter_id: str) -> dict:
    """The chapter's correct answers written unlike the reference (VALID_ANSWERS: name -> ValidAnswer)."""
    return getattr(registry.answers(chapter_id), "VALID_ANSWERS", {})


def reference_source(chapter_id: str, function: str) -> str:
    """The reference source of a solution cell: a function or class of solutions/, or (typed-answer cells)
    the module's ANSWER_CELLS[grade_id] text."""
    module = importlib.import_module(f"solutions.{registry.module_name(chapter_id)}")
    cells = getattr(module, "ANSWER_CELLS", {})
    if function in cells:
        return cells[function]
    return inspect.getsource(getattr(module, function))


def apply_edit(source: str, edit) -> str:
    """source with one Edit (or WrongAnswer) applied; old="" replaces the whole cell."""
    if not edit.old:
        return edit.new
    if edit.old not in source:
        raise ValueError(f"the edit of {edit.function} no longer applies: {edit.old!r} is not in its reference source")
    return source.replace(edit.old, edit.new, 1)


def apply_wrong_answer(source: str, wrong: WrongAnswer) -> str:
    return apply_edit(source, wrong)


def filled_submission(chapter_id: str, wrong_answers=(), student_nb=None, valid=()) -> nbformat.NotebookNode:
    """The student notebook with every solution cell filled in with the reference, plus the given mistakes
    (names of WRONG_ANSWERS, with all their edits) and valid alternatives (names of VALID_ANSWERS)."""
    nb = copy.deepcopy(student_nb or nbformat.read(registry.student_notebook(chapter_id), as_version=4))
    known, alternatives = catalogue(chapter_id), valid_answers(chapter_id)
    edits = [e for name in wrong_answers for e in known[name].edits] + [e for name in valid for e in alternatives[name].edits]
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("solution"):
            continue
        source = reference_source(chapter_id, meta["grade_id"])
        for edit in edits:
            if edit.function == meta["grade_id"]:
                source = apply_edit(source, edit)
        cell.source = source
    return nb


def write_demo(out_dir: Path = DEMO_DIR) -> list[Path]:
    """Write <out_dir>/<student>/<chapter>/exercises.ipynb for every demo student."""
    written = []
    for student, wrong in DEMO_STUDENTS.items():
        if wrong is None:
            nb = nbformat.read(registry.student_notebook(DEMO_CHAPTER), as_version=4)
        else:
            nb = filled_submission(DEMO_CHAPTER, wrong)
        target = out_dir / student / DEMO_CHAPTER / f"{registry.NOTEBOOK}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
        written.append(target)
    return written

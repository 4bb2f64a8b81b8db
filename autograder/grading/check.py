"""`python -m autograder check NOTEBOOK.ipynb`: the grader's hidden checks on one notebook, for the learner who wrote it.

The same pipeline as `grade` (autograder.grading.notebook): the notebook read defensively, rebuilt on the course's
released notebook (plan_cells), run by the same runner, judged by the same judge with the same messages
(run_and_judge), on fresh inputs drawn from a seed that is printed (`--seed` repeats them). What differs, and
only because this is the learner's own code on the learner's own machine (macOS, Windows or Linux):
- no sandbox: the runner is a plain subprocess of this Python (sandbox mode "plain", sandbox.run_plain), with the
  same per-cell and per-notebook time limits but no bubblewrap, rlimits or memory cgroup;
- the guard switches the forbidden built-ins off as in grading (it is torch's own dispatcher, on every platform),
  but its Linux-only parts, the seccomp walls and the exec block, are not installed;
- no class folder, gradebook, feedback files or late penalties: the verdicts are printed.
So `check` can only be kinder than the grade where the code relies on what the sandbox refuses (files outside the
notebook, the network, starting processes, more memory or time); it never shows an expected value, since the
judge's messages never do.
"""

import importlib
import secrets
import sys
import tempfile
from pathlib import Path

import nbformat

from autograder import registry
from autograder.config import CELL_TIMEOUT_S
from autograder.results import CellScore, Result, Settings


class CheckError(Exception):
    """The notebook cannot be checked (not a notebook, no chapter of the course): one line for the learner."""


SANDBOX_NOTE = ("Ran without the grading sandbox (your own code, on your machine). The real grade runs the same checks in "
                "the sandbox and with the guard's Linux-only parts (no new processes, no network, no files outside the "
                "notebook, memory limits): code that needs those can lose points there.")


def chapter_of(submitted: dict, chapter: str | None = None) -> str:
    """The chapter whose exercises the notebook holds (its nbgrader cell ids and exercise names, as the grader's
    intake tells them), or `chapter` when given; CheckError when it cannot be told."""
    from autograder.grading import intake

    chapters = registry.graded_chapters()
    if chapter is not None:
        if chapter not in chapters:
            raise CheckError(f"unknown chapter {chapter!r}: one of {', '.join(chapters)}")
        return chapter
    found, _ = intake._best(intake.chapter_evidence(submitted, intake.chapter_grade_ids()))
    if found is None:
        raise CheckError("this notebook holds no chapter's exercises (no cell of a course notebook was found): "
                         "check the exercises.ipynb of a chapter, or name it with --chapter")
    return found


def released(chapter: str):
    """The course's released notebook of the chapter (chapters/<id>/exercises.ipynb, the one learners download) and
    the points of each graded cell (its nbgrader metadata, as nbgrader's generate_assignment wrote it)."""
    path = registry.student_notebook(chapter)
    try:
        nb = nbformat.read(path, as_version=4)
    except OSError:
        raise CheckError(f"the course's notebook of {chapter} is not installed ({path}): install the course from a clone "
                         "(pip install -e .)") from None
    meta = [c.get("metadata", {}).get("nbgrader", {}) for c in nb.cells]
    return nb, {m["grade_id"]: float(m["points"]) for m in meta if m.get("grade")}


def prepare(path: Path, chapter: str | None = None):
    """(chapter, checks module, cells, solutions, points, edits, notes) of a notebook, as `grade` plans them."""
    from autograder.grading import notebook, submission

    try:
        submitted, _, read_notes = submission.read_submission(Path(path))
    except OSError as exc:
        raise CheckError(f"{path} cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise CheckError(f"{path}: {exc}") from None
    chapter = chapter_of(submitted, chapter)
    course, points = released(chapter)
    checks_module = importlib.import_module(f"autograder.checks.{registry.module_name(chapter)}")
    cells, notes, solutions = notebook.plan_cells(course, submitted, checks_module)
    edits = notebook.readonly_edits(course, submitted)
    return chapter, checks_module, cells, solutions, points, edits, read_notes + notes + notebook.readonly_edit_notes(edits)


def check(path: Path, seed: int | None = None, chapter: str | None = None, device: str = "cpu",
          cell_timeout: int = CELL_TIMEOUT_S) -> Result:
    """Run the hidden checks of the notebook's chapter on it, without the sandbox; its Result (one CellScore per
    graded cell, with the messages the feedback would show). Raises CheckError for a notebook it cannot check."""
    from autograder.grading import notebook, sandbox

    chapter, checks_module, cells, solutions, points, edits, notes = prepare(path, chapter)
    seed = secrets.randbelow(2**31) if seed is None else seed
    with tempfile.TemporaryDirectory(prefix="course-check-") as tmp:
        settings = Settings(tmp, seed, device, sandbox.PLAIN, sandbox.Limits(cell_seconds=cell_timeout))
        scores, _, skip, run_notes, start = notebook.run_and_judge(cells, checks_module, solutions, points, settings, edits)
    result = Result("you", chapter, "graded", max_score=sum(points.values()), seed=seed, device=device,
                    sandbox=sandbox.PLAIN, start=start, cells=scores)
    result.score = sum(c.score for c in scores)
    result.notes = notes + run_notes + [reason for _, reason in sorted(skip.items()) if not reason.startswith("not run")][:5]
    return result


def render(result: Result, path: Path) -> str:
    """What `check` prints: per graded cell its verdict, points and message; the notes; the total; how to repeat."""
    title = dict(registry.CHAPTERS).get(result.chapter, result.chapter)
    lines = [f"{path}: chapter {result.chapter} ({title}), hidden checks on fresh inputs, seed {result.seed}", ""]
    for cell in result.cells:
        verdict = "passed" if cell.score >= cell.max_score else "partly passed" if cell.score > 0 else "failed"
        lines.append(f"  {cell.grade_id}: {verdict}, {cell.score:g}/{cell.max_score:g} point(s)")
        lines += [f"      {line}" for line in cell.message.splitlines()]
    if result.notes:
        lines += ["", "Notes:"] + [f"  - {note.splitlines()[0]}" for note in result.notes]
    lines += ["", f"Total: {result.score:g}/{result.max_score:g}",
              f"Repeat these inputs with: python -m autograder check {path} --seed {result.seed}", SANDBOX_NOTE]
    return "\n".join(lines)


def main(path: Path, seed: int | None = None, chapter: str | None = None, device: str = "cpu", cell_timeout: int = CELL_TIMEOUT_S) -> int:
    """The command: 0 when the checks ran (whatever the score), 2 with one line on stderr when they could not."""
    try:
        result = check(path, seed=seed, chapter=chapter, device=device, cell_timeout=cell_timeout)
    except CheckError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(render(result, path))
    return 0


__all__ = ["CheckError", "CellScore", "check", "main", "render", "prepare", "SANDBOX_NOTE"]

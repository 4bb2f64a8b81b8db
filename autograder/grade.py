"""Grade a folder of submissions with nbgrader: <submissions>/<student>/<chapter-id>/exercises.ipynb.

Steps, all through nbgrader's own API: generate the assignments (gradebook + instructor notebooks),
register the students, autograde each submission (hidden checks restored, seeded at grading time),
generate feedback HTML, export grades.csv; then print a summary table and write summary.csv with one
row per graded cell and its diagnosis.
"""

import csv
import json
import os
import re
import secrets
import shutil
import signal
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from tqdm import tqdm

from autograder import course
from autograder.build import generate_assignments
from autograder.config import CELL_TIMEOUT_S, nbgrader_api

STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass
class CellResult:
    grade_id: str
    score: float
    max_score: float
    message: str = ""  # the diagnosis, when the cell lost points


@dataclass
class Result:
    student: str
    chapter: str
    status: str  # "graded" or "error"
    score: float = 0.0
    max_score: float = 0.0
    cells: list = field(default_factory=list)
    error: str = ""

    @property
    def first_problem(self) -> str:
        if self.error:
            return self.error
        lost = [c for c in self.cells if c.score < c.max_score]
        return f"{lost[0].message} [{lost[0].grade_id}]" if lost else ""


# Errors whose raw text says little to an instructor or a learner.
EXPLAINED = {
    "KeyboardInterrupt": "the cell ran past the time limit and was interrupted (an endless loop?)",
    "DeadKernelError": "the notebook's kernel died (the code crashed it, exited, or ran out of memory)",
    "NotJSONError": "the file is not a valid notebook (not JSON)",
}


def _explain(text: str) -> str:
    for name, explanation in EXPLAINED.items():
        if name in text:
            return f"{explanation} [{text}]"
    return text


def _failure_reason(outcome) -> str:
    """The most telling line of a failed nbgrader run: its last exception that is not nbgrader's wrapper."""
    text = "\n".join(filter(None, [outcome.get("log"), outcome.get("error")]))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [
        line for line in lines
        if re.match(r"^[\w.]*(Error|Exception|Timeout)\w*:", line) and "NbGraderException" not in line
    ]
    if errors:
        return _explain(errors[-1][:500])
    return _explain(lines[-1][:500]) if lines else "autograde failed without a message"


def discover(submissions: Path):
    """[(student, chapter, notebook path)] and [problems with the folder layout]."""
    jobs, problems = [], []
    if not submissions.is_dir():
        raise SystemExit(f"error: {submissions} is not a folder of submissions (<student>/<chapter-id>/exercises.ipynb)")
    for student_dir in sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith(".")):
        student = student_dir.name
        if not STUDENT_ID.match(student):
            problems.append(f"{student_dir}: skipped, student ids may use letters, digits, '_', '-', '.' only")
            continue
        for chapter_dir in sorted(p for p in student_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
            notebook = chapter_dir / f"{course.NOTEBOOK}.ipynb"
            if chapter_dir.name not in course.graded_chapters():
                problems.append(f"{chapter_dir}: skipped, {chapter_dir.name!r} is not a chapter with exercises")
            elif not notebook.is_file():
                problems.append(f"{chapter_dir}: skipped, no {course.NOTEBOOK}.ipynb in it")
            else:
                jobs.append((student, chapter_dir.name, notebook))
    return jobs, problems


def _message(cell) -> str:
    """The diagnosis in a check cell's error output: the 'Likely mistake' line, else the error's first line."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            text = f"{output.get('ename', 'Error')}: {output.get('evalue', '')}".strip()
            likely = [line for line in text.splitlines() if line.startswith("Likely mistake")]
            if likely:
                return likely[0]
            if "this mistake: " in text:  # a visible check that recognised the mistake
                return "Likely mistake: " + text.split("this mistake: ", 1)[1].splitlines()[0]
            return _explain(text.splitlines()[0])
    return ""


def collect(workdir: Path, gradebook, student: str, chapter: str) -> Result:
    submission = gradebook.find_submission(chapter, student)
    autograded = workdir / "autograded" / student / chapter / f"{course.NOTEBOOK}.ipynb"
    nb = nbformat.read(autograded, as_version=4)
    messages = {c.metadata.get("nbgrader", {}).get("grade_id"): _message(c) for c in nb.cells}
    cells = []
    for notebook in submission.notebooks:
        for grade in sorted(notebook.grades, key=lambda g: list(messages).index(g.name) if g.name in messages else 0):
            cells.append(CellResult(grade.name, grade.score, grade.max_score, messages.get(grade.name, "")))
    return Result(student, chapter, "graded", submission.score, submission.max_score, cells)


def grade(submissions: Path, workdir: Path, seed=None, device=None, cell_timeout=CELL_TIMEOUT_S, out=sys.stdout) -> list[Result]:
    from nbgrader.api import Gradebook
    from nbgrader.plugins import CsvExportPlugin
    from sqlalchemy.exc import SAWarning

    # nbgrader 0.9.6 itself triggers these SQLAlchemy autoflush warnings on every autograde; they are harmless.
    warnings.filterwarnings("ignore", category=SAWarning, module=r"nbgrader\.")

    submissions, workdir = Path(submissions).resolve(), Path(workdir).resolve()
    jobs, problems = discover(submissions)
    for problem in problems:
        print(f"warning: {problem}", file=out)
    if not jobs:
        raise SystemExit(f"error: no submissions found in {submissions} (expected <student>/<chapter-id>/{course.NOTEBOOK}.ipynb)")

    seed = secrets.randbelow(2**31) if seed is None else seed
    os.environ["COURSE_GRADING_SEED"] = str(seed)  # read by the hidden checks, inside each kernel
    if device:
        os.environ["COURSE_DEVICE"] = device
    os.environ["PYTHONPATH"] = os.pathsep.join([str(course.ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    print(f"Grading {len(jobs)} submission(s) from {submissions}; seed {seed}; device {device or 'auto'}; workdir {workdir}", file=out)

    api = nbgrader_api(workdir, cell_timeout)
    generate_assignments(workdir, sorted({chapter for _, chapter, _ in jobs}), api)
    db_url = api.coursedir.db_url
    with Gradebook(db_url) as gradebook:
        for student in sorted({student for student, _, _ in jobs}):
            gradebook.update_or_create_student(student)

    results, timings = [], {"autograde": 0.0, "feedback": 0.0}
    start = time.perf_counter()
    progress = tqdm(jobs, desc="autograding", unit="notebook", file=sys.stderr, disable=None)
    # nbgrader's API swallows KeyboardInterrupt, so Ctrl-C only asks to stop after the current notebook;
    # a second Ctrl-C stops at once.
    interrupted = []

    def request_stop(signum, frame):
        interrupted.append(signum)
        print("\nStopping after the current notebook (Ctrl-C again to stop now)...", file=sys.stderr)
        signal.signal(signal.SIGINT, signal.default_int_handler)

    previous_handler = signal.signal(signal.SIGINT, request_stop)
    print("Autograding (Ctrl-C stops after the current notebook and keeps what is done).", file=out, flush=True)
    try:
        for student, chapter, notebook in progress:
            if interrupted:
                break
            progress.set_postfix_str(f"{student}/{chapter}")
            results.append(grade_one(api, db_url, workdir, student, chapter, notebook, timings))
    except KeyboardInterrupt:
        interrupted.append(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, previous_handler)
        progress.close()
    elapsed = time.perf_counter() - start

    # Whatever happened above, everything graded so far is in the gradebook and goes into the reports.
    with Gradebook(db_url) as gradebook:
        CsvExportPlugin(config=api.config).export(gradebook)
    write_summary_csv(workdir / "summary.csv", results)
    run = {"seed": seed, "device": device, "notebooks": len(results), "seconds": elapsed, "seconds_by_step": timings}
    (workdir / "last_run.json").write_text(json.dumps(run, indent=1))
    print_table(results, out)
    per_notebook = elapsed / max(len(results), 1)
    print(
        f"\n{len(results)} notebook(s) in {elapsed:.1f} s ({per_notebook:.2f} s per notebook: "
        f"autograde {timings['autograde']:.1f} s, feedback {timings['feedback']:.1f} s in all).\n"
        f"grades:   {workdir / 'grades.csv'}\nsummary:  {workdir / 'summary.csv'}\nfeedback: {workdir / 'feedback'}/<student>/<chapter>/{course.NOTEBOOK}.html",
        file=out,
    )
    if interrupted:
        print(
            f"\nInterrupted after {len(results)} of {len(jobs)} notebook(s). The results above are saved; "
            "run the same command again to grade the whole folder.",
            file=out,
        )
        raise KeyboardInterrupt
    return results


def grade_one(api, db_url, workdir: Path, student: str, chapter: str, notebook: Path, timings: dict) -> Result:
    """Autograde one submission and generate its feedback; any failure becomes the Result's status."""
    from nbgrader.api import Gradebook

    target = workdir / "submitted" / student / chapter
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    shutil.copy2(notebook, target / notebook.name)
    t0 = time.perf_counter()
    outcome = api.autograde(chapter, student, force=True, create=True)
    timings["autograde"] += time.perf_counter() - t0
    if not outcome["success"]:
        return Result(student, chapter, "error", error=_failure_reason(outcome))
    t0 = time.perf_counter()
    feedback = api.generate_feedback(chapter, student, force=True)
    timings["feedback"] += time.perf_counter() - t0
    with Gradebook(db_url) as gradebook:
        result = collect(workdir, gradebook, student, chapter)
    if not feedback["success"]:
        result.error = "feedback could not be generated: " + _failure_reason(feedback)
    return result


def write_summary_csv(path: Path, results):
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["student", "chapter", "status", "cell", "score", "max_score", "message"])
        for r in results:
            if r.status != "graded":
                writer.writerow([r.student, r.chapter, r.status, "", 0, "", r.error])
            for c in r.cells:
                writer.writerow([r.student, r.chapter, r.status, c.grade_id, c.score, c.max_score, c.message])


def print_table(results, out=sys.stdout, width=90):
    rows = [("student", "chapter", "score", "status", "first problem")]
    for r in results:
        problem = r.first_problem
        problem = problem if len(problem) <= width else problem[: width - 1] + "…"
        score = f"{r.score:g}/{r.max_score:g}" if r.status == "graded" else "-"
        rows.append((r.student, r.chapter, score, r.status, problem))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    print(file=out)
    for i, row in enumerate(rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths)) + "  " + row[4], file=out)
        if i == 0:
            print("  ".join("-" * w for w in widths) + "  " + "-" * 13, file=out)

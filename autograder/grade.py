"""Grade a folder of submissions: <submissions>/<student>/<chapter-id>/exercises.ipynb.

The steps:
1. nbgrader `generate_assignment` fills the gradebook and the released notebooks (the trusted templates).
2. Each submission is graded on its own by `autograder.worker` in a pool of N worker processes (default:
   all cores): the learner's code runs in the sandbox, the grading process judges the outputs.
3. Each result is saved at once (results/<student>/<chapter>.json, atomically) and then recorded in nbgrader's
   gradebook, so `nbgrader formgrader` and exports work as usual.
4. Reports: grades.csv (nbgrader's CSV export), summary.csv (one row per graded cell with its message),
   feedback HTML per notebook, last_run.json, and a table on screen.

Resuming: a run killed in any way (Ctrl-C, kill -9, power cut) leaves every finished result on disk; the
same command again reuses the run's seed and grades only what is missing or has changed.
"""

import csv
import hashlib
import json
import os
import re
import secrets
import signal
import sys
import time
import warnings
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

from tqdm import tqdm

from autograder import course, sandbox
from autograder.build import generate_assignments
from autograder.config import CELL_TIMEOUT_S, nbgrader_api
from autograder.worker import Result, Settings, grade_submission

STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
NO_SANDBOX_WARNING = """
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
!! WARNING: grading WITHOUT a sandbox (bubblewrap is missing or cannot create namespaces here).        !!
!! Learners' code runs as you, with your files and your network: it can read the gradebook, the       !!
!! solutions and the checks, and change them. Scores are still decided outside the learner's process, !!
!! but do this only with submissions you trust. Install bubblewrap (apt install bubblewrap) instead.  !!
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
"""


def discover(submissions: Path):
    """[(student, chapter, notebook path)] and [problems with the folder layout]."""
    jobs, problems = [], []
    if not submissions.is_dir():
        raise SystemExit(f"error: {submissions} is not a folder of submissions (<student>/<chapter-id>/exercises.ipynb)")
    for student_dir in sorted(p for p in submissions.iterdir() if not p.name.startswith(".")):
        student = student_dir.name
        if student_dir.is_symlink() or not student_dir.is_dir():
            problems.append(f"{student_dir}: skipped, not a folder (symbolic links are not followed)")
            continue
        if not STUDENT_ID.match(student):
            problems.append(f"{student_dir}: skipped, student ids may use letters, digits, '_', '-', '.' only")
            continue
        for chapter_dir in sorted(p for p in student_dir.iterdir() if not p.name.startswith(".")):
            notebook = chapter_dir / f"{course.NOTEBOOK}.ipynb"
            if chapter_dir.is_symlink() or not chapter_dir.is_dir():
                problems.append(f"{chapter_dir}: skipped, not a folder (symbolic links are not followed)")
            elif chapter_dir.name not in course.graded_chapters():
                problems.append(f"{chapter_dir}: skipped, {chapter_dir.name!r} is not a chapter with exercises")
            elif not notebook.exists() and not notebook.is_symlink():
                problems.append(f"{chapter_dir}: skipped, no {course.NOTEBOOK}.ipynb in it")
            else:
                jobs.append((student, chapter_dir.name, notebook))  # a symlinked notebook is refused by the worker
    return jobs, problems


def _sha256(path: Path) -> str:
    try:
        return "" if path.is_symlink() else hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


def _release_hash(workdir: Path, chapter: str) -> str:
    return hashlib.sha256((workdir / "release" / chapter / f"{course.NOTEBOOK}.ipynb").read_bytes()).hexdigest()


def result_path(workdir: Path, student: str, chapter: str) -> Path:
    return workdir / "results" / student / f"{chapter}.json"


def load_done(workdir: Path, student: str, chapter: str, notebook: Path, seed: int, device: str, release: str):
    """A saved result that still holds (same file, seed, device and course notebook), or None."""
    path = result_path(workdir, student, chapter)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        result = Result.from_json(data["result"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if data.get("release") != release or result.seed != seed or result.device != device:
        return None
    if result.status == "graded" and result.sha256 != _sha256(notebook):
        return None
    if result.status != "graded" and data.get("input_sha256") != _sha256(notebook):
        return None
    return result


def save_result(workdir: Path, result: Result, notebook: Path, release: str):
    path = result_path(workdir, result.student, result.chapter)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"release": release, "input_sha256": _sha256(notebook), "result": result.to_json()}, indent=1), encoding="utf-8")
    os.replace(tmp, path)


def record_in_gradebook(gradebook, results):
    """Scores into nbgrader's gradebook, committed per notebook (idempotent: re-recording changes nothing)."""
    from nbgrader.api import MissingEntry

    for r in results:
        gradebook.update_or_create_student(r.student)
        try:
            gradebook.find_submission(r.chapter, r.student)
        except MissingEntry:
            gradebook.add_submission(r.chapter, r.student)
        for cell in r.cells:
            grade = gradebook.find_grade(cell.grade_id, course.NOTEBOOK, r.chapter, r.student)
            grade.auto_score = cell.score
        gradebook.db.commit()


def _copy_submitted(workdir: Path, student: str, chapter: str, notebook: Path):
    """submitted/<student>/<chapter>/: a copy of a regular file (for formgrader); never follow a link."""
    target = workdir / "submitted" / student / chapter / notebook.name
    target.parent.mkdir(parents=True, exist_ok=True)
    if notebook.is_file() and not notebook.is_symlink() and notebook.stat().st_size <= 20 * 2**20:
        target.write_bytes(notebook.read_bytes())


def _init_worker():
    """Workers ignore Ctrl-C (the main process decides) and die with the main process, even on kill -9."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    warnings.filterwarnings("ignore")


def _grade_job(args):
    student, chapter, notebook, settings = args
    try:
        return grade_submission(student, chapter, Path(notebook), settings)
    except Exception as exc:  # a bug of ours: say so, keep the batch going
        return Result(student, chapter, "error", error=f"grader error: {type(exc).__name__}: {exc}", seed=settings.seed, device=settings.device)


def grade(submissions: Path, workdir: Path, seed=None, device=None, cell_timeout=CELL_TIMEOUT_S, workers=None,
          allow_unsandboxed=False, restart=False, memory_mb=None, notebook_timeout=None, out=sys.stdout) -> list[Result]:
    from sqlalchemy.exc import SAWarning

    # nbgrader 0.9.6 itself triggers these SQLAlchemy autoflush warnings; they are harmless.
    warnings.filterwarnings("ignore", category=SAWarning, module=r"nbgrader\.")

    submissions, workdir = Path(submissions).resolve(), Path(workdir).resolve()
    jobs, problems = discover(submissions)
    for problem in problems:
        print(f"warning: {problem}", file=out)
    if not jobs:
        raise SystemExit(f"error: no submissions found in {submissions} (expected <student>/<chapter-id>/{course.NOTEBOOK}.ipynb)")

    mode = sandbox.mode()
    if mode == "none":
        if not allow_unsandboxed:
            raise SystemExit(
                "error: no sandbox available: bubblewrap (`bwrap`) is not installed or cannot create namespaces here.\n"
                "Install it (Debian/Ubuntu: apt install bubblewrap), or pass --allow-unsandboxed to grade trusted "
                "submissions without one. See README.md, 'Grading safely'."
            )
        print(NO_SANDBOX_WARNING, file=out)
    elif mode == "bwrap":
        print("note: not running as root, so the sandbox runs learners' code as your own user (namespaces, rlimits, "
              "no network, no view of your files), without the separate user that bounds the number of processes.", file=out)

    state_path = workdir / "run-state.json"
    state = {}
    if state_path.exists() and not restart:
        try:
            state = json.loads(state_path.read_text())
        except ValueError:
            state = {}
    device = device or state.get("device") or ("cuda" if _cuda() else "cpu")
    seed = seed if seed is not None else state.get("seed", secrets.randbelow(2**31))
    workdir.mkdir(parents=True, exist_ok=True)
    state_path.write_text(json.dumps({"seed": seed, "device": device}))

    limits = sandbox.Limits(cell_seconds=cell_timeout)
    if notebook_timeout:
        limits.notebook_seconds = notebook_timeout
    if memory_mb:
        limits.memory_bytes = memory_mb * 2**20
    if device.startswith("cuda"):
        limits.memory_bytes = 0  # CUDA reserves a huge address space; rely on the GPU's own memory limit
    workers = workers or os.cpu_count() or 1
    settings = Settings(str(workdir), seed, device, mode, limits)
    print(f"Grading {len(jobs)} submission(s) from {submissions}; seed {seed}; device {device}; "
          f"{workers} worker(s); sandbox: {mode}; workdir {workdir}", file=out, flush=True)

    api = nbgrader_api(workdir, cell_timeout)
    generate_assignments(workdir, sorted({chapter for _, chapter, _ in jobs}), api)
    db_url = api.coursedir.db_url
    releases = {chapter: _release_hash(workdir, chapter) for chapter in {c for _, c, _ in jobs}}

    results, todo = {}, []
    for student, chapter, notebook in jobs:
        done = None if restart else load_done(workdir, student, chapter, notebook, seed, device, releases[chapter])
        if done:
            results[(student, chapter)] = done
        else:
            todo.append((student, chapter, notebook))
    if results:
        print(f"Resuming: {len(results)} notebook(s) already graded with seed {seed}; grading the other {len(todo)}.", file=out)
    from nbgrader.api import Gradebook

    gradebook = Gradebook(db_url)
    record_in_gradebook(gradebook, results.values())

    start = time.perf_counter()
    interrupted = []
    previous_handler = signal.signal(signal.SIGINT, lambda s, f: _request_stop(interrupted))
    progress = tqdm(total=len(todo), desc="grading", unit="notebook", file=sys.stderr, disable=None)
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_init_worker) if todo else None
    announced = False
    try:
        pending = {}
        queue = list(todo)
        while queue or pending:
            while queue and len(pending) < workers and not interrupted:
                student, chapter, notebook = queue.pop(0)
                _copy_submitted(workdir, student, chapter, notebook)
                pending[pool.submit(_grade_job, (student, chapter, str(notebook), settings))] = (student, chapter, notebook)
            if not announced:
                # Said once the first notebooks are handed to the workers: a Ctrl-C from now on finishes them.
                print("Grading now (Ctrl-C stops after the notebooks in progress and keeps everything finished).", file=out, flush=True)
                announced = True
            if not pending:
                break
            finished, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for future in finished:
                student, chapter, notebook = pending.pop(future)
                try:
                    result = future.result()
                except Exception as exc:  # a worker died (killed, out of memory): this notebook is an error, the rest goes on
                    result = Result(student, chapter, "error", error=f"grader error: the worker stopped ({type(exc).__name__}: {exc})", seed=seed, device=device)
                    pool.shutdown(wait=False, cancel_futures=True)
                    pool = ProcessPoolExecutor(max_workers=workers, initializer=_init_worker)
                    for f, job in list(pending.items()):
                        queue.insert(0, job)
                    pending.clear()
                if result.status != "error":
                    save_result(workdir, result, notebook, releases[chapter])
                    record_in_gradebook(gradebook, [result])
                results[(student, chapter)] = result
                progress.update(1)
                progress.set_postfix_str(f"{student}/{chapter}")
    finally:
        signal.signal(signal.SIGINT, previous_handler)
        progress.close()
        if pool:
            pool.shutdown(wait=True, cancel_futures=True)
        gradebook.close()
    elapsed = time.perf_counter() - start

    ordered = [results[(s, c)] for s, c, _ in jobs if (s, c) in results]
    write_reports(workdir, api, db_url, ordered, dict(seed=seed, device=device, sandbox=mode, workers=workers,
                  notebooks=len(ordered), graded_now=len(ordered) - (len(jobs) - len(todo)), seconds=elapsed, limits=vars(limits)))
    print_table(ordered, out)
    graded_now = len(todo) - (len(jobs) - len(ordered))
    if graded_now > 0:
        print(f"\n{graded_now} notebook(s) graded in {elapsed:.1f} s ({elapsed / graded_now:.2f} s per notebook, {workers} worker(s)).", file=out)
    print(
        f"grades:   {workdir / 'grades.csv'}\nsummary:  {workdir / 'summary.csv'}\n"
        f"feedback: {workdir / 'feedback'}/<student>/<chapter>/{course.NOTEBOOK}.html",
        file=out,
    )
    if mode == "none":
        print(NO_SANDBOX_WARNING, file=out)
    if interrupted:
        print(f"\nInterrupted after {len(ordered)} of {len(jobs)} notebook(s). Everything above is saved; "
              "run the same command again to grade the rest (same seed, nothing graded twice).", file=out)
        raise KeyboardInterrupt
    return ordered


def _request_stop(interrupted):
    interrupted.append(True)
    print("\nStopping after the notebooks in progress (Ctrl-C again to stop now; finished results are kept)...", file=sys.stderr)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def write_reports(workdir: Path, api, db_url: str, results, run: dict):
    from nbgrader.api import Gradebook
    from nbgrader.plugins import CsvExportPlugin

    with Gradebook(db_url) as gradebook:
        CsvExportPlugin(config=api.config).export(gradebook)
    write_summary_csv(workdir / "summary.csv", results)
    (workdir / "last_run.json").write_text(json.dumps(run, indent=1))


def write_summary_csv(path: Path, results):
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["student", "chapter", "status", "cell", "score", "max_score", "message"])
        for r in results:
            if r.status != "graded" or r.notes:
                writer.writerow([r.student, r.chapter, r.status, "", "", "", r.error or "; ".join(r.notes)])
            for c in r.cells:
                writer.writerow([r.student, r.chapter, r.status, c.grade_id, c.score, c.max_score, c.message])


def print_table(results, out=sys.stdout, width=90):
    rows = [("student", "chapter", "score", "status", "first problem")]
    for r in results:
        problem = r.first_problem.replace("\n", " ")
        problem = problem if len(problem) <= width else problem[: width - 1] + "…"
        score = f"{r.score:g}/{r.max_score:g}" if r.status != "error" else "-"
        rows.append((r.student, r.chapter, score, r.status, problem))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    print(file=out)
    for i, row in enumerate(rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths)) + "  " + row[4], file=out)
        if i == 0:
            print("  ".join("-" * w for w in widths) + "  " + "-" * 13, file=out)

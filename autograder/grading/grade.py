"""Grade a folder of submissions: <submissions>/<student>/<chapter-id>/exercises.ipynb.

The steps:
1. `autograder.grading.intake` finds the submissions and accounts for everything else in the folder (each entry
   that cannot be graded gets a status: missing, ambiguous, unknown-chapter, unrecognised, archive, refused,
   stray); archives are unpacked into <workdir>/unpacked/.
2. nbgrader `generate_assignment` fills the gradebook and the released notebooks (the trusted templates).
3. Each submission is graded on its own by `autograder.grading.notebook`, as a job on Dask (`autograder.grading.cluster`): an
   embedded cluster of N single-threaded worker processes on this machine (default: all cores), or a running
   Dask cluster (`--scheduler`); the learner's code runs in the sandbox, the worker judges the outputs.
4. Each result is saved at once (results/<student>/<chapter>.json, atomically) and then recorded in nbgrader's
   gradebook (automatic scores only: manual scores given in formgrader are never touched) by this process
   alone, one transaction per notebook; the gradebook is SQLite in the workdir or any database (`--db`,
   `autograder.reporting.gradebook`).
5. Due dates, extensions and submission times go into the gradebook; late penalties are computed by the
   configured nbgrader plugin (`autograder.reporting.latepenalty`).
6. Reports (`autograder.reporting.reports`), rebuilt from the whole working directory and gradebook: the table,
   summary.csv, scores/<chapter>.csv, grades.csv, the feedback's scores, last_run.json.

Resuming: a run killed in any way (Ctrl-C, kill -9, power cut) leaves every finished result on disk; the
same command again reuses the run's seed and grades only what is missing or has changed. `--only STUDENT`
and `--chapter ID` regrade a selection and keep everything else. A fault of what the run writes to (disk full,
working directory read-only or vanished, gradebook database unreachable) stops it with one line and exit status 4
(`autograder.grading.faults`); fixed, the same command resumes.
"""

import contextlib
import csv
import difflib
import hashlib
import json
import os
import secrets
import shutil
import signal
import sys
import threading
import time
import unicodedata
import warnings
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from autograder.grading import cluster, faults, history, intake, lock, sandbox, warm
from autograder import registry
from autograder.reporting import reports
from autograder.reporting import gradebook as gradebook_db
from autograder.authoring.release import generate_assignments
from autograder.config import CELL_TIMEOUT_S, COURSE_CONFIG, CourseConfigError, load_course_settings, nbgrader_api
from autograder.reporting.latepenalty import apply_due_dates, assign_penalties
from autograder.results import Result, Settings, Skipped, atomic_open, atomic_write, atomic_write_bytes

NO_SANDBOX_WARNING = """
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
!! WARNING: grading WITHOUT a sandbox (bubblewrap is missing or cannot create namespaces here).        !!
!! Learners' code runs as you, with your files and your network: it can read the gradebook, the       !!
!! solutions and the checks, and change them. Scores are still decided outside the learner's process, !!
!! but do this only with submissions you trust. Install bubblewrap (apt install bubblewrap) instead.  !!
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
"""
# The exit statuses of `grade` and `report`, as the README's table says: 4 is a fault of what the grader writes to
# (disk full, working directory read-only or vanished, gradebook database unreachable; autograder.grading.faults).
EXIT_OK, EXIT_NOT_ALL_GRADED, EXIT_USAGE, EXIT_BUSY, EXIT_FAULT, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
# Workers are started fresh (the embedded Dask cluster spawns them, autograder.grading.cluster), never forked from this
# process: a child forked after the parent used OpenMP (torch's CPU kernels, e.g. while building the
# assignments) can hang on its first torch op.
ACCOUNT_LINES = 40  # skipped entries listed at the end of a run (all of them are in summary.csv)


class UsageError(Exception):
    """Nothing was graded: the command, the folder or the course configuration is wrong (exit status 2)."""


class Outcome(list):
    """The results of the notebooks this run was asked to grade, plus what it had to skip."""

    skipped: list
    interrupted: bool = False

    @property
    def exit_status(self) -> int:
        if self.interrupted:
            return EXIT_INTERRUPTED
        return EXIT_OK if all(r.status == "graded" for r in self) and not self.skipped else EXIT_NOT_ALL_GRADED


def _sha256(path: Path) -> str:
    try:
        return "" if path.is_symlink() else hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


def _release_hash(workdir: Path, chapter: str) -> str:
    return hashlib.sha256((workdir / "release" / chapter / f"{registry.NOTEBOOK}.ipynb").read_bytes()).hexdigest()


def result_path(workdir: Path, student: str, chapter: str) -> Path:
    return reports.result_path(workdir, student, chapter)


def load_done(workdir: Path, student: str, chapter: str, notebook: Path, seed: int, device: str, release: str):
    """A saved result that still holds (same file, seed, device and course notebook), or None."""
    data = reports.load_saved(workdir, student, chapter)
    if data is None:
        return None
    result = data["result"]
    if data.get("release") != release or result.seed != seed or result.device != device:
        return None
    if result.status == "graded" and result.sha256 != _sha256(notebook):
        return None
    if result.status != "graded" and data.get("input_sha256") != _sha256(notebook):
        return None
    return result


def _copy_submitted(workdir: Path, sub: intake.Submission):
    """submitted/<student>/<chapter>/exercises.ipynb (and nbgrader's timestamp.txt), for formgrader: a copy
    of a regular file under the name nbgrader expects, whatever it was called; never follow a link."""
    target = workdir / "submitted" / sub.student / sub.chapter / f"{registry.NOTEBOOK}.ipynb"
    faults.check_present(workdir)  # never recreate a working directory that vanished
    target.parent.mkdir(parents=True, exist_ok=True)
    notebook = sub.path
    if notebook.is_file() and not notebook.is_symlink() and notebook.stat().st_size <= 20 * 2**20:
        atomic_write_bytes(target, notebook.read_bytes())
    if sub.timestamp is not None:
        atomic_write(target.parent / "timestamp.txt", sub.timestamp.isoformat(sep=" ") + "\n")


def gradebook_url(workdir: Path, db=None) -> tuple[str, bool]:
    """The gradebook's URL (--db, else the workdir's nbgrader_config.py, else SQLite in the workdir) and whether
    it holds a gradebook yet; UsageError when it is wrong or cannot be reached."""
    try:
        url = gradebook_db.resolve_url(workdir, db)
        return url, gradebook_db.exists(url)
    except gradebook_db.GradebookUnreachable as exc:
        raise _unreachable(exc, url, workdir) from None
    except gradebook_db.GradebookError as exc:
        raise UsageError(str(exc)) from None


def _connect(db_url: str, workdir: Path):
    try:
        return gradebook_db.connect(db_url)
    except gradebook_db.GradebookUnreachable as exc:
        raise _unreachable(exc, db_url, workdir) from None
    except gradebook_db.GradebookError as exc:
        raise UsageError(str(exc)) from None


def _unreachable(exc, url: str, workdir: Path) -> faults.Fault:
    """A gradebook that cannot be reached is a fault (exit 4): a database server down, or SQLite's file in a working
    directory that cannot be written."""
    return faults.from_db_error(exc.args[1], url, workdir) or faults.unreachable(exc.args[0], exc.args[1])


def _record_saved(gradebook, workdir: Path) -> list:
    """Every saved result into the gradebook, one transaction per notebook; those already recorded as they
    are are left alone. A result saved just before the grader was killed is recorded here, on the next run."""
    snapshot = reports.gradebook_snapshot(gradebook)
    reviews = []
    for result, _ in reports.load_results(workdir).values():
        with gradebook_db.transaction(gradebook):
            reviews += reports.record_results(gradebook, [result], snapshot)
    return reviews


def _quiet_nbgrader():
    from sqlalchemy.exc import SAWarning

    # nbgrader 0.9.6 itself triggers these SQLAlchemy autoflush warnings; they are harmless.
    warnings.filterwarnings("ignore", category=SAWarning, module=r"nbgrader\.")


def _read_state(workdir: Path) -> dict:
    try:
        return json.loads((workdir / "run-state.json").read_text())
    except (OSError, ValueError):
        return {}


def course_settings(workdir: Path, course_config=None, state=None):
    """The course configuration: --course-config, else the one the run used before, else <workdir>/course.toml."""
    state = state if state is not None else _read_state(workdir)
    path = Path(course_config).resolve() if course_config else Path(state["course_config"]) if state.get("course_config") else workdir / COURSE_CONFIG
    if course_config and not path.exists():
        raise UsageError(f"the course configuration {path} does not exist")
    try:
        return load_course_settings(path)
    except CourseConfigError as exc:
        raise UsageError(f"the course configuration is wrong: {exc}") from None


def _select(subs, skipped, only, chapters):
    """The submissions and skipped entries in the selection (--only, --chapter); raise UsageError for an
    --only name that is not in the folder."""
    if only:
        only = {unicodedata.normalize("NFC", name) for name in only}
        present = {s.student for s in subs} | {k.student for k in skipped}
        unknown = sorted(only - present)
        if unknown:
            hints = [f"{name!r}" + (f" (did you mean {', '.join(map(repr, close))}?)" if (close := difflib.get_close_matches(name, present, n=3)) else "")
                     for name in unknown]
            raise UsageError(f"--only: no such student in the folder: {', '.join(hints)}")

    def chosen(student, chapter):
        return (not only or student in only) and (not chapters or not chapter or chapter in chapters)

    return [s for s in subs if chosen(s.student, s.chapter)], [k for k in skipped if chosen(k.student, k.chapter)], chosen


@dataclass
class GradeOptions:
    """How to grade: the command line's options (python -m autograder grade --help), one object for the whole run."""

    seed: int | None = None  # default: the working directory's seed, else a fresh one
    device: str | None = None  # default: the working directory's, else cuda when present (cpu with --scheduler)
    cell_timeout: float = CELL_TIMEOUT_S
    workers: int | None = None  # embedded cluster: default one per core
    allow_unsandboxed: bool = False
    restart: bool = False  # a fresh seed and device; the course configuration stays
    memory_mb: int | None = None
    notebook_memory_mb: int | None = None
    notebook_timeout: float | None = None
    only: list | None = None  # students to regrade
    chapters: list | None = None  # chapters to regrade
    course_config: Path | None = None
    db: str | None = None  # gradebook URL (default: SQLite in the working directory)
    scheduler: str | None = None  # a running Dask scheduler's address
    take_latest: bool = False  # a resubmission that cannot be graded replaces a graded earlier version
    early: object | None = None  # cluster.EarlyStart begun by the CLI before the grader's imports; grade() uses or closes it


@dataclass
class _Found:
    """Step 1's answer: what the folder holds and what this run grades."""

    state: dict
    settings_file: object
    db_url: str
    has_gradebook: bool
    subs: list
    skipped: list
    ignored: list
    selected: list
    selected_skipped: list
    chosen: object
    forced: bool


def grade(submissions: Path, workdir: Path, options: GradeOptions | None = None, out=sys.stdout) -> Outcome:
    """Grade every submission of the folder (or the selection): discover -> run in the sandbox -> judge -> record."""
    options = options or GradeOptions()
    _quiet_nbgrader()
    submissions, workdir = Path(submissions).resolve(), Path(workdir).resolve()
    if not submissions.is_dir():
        if submissions.is_file() and intake.archive_suffix(submissions.name):
            folder = submissions.with_name(submissions.name[: -len(intake.archive_suffix(submissions.name))])
            raise UsageError(f"{submissions} is an archive, not a folder: unpack it first ({intake.unpack_command(submissions)}) "
                             f"and grade the folder {folder}")
        raise UsageError(f"{submissions} is not a folder of submissions (<student>/<chapter-id>/{registry.NOTEBOOK}.ipynb)")
    try:
        with faults.guard(workdir, options.db), lock.hold(workdir, "grade"):
            return _grade(submissions, workdir, options, out)
    finally:
        if options.early is not None:
            options.early.close()  # a cluster the CLI began for a run that stopped before using it (once only)
        warm.close_all()  # a template the CLI began for one notebook, where the run graded none here (a wrong guess)


def _grade(submissions: Path, workdir: Path, options: GradeOptions, out) -> Outcome:
    found = _discover(submissions, workdir, options, out)
    mode = _sandbox_mode(found.selected, options, out)
    settings, workers = _settings(workdir, options, found, mode)
    _check_sandbox(found, settings)
    _announce_run(submissions, found, settings, workers, options, out)
    # The embedded cluster and its workers' templates start while the chapters are released (one core each); one
    # notebook is graded by this process itself (cluster.grade_all), its template started now. A rerun whose
    # notebooks all have a result (most likely nothing to grade) starts none early: grade_all starts one if some
    # notebook still needs it; --only and --chapter regrade their selection, so they start it.
    to_grade = found.forced or options.restart or any(not reports.result_path(workdir, s.student, s.chapter).exists() for s in found.selected)
    early = options.early  # started by the CLI before its imports (cluster.early_start), if it guessed right
    if early is not None and not (len(found.selected) > 1 and to_grade and not options.scheduler and early.matches(workers, settings.device)):
        early.close()
        early = None
    if early is None and len(found.selected) > 1 and to_grade and not options.scheduler:
        early = cluster.EarlyStart(workers, settings.device, out)
    if early is not None:
        early.use(settings)
    single = len(found.selected) == 1 and to_grade and not options.scheduler
    if single:
        warm.start_early(settings.sandbox_mode, settings.limits)
    try:
        api = nbgrader_api(workdir, options.cell_timeout, found.settings_file, found.db_url)
        releases = _release(workdir, found.selected, api)
        changes = Changes(workdir, releases)
        done, todo = _already_graded(workdir, found, options, settings, releases, changes, out)
        results, unsaved, reviews, interrupted, elapsed = _grade_jobs(workdir, found, todo, done, settings, workers, releases, options,
                                                                      changes, out, early)
    except BaseException:
        if early is not None:
            early.close()
        if single:
            warm.close_all()  # the template started for the one notebook (grade_all closes it once it has graded)
        raise
    # The embedded cluster stops (its workers close their templates: about a second) while the reports are written.
    closing = threading.Thread(target=early.close, name="course-cluster-close") if early is not None else None
    if closing is not None:
        closing.start()
    try:
        return _finish(workdir, found, results, done, unsaved, reviews, interrupted, elapsed, settings, workers, api, options, changes, out)
    finally:
        if closing is not None:
            closing.join()


def _discover(submissions: Path, workdir: Path, options: GradeOptions, out) -> _Found:
    """The folder's submissions and skipped entries, the selection, the configuration and the gradebook."""
    state = _read_state(workdir)
    settings_file = course_settings(workdir, options.course_config, state)
    db_url, has_gradebook = gradebook_url(workdir, options.db)
    if options.restart:  # a fresh seed (unless --seed) and device; the course configuration stays
        state = {}
    subs, skipped, ignored = intake.discover(submissions, exclude=workdir, unpack_into=workdir / "unpacked")
    selected, selected_skipped, chosen = _select(subs, skipped, options.only, options.chapters)
    forced = bool(options.only or options.chapters)
    if not selected and not (selected_skipped and has_gradebook):
        _print_account(selected_skipped, ignored, out)
        raise UsageError(f"no submissions found in {submissions}" + (" for the selection (--only/--chapter)" if forced else "") +
                         f" (expected <student>/<chapter-id>/{registry.NOTEBOOK}.ipynb)" +
                         (f"; {len(selected_skipped)} entr(ies) could not be graded, listed above" if selected_skipped else ""))
    return _Found(state, settings_file, db_url, has_gradebook, subs, skipped, ignored, selected, selected_skipped, chosen, forced)


def _sandbox_mode(selected, options: GradeOptions, out) -> str:
    """The sandbox the learners' code runs in here ("bwrap", "bwrap-root"...; "worker hosts" with --scheduler;
    "none" only with --allow-unsandboxed, loudly)."""
    mode = sandbox.mode()
    if selected and options.scheduler:
        # The learners' code runs on the worker hosts, and each checks its own sandbox before grading (a host without
        # one is retired from the batch): this machine needs none. --allow-unsandboxed lets hosts without one grade.
        mode = "none" if options.allow_unsandboxed else "worker hosts"
    if selected:
        if mode == "none":
            if not options.allow_unsandboxed:
                raise UsageError(
                    "no sandbox available: bubblewrap (`bwrap`) is not installed or cannot create namespaces here.\n"
                    "Install it (Debian/Ubuntu: apt install bubblewrap), or pass --allow-unsandboxed to grade trusted "
                    "submissions without one. See guides/security.md."
                )
            print(NO_SANDBOX_WARNING, file=out)
        elif mode == "bwrap":
            print("note: not running as root, so the sandbox runs learners' code as your own user (namespaces, rlimits, "
                  "no network, no view of your files), without the separate user that bounds the number of processes.", file=out)
    return mode


def _check_sandbox(found: _Found, settings: Settings):
    """The sandbox must run the course's Python (and on cuda, CUDA must work inside it) before anything is graded:
    otherwise every notebook would fail and every learner would get 0. (With --scheduler each worker host checks
    its own sandbox.)"""
    if not found.selected or settings.sandbox_mode == "worker hosts":
        return
    if not settings.device.startswith("cuda"):
        why = None if settings.sandbox_mode == "none" else sandbox.python_check(settings.sandbox_mode, settings.limits)
        if why:
            raise UsageError(f"the grading sandbox ({settings.sandbox_mode}) cannot run the course's Python on this machine ({why}). "
                             "Nothing was graded. See guides/security.md on the sandbox, or grade trusted work with --allow-unsandboxed.")
        return
    why = sandbox.gpu_check(settings.sandbox_mode, settings.limits)
    if why:
        raise UsageError(f"--device {settings.device}: CUDA does not work in the grading sandbox on this machine ({why}). "
                         "Nothing was graded. Grade with --device cpu, or see guides/instructors.md, \"Grading on a GPU\".")


def _settings(workdir: Path, options: GradeOptions, found: _Found, mode: str):
    """(Settings for every worker, number of embedded workers or None with --scheduler); the run's seed and device
    are saved in run-state.json so that the same command resumes with them."""
    state = found.state
    # On a Dask cluster (--scheduler) the default stays cpu: --device cuda sends the jobs to the GPU workers.
    device = options.device or state.get("device") or ("cuda" if not options.scheduler and _cuda() else "cpu")
    seed = options.seed if options.seed is not None else state.get("seed", secrets.randbelow(2**31))
    faults.check_present(workdir)  # the lock made it; never recreate one that vanished since
    new_state = {"seed": seed, "device": device}
    if found.settings_file.path is not None:
        new_state["course_config"] = str(found.settings_file.path)
    atomic_write(workdir / "run-state.json", json.dumps(new_state))

    limits = sandbox.run_limits(device, options.cell_timeout, options.notebook_timeout, options.memory_mb, options.notebook_memory_mb)
    workers = None if options.scheduler else (options.workers or os.cpu_count() or 1)
    return Settings(str(workdir), seed, device, mode, limits), workers


def _announce_run(submissions: Path, found: _Found, settings: Settings, workers, options: GradeOptions, out):
    if options.scheduler and options.workers:
        print(f"note: --workers is ignored with --scheduler: the workers of {options.scheduler} grade (`dask worker --nworkers`).", file=out)
    problems = f"; {len(found.selected_skipped)} entr(ies) cannot be graded (listed at the end)" if found.selected_skipped else ""
    print(f"Grading {len(found.selected)} submission(s) from {submissions}; seed {settings.seed}; device {settings.device}; "
          f"{_who(workers, options)}; sandbox: {settings.sandbox_mode}; workdir {settings.workdir}{problems}", file=out, flush=True)
    print(f"Using {found.settings_file.describe()}; gradebook {gradebook_db.describe(found.db_url)}.", file=out)
    if settings.sandbox_mode != "none":
        print(f"Memory: {sandbox.describe_memory(settings.limits)}{' (on this host; each worker host uses its own)' if options.scheduler else ''}.", file=out)


def _who(workers, options: GradeOptions) -> str:
    return f"{workers} worker(s)" if workers else f"the workers of {options.scheduler}"


def render_instructor_notebook(chapter_id: str):
    """A chapter's instructor notebook rendered (build.instructor_notebook), for a release whose rendering is not
    cached: build runs the references in torch, so it is imported only here, when a rendering is needed."""
    from autograder.authoring.build import instructor_notebook

    return instructor_notebook(chapter_id)


def _release(workdir: Path, selected, api) -> dict:
    """nbgrader generate_assignment for the chapters graded (the trusted templates; a chapter already released here
    from the same instructor notebook into the same gradebook is kept as it is); {chapter: what a saved result
    must have been graded with to be kept: the released notebook's hash + the chapter's checks fingerprint}. A fix
    to a chapter's hidden checks (or solutions, or grading code) therefore regrades that chapter on the next run."""
    graded_chapters = sorted({s.chapter for s in selected})
    if graded_chapters:
        generate_assignments(workdir, graded_chapters, api, cache=cluster.checks_version, skip_current=True,
                             render=render_instructor_notebook)
    return {chapter: f"{_release_hash(workdir, chapter)}+checks:{cluster.checks_version(chapter)}" for chapter in graded_chapters}


def _already_graded(workdir: Path, found: _Found, options: GradeOptions, settings: Settings, releases: dict, changes, out):
    """(results kept from an earlier run of the same seed, device and release; submissions still to grade). Every
    submission's content is recorded in its history first (identical content keeps its first submission time)."""
    done, todo = {}, []
    for sub in found.selected:
        history.receive(workdir, sub, _sha256(sub.path))
        fresh = options.restart or found.forced
        result = None if fresh else load_done(workdir, sub.student, sub.chapter, sub.path, settings.seed, settings.device, releases[sub.chapter])
        held = None if fresh or result or options.take_latest else _still_held(workdir, sub, settings, releases[sub.chapter], changes)
        if result:
            done[(sub.student, sub.chapter)] = result
            reports.update_intake(workdir, sub.student, sub.chapter, sub.intake())
        elif held:
            done[(sub.student, sub.chapter)] = held
        else:
            todo.append(sub)
    kept = len(set(reports.load_results(workdir)) - {(s.student, s.chapter) for s in found.selected})
    if found.forced:
        print(f"Regrading the {len(todo)} selected notebook(s) (--only/--chapter); {kept} other graded notebook(s) in the "
              f"working directory are kept as they are" + (f", and {len(found.subs) - len(found.selected)} other submission(s) in the folder are not looked at." if len(found.subs) > len(found.selected) else "."), file=out)
    elif done:
        print(f"Resuming: {len(done)} notebook(s) already graded with seed {settings.seed}; grading the other {len(todo)}.", file=out)
    return done, todo


CHANGES_FILE = "changes.csv"
HELD_NOTE = "resubmitted"  # the note on a standing result over a resubmission that could not be graded


class Changes:
    """What this run changed, notebook by notebook, against the results saved before it: new, regraded (score
    before -> after), held (a resubmission that could not be graded; the earlier version stands)."""

    def __init__(self, workdir: Path, releases: dict):
        records = reports.load_records(workdir)
        self.before = {key: data["result"] for key, data in records.items()}
        self.checks = {key: data.get("release") for key, data in records.items()}
        self.release = releases
        self.entries = []

    def graded(self, result: Result, sha256: str):
        old = self.before.get((result.student, result.chapter))
        after = _points(result)
        if old is None:
            self.entries.append(self._entry(result, "new", "", after, ""))
        else:
            why = "same content" if old.sha256 and old.sha256 == sha256 else "a new version"
            if why == "same content" and self.checks.get((result.student, result.chapter)) != self.release.get(result.chapter):
                why += ", the course's notebook or checks changed"
            self.entries.append(self._entry(result, "regraded", _points(old), after, why))

    def held(self, result: Result, earlier: Result, note: str):
        self.entries.append(self._entry(result, "held", _points(earlier), _points(earlier), note))

    @staticmethod
    def _entry(result, change, before, after, note):
        return {"student": result.student, "chapter": result.chapter, "change": change, "before": before, "after": after, "note": note}

    def print(self, out):
        if not self.entries:
            return
        moved = [e for e in self.entries if e["change"] != "regraded" or e["before"] != e["after"]]
        print(f"\nChanges since the last run: {sum(e['change'] == 'new' for e in self.entries)} new, "
              f"{sum(e['change'] == 'regraded' for e in self.entries)} regraded "
              f"({sum(e['change'] == 'regraded' and e['before'] != e['after'] for e in self.entries)} with another score), "
              f"{sum(e['change'] == 'held' for e in self.entries)} held (all in {CHANGES_FILE}):", file=out)
        for e in moved[:ACCOUNT_LINES]:
            what = {"new": f"new          {e['after']}", "regraded": f"regraded     {e['before']} -> {e['after']} ({e['note']})",
                    "held": f"held         {e['after']} stands: {e['note']}"}[e["change"]]
            print(f"  {e['student']}/{e['chapter']}: {what}"[:240], file=out)
        if len(moved) > ACCOUNT_LINES:
            print(f"  ... and {len(moved) - ACCOUNT_LINES} more in {CHANGES_FILE}", file=out)

    def write_csv(self, path: Path):
        with atomic_open(path) as f:
            writer = csv.DictWriter(f, fieldnames=["student", "chapter", "change", "before", "after", "note"])
            writer.writeheader()
            writer.writerows(self.entries)


def _points(result: Result) -> str:
    return f"{result.status} {result.score:g}/{result.max_score:g}" if result.status == "graded" else result.status


def _earlier_stands(workdir: Path, sub, result: Result):
    """The saved record of a graded earlier version that stands over this result, which could not be graded
    (invalid), or None: a resubmission that cannot be graded never replaces a graded one silently."""
    if result.status in ("graded", "error"):
        return None
    saved = reports.load_saved(workdir, sub.student, sub.chapter)
    if saved is None or saved["result"].status != "graded":
        return None
    return saved


def _hold(workdir: Path, sub, sha: str, result: Result, saved: dict, settings: Settings, release: str, changes: Changes):
    """Keep the earlier version's result (results/, gradebook, submitted/ and autograded/ stay that version's) and
    say so on it, in every report, until a gradable version comes or the instructor passes --take-latest."""
    earlier = saved["result"]
    reason = (result.error or result.first_problem or result.status).splitlines()[0]
    reason = reason if len(reason) <= 100 else reason[:99] + "…"
    note = (f"{HELD_NOTE}: the new version could not be graded ({result.status}: {reason}); the earlier version, "
            f"{earlier.score:g}/{earlier.max_score:g}, stands (--take-latest grades the new version instead)")
    history.mark(workdir, sub.student, sub.chapter, sha, status=result.status, message=reason, held=True,
                 seed=settings.seed, device=settings.device, release=release, note=note)
    history.restore_submitted(workdir, sub.student, sub.chapter, earlier.sha256,
                              workdir / "submitted" / sub.student / sub.chapter / f"{registry.NOTEBOOK}.ipynb")
    intake_record = dict(saved.get("intake") or {})
    intake_record["notes"] = [note] + [n for n in intake_record.get("notes", []) if not n.startswith(HELD_NOTE)]
    reports.update_intake(workdir, sub.student, sub.chapter, intake_record)
    _keep_time_of(sub, intake_record, workdir)
    changes.held(result, earlier, f"the new version is {result.status}; --take-latest grades it instead")


def _still_held(workdir: Path, sub, settings: Settings, release: str, changes: Changes):
    """A resubmission held on an earlier run (same content, seed, device, course notebook) is not run again: its
    status for this run's account, or None."""
    entry = history.held_version(workdir, sub.student, sub.chapter, _sha256(sub.path), settings.seed, settings.device, release)
    saved = reports.load_saved(workdir, sub.student, sub.chapter) if entry else None
    if saved is None or saved["result"].status != "graded":
        return None
    _keep_time_of(sub, saved.get("intake") or {}, workdir)
    held = Result(sub.student, sub.chapter, entry.get("status", "invalid"), error=entry.get("message", ""),
                  seed=settings.seed, device=settings.device)
    changes.held(held, saved["result"], f"the new version is {held.status}; --take-latest grades it instead")
    return held


def _keep_time_of(sub, intake_record: dict, workdir: Path):
    """The standing version's submission time is the one the gradebook keeps (and nbgrader's timestamp.txt)."""
    when = intake_record.get("timestamp")
    sub.timestamp = _parse_iso(when)
    sub.timestamp_source = intake_record.get("timestamp_source", "")
    stamp = workdir / "submitted" / sub.student / sub.chapter / "timestamp.txt"
    if sub.timestamp is not None and stamp.parent.is_dir():
        stamp.write_text(sub.timestamp.isoformat(sep=" ") + "\n", encoding="utf-8")


def _grade_jobs(workdir: Path, found: _Found, todo, done, settings: Settings, workers, releases, options: GradeOptions, changes, out,
                early=None):
    """Grade the notebooks on the cluster; save each result at once and record it in the gradebook (this process is
    its one writer). Returns (results, unsaved, reviews, interrupted, (waited, seconds)): the seconds spent waiting for the
    workers to be ready (the embedded cluster's start, where its workers are still importing or starting their templates)
    and the seconds of grading, from the first notebooks handed to the workers to the last result; the gradebook stays
    open for _finish."""
    gradebook = _connect(found.db_url, workdir)
    reviews = _record_saved(gradebook, workdir)
    reports.add_students(gradebook, {k.student for k in found.selected_skipped if k.status not in ("refused", "stray")})

    results = dict(done)
    unsaved = []
    start = time.perf_counter()
    handed_out = []  # when the first notebooks were handed to the workers
    interrupted = []
    previous_handler = signal.signal(signal.SIGINT, lambda s, f: _request_stop(interrupted))
    progress = tqdm(total=len(todo), desc="grading", unit="notebook", file=sys.stderr, disable=None)

    def announce():
        # Said once the first notebooks are handed to the workers: a Ctrl-C from now on finishes them.
        handed_out.append(time.perf_counter())
        print("Grading now (Ctrl-C stops after the notebooks in progress and keeps everything finished).", file=out, flush=True)

    try:
        if todo:
            jobs = cluster.grade_all(todo, settings, workdir, scheduler=options.scheduler, workers=workers, stop=lambda: bool(interrupted),
                                     before_submit=lambda sub: _copy_submitted(workdir, sub), started=announce, out=out, early=early)
            with contextlib.closing(jobs):
                for sub, result in jobs:
                    sha = _sha256(sub.path)
                    earlier = None if options.take_latest else _earlier_stands(workdir, sub, result)
                    if earlier is not None:  # not gradable, and a graded earlier version stands: nothing recorded
                        faults.check_present(workdir)
                        _hold(workdir, sub, sha, result, earlier, settings, releases[sub.chapter], changes)
                    elif result.status != "error":
                        faults.check_present(workdir)
                        reports.save_result(workdir, result, sha, releases[sub.chapter], sub.intake())
                        with gradebook_db.transaction(gradebook):  # this process is the gradebook's one writer
                            reviews += reports.record_results(gradebook, [result])
                        history.mark(workdir, sub.student, sub.chapter, sha, status=result.status, score=result.score,
                                     max_score=result.max_score, held=False)
                        if result.status != "graded":  # formgrader must not show an earlier version's verdicts
                            shutil.rmtree(workdir / "autograded" / sub.student / sub.chapter, ignore_errors=True)
                        changes.graded(result, sha)
                    else:  # not saved: the same command tries it again
                        unsaved.append((result, sub.intake()))
                    results[(sub.student, sub.chapter)] = result
                    progress.update(1)
                    progress.set_postfix_str(f"{sub.student}/{sub.chapter}")
    except cluster.ClusterError as exc:
        gradebook.close()
        raise UsageError(str(exc)) from None
    finally:
        signal.signal(signal.SIGINT, previous_handler)
        progress.close()
    end = time.perf_counter()
    first = handed_out[0] if handed_out else end
    elapsed = (first - start, end - first)
    try:
        apply_due_dates(gradebook, found.settings_file, [s for s in found.selected if (s.student, s.chapter) in results])
    finally:
        gradebook.close()
    return results, unsaved, reviews, interrupted, elapsed


def _finish(workdir: Path, found: _Found, results, done, unsaved, reviews, interrupted, elapsed, settings: Settings, workers, api,
            options: GradeOptions, changes, out) -> Outcome:
    """The account of what could not be graded, the reports rebuilt from the whole working directory, the table."""
    faults.check_present(workdir)
    # What could not be graded: this run's account replaces the earlier one for the students it looked at.
    looked_at = {s.student for s in found.subs} | {k.student for k in found.skipped}
    earlier = [k for k in reports.load_skipped(workdir) if not (k.student in looked_at and found.chosen(k.student, k.chapter)) and k.status != "gone"]
    saved = set(changes.before) | {key for key, result in results.items() if result.status != "error"}
    gone = _gone(found, saved)
    reports.save_skipped(workdir, earlier + found.selected_skipped + gone)

    selected, limits, mode = found.selected, settings.limits, settings.sandbox_mode
    outcome = Outcome(results[(s.student, s.chapter)] for s in selected if (s.student, s.chapter) in results)
    outcome.skipped = found.selected_skipped
    outcome.interrupted = bool(interrupted)
    graded_now = len(results) - len(done)
    waited_s, grading_s = elapsed
    starts = _starts(outcome, done)
    rows = rebuild_reports(workdir, api, unsaved, dict(
        seed=settings.seed, device=settings.device, sandbox=mode, workers=workers, scheduler=options.scheduler or "embedded", gradebook=gradebook_db.describe(found.db_url), notebooks=len(outcome), graded_now=graded_now, seconds=grading_s,
        waited_for_workers_s=waited_s,
        limits=vars(limits), memory=sandbox.describe_memory(limits) if mode != "none" else "", course_config=str(found.settings_file.path or ""), selection={"only": sorted(options.only or []), "chapters": sorted(options.chapters or [])},
        this_run={"graded": sum(r.status == "graded" for r in outcome), "not_graded": [f"{r.student}/{r.chapter}: {r.status}" for r in outcome if r.status != "graded"],
                  "skipped": [k.to_json() for k in found.selected_skipped], "ignored": found.ignored, "not_selected": len(found.subs) - len(selected)},
        changes=changes.entries, start=starts,
    ), out)
    changes.write_csv(workdir / CHANGES_FILE)
    if graded_now > 0:
        waited = f", after {waited_s:.1f} s waiting for the workers to start" if waited_s >= 0.05 else ""
        print(f"\n{graded_now} notebook(s) run through the grader in {grading_s:.1f} s ({grading_s / graded_now:.2f} s per notebook, "
              f"{_who(workers, options)}{waited}); how many of them were graded is below.", file=out)
        cold = ", ".join(f"{n} {why}" for why, n in starts["cold"].items())
        print(f"Start-up: {starts['warm']} notebook(s) forked from a warm template"
              + (f", {sum(starts['cold'].values())} started cold ({cold})" if cold else "") + ".", file=out)
    for review in reviews:
        print(f"review: {review}", file=out)
    changes.print(out)
    _print_account(found.selected_skipped, found.ignored, out, outcome, rows, graded_now)
    if gone:
        listed = ", ".join(f"{k.student}/{k.chapter}" for k in gone[:5]) + (", ..." if len(gone) > 5 else "")
        print(f"  gone        {len(gone)} graded notebook(s) no longer in the folder ({listed}): their scores stay, with status "
              "gone (renamed, withdrawn or moved?)", file=out)
    _print_outputs(workdir, out)
    if mode == "none" and selected:
        print(NO_SANDBOX_WARNING, file=out)
    if interrupted:
        print(f"\nInterrupted after {len(outcome)} of {len(selected)} notebook(s). Everything above is saved; "
              "run the same command again to grade the rest (same seed, nothing graded twice).", file=out)
    return outcome


def _starts(outcome, done) -> dict:
    """How this run's sandboxes started: {"warm": n, "cold": {why: n}} (autograder.grading.warm)."""
    warm, cold = 0, {}
    for result in outcome:
        if (result.student, result.chapter) in done or not result.start:
            continue
        if result.start == "warm":
            warm += 1
        else:
            why = result.start.removeprefix("cold: ")
            cold[why] = cold.get(why, 0) + 1
    return {"warm": warm, "cold": cold}


def _gone(found: _Found, saved: set) -> list:
    """Saved results (of the selection) whose notebook is no longer in the folder: a student renamed or withdrawn,
    a notebook moved. Their scores stay; the status `gone` says so in every report (not counted as a failure)."""
    present = {(s.student, s.chapter) for s in found.subs} | {(k.student, k.chapter) for k in found.skipped if k.chapter}
    folders = {s.student for s in found.subs} | {k.student for k in found.skipped}
    gone = []
    for student, chapter in sorted(saved):
        if (student, chapter) in present or not found.chosen(student, chapter):
            continue
        where = (f"{student}/ holds no {chapter} notebook any more" if student in folders else
                 f"no folder {student}/ any more (renamed, withdrawn or moved?)")
        gone.append(Skipped(student, chapter, "gone", f"graded earlier, no longer in the submissions folder: {where}", f"{student}/{chapter}"))
    return gone


def rebuild_reports(workdir: Path, api, unsaved=(), run=None, out=sys.stdout):
    """Late penalties, then every report, from the whole gradebook and every saved result; print the table."""
    from nbgrader.api import Gradebook

    workdir = Path(workdir)
    with Gradebook(api.coursedir.db_url) as gradebook:
        assign_penalties(gradebook, api.config)
        snapshot = reports.gradebook_snapshot(gradebook)
        reports.write_grades_csv(workdir, api.config, gradebook)
    rows = reports.build_rows(reports.load_results(workdir), reports.load_skipped(workdir), snapshot, unsaved)
    reports.write_summary_csv(workdir / "summary.csv", rows)
    reports.write_chapter_csvs(workdir / "scores", rows, snapshot)
    reports.refresh_all_feedback(workdir, rows)
    previous = {}
    try:
        previous = json.loads((workdir / "last_run.json").read_text())
    except (OSError, ValueError):
        pass
    info = dict(run if run is not None else {k: v for k, v in previous.items() if k not in ("reports", "rebuilt")})
    if run is None:
        info["rebuilt"] = time.strftime("%Y-%m-%d %H:%M:%S")
    info["reports"] = {"notebooks": sum(r.result is not None for r in rows), "students": len({r.student for r in rows}), "by_status": reports.counts(rows)}
    atomic_write(workdir / "last_run.json", json.dumps(info, indent=1, ensure_ascii=False))
    reports.print_table(rows, out)
    return rows


def _print_account(skipped, ignored, out, outcome=None, rows=None, graded_now=0):
    """The end of a run: what it could not grade, one line each, and where the rest is."""
    lines = []
    if outcome is not None:
        not_graded = [r for r in outcome if r.status != "graded"]
        earlier = len(outcome) - graded_now
        lines.append(f"\nThis run: {sum(r.status == 'graded' for r in outcome)} notebook(s) graded"
                     + (f" ({earlier} of them unchanged since an earlier run)" if earlier else "")
                     + f", {len(not_graded)} could not be graded, {len(skipped)} entr(ies) skipped.")
        for r in not_graded[:ACCOUNT_LINES]:
            lines.append(f"  not graded  {r.student}/{r.chapter}: {r.status}: {r.error or r.first_problem}"[:200])
    elif skipped:
        lines.append("")
    for k in skipped[:ACCOUNT_LINES]:
        lines.append(f"  skipped     {k.path or k.student}  [{k.status}]  {k.message}"[:240])
    if len(skipped) > ACCOUNT_LINES:
        lines.append(f"  ... and {len(skipped) - ACCOUNT_LINES} more: see the status column of summary.csv")
    for entry in ignored:
        lines.append(f"  ignored     {entry}")
    if rows is not None:
        lines.append(reports.summary_line(rows))
    print("\n".join(lines), file=out)


def _print_outputs(workdir: Path, out):
    print(f"grades:   {workdir / 'grades.csv'}\nsummary:  {workdir / 'summary.csv'}\nscores:   {workdir / 'scores'}/<chapter>.csv\n"
          f"feedback: {workdir / 'feedback'}/<student>/<chapter>/{registry.NOTEBOOK}.html", file=out)


def report(workdir: Path, course_config=None, out=sys.stdout, db=None) -> int:
    """Rebuild every report from the gradebook and the saved results, without grading (after manual grading
    in formgrader, a roster import or a change of due dates). Exit status as for grading."""
    _quiet_nbgrader()
    workdir = Path(workdir).resolve()
    with faults.guard(workdir, db), lock.hold(workdir, "report"):
        return _report(workdir, course_config, out, db)


def _report(workdir: Path, course_config, out, db) -> int:
    state = _read_state(workdir)
    db_url, has_gradebook = gradebook_url(workdir, db)
    if not has_gradebook:
        raise UsageError(f"{workdir} holds no gradebook ({gradebook_db.describe(db_url)}): grade a folder into it first")
    settings_file = course_settings(workdir, course_config, state)
    if course_config:
        state["course_config"] = str(settings_file.path)
        atomic_write(workdir / "run-state.json", json.dumps(state))
    print(f"Using {settings_file.describe()}; gradebook {gradebook_db.describe(db_url)}.", file=out)
    api = nbgrader_api(workdir, settings=settings_file, db_url=db_url)

    faults.check_present(workdir)
    with _connect(db_url, workdir) as gradebook:
        reviews = _record_saved(gradebook, workdir)
        subs = []
        for (student, chapter), (result, found) in reports.load_results(workdir).items():
            when = found.get("timestamp")
            subs.append(intake.Submission(student, chapter, Path(found.get("path", "")), timestamp=_parse_iso(when), timestamp_source=found.get("timestamp_source", "")))
        apply_due_dates(gradebook, settings_file, subs)
    rows = rebuild_reports(workdir, api, out=out)
    for review in reviews:
        print(f"review: {review}", file=out)
    print("\n" + reports.summary_line(rows), file=out)
    _print_outputs(workdir, out)
    return EXIT_OK if all(r.status in ("graded", "gone") for r in rows) else EXIT_NOT_ALL_GRADED


def _parse_iso(text):
    from datetime import datetime

    return datetime.fromisoformat(text) if text else None


def _request_stop(interrupted):
    interrupted.append(True)
    print("\nStopping after the notebooks in progress (Ctrl-C again to stop now; finished results are kept)...", file=sys.stderr)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _cuda() -> bool:
    if not sandbox.nvidia_driver():
        return False
    import torch

    return torch.cuda.is_available()

"""python -m autograder {build,grade,report,formgrader,check} — see the guide for instructors (guides/instructors.md);
`check` is for learners (guides/learners.md).

Exit status of `grade` and `report` (the table in the README, "Exit statuses"): 0 every submission was graded;
1 the run finished but some submissions were skipped or could not be graded (each has its status in summary.csv,
and is listed at the end); 2 nothing was graded (a wrong command, folder or course configuration, or no sandbox);
3 another run holds the working directory; 4 a fault of what the grader writes to (disk full, working directory
read-only or vanished, gradebook database unreachable: one line says which; what was saved before is kept);
130 interrupted (Ctrl-C).
"""

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

from autograder import registry
from autograder.config import CELL_TIMEOUT_S

DEFAULT_WORKDIR = registry.ROOT / "grading" / "run"


def _only_ids_as_values(argv, options):
    """argparse would read a student id that starts with '-' after --only as an option: each id that follows
    --only, up to the next option of the command, is passed as --only=ID."""
    out, taking = [], False
    for token in argv:
        if token == "--only":
            taking = True
            continue
        if taking and (token == "--" or token.split("=", 1)[0] in options):
            taking = False
        out.append(f"--only={token}" if taking else token)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m autograder", description="Build and grade the course's exercise notebooks.")
    sub = parser.add_subparsers(dest="command", required=True)

    b = sub.add_parser("build", help="regenerate chapters/*/exercises.ipynb and the demo submissions from the instructor sources")
    b.add_argument("--chapter", action="append", choices=registry.graded_chapters(), metavar="ID",
                   help="build only this chapter's notebook (repeatable; default: every chapter with exercises, and the demo)")
    b.add_argument("--workdir", type=Path, default=None, help="nbgrader working directory (default: grading/build, or grading/build-<id> with one --chapter)")

    exit_status = ("exit status: 0 every submission was graded; 1 some were skipped or could not be graded (each has its "
                   "status in summary.csv); 2 nothing was graded (wrong command, folder or course configuration, no sandbox); "
                   "3 another run holds the working directory; 4 disk full, working directory read-only or vanished, or gradebook "
                   "database unreachable (fix it and run the same command again: it resumes); 130 Ctrl-C")
    g = sub.add_parser("grade", help="autograde a folder <student>/<chapter-id>/exercises.ipynb", epilog=exit_status)
    g.add_argument("submissions", type=Path, help="folder of submissions, e.g. autograder/demo")
    g.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR, help="where the gradebook, feedback and CSVs go (default: grading/run)")
    g.add_argument("--only", nargs="+", action="extend", metavar="STUDENT", default=None,
                   help="regrade only these students (their folder names); every other result in the workdir is kept")
    g.add_argument("--chapter", action="append", choices=registry.graded_chapters(), metavar="ID", default=None,
                   help="regrade only this chapter (repeatable); every other result in the workdir is kept")
    g.add_argument("--seed", type=int, default=None, help="seed for the hidden checks' inputs (default: a fresh random one, printed)")
    g.add_argument("--cell-timeout", type=int, default=CELL_TIMEOUT_S, help=f"seconds a cell may run before it is interrupted (default {CELL_TIMEOUT_S})")
    g.add_argument("--device", default=None, help="torch device for the hidden checks (default: cuda if available, else cpu)")
    g.add_argument("--workers", type=int, default=None, help="notebooks graded at once (default: all cores)")
    g.add_argument("--notebook-timeout", type=int, default=None, help="seconds a whole notebook may run (default 120)")
    g.add_argument("--memory-mb", type=int, default=None, help="address-space limit of a learner's process in MiB (default 4096; none on cuda)")
    g.add_argument("--notebook-memory-mb", type=int, default=None,
                   help="memory of all of a notebook's processes together in MiB, where the host allows a memory cgroup (default 4096; 16384 on cuda)")
    g.add_argument("--course-config", type=Path, default=None,
                   help="due dates, extensions and late penalty (TOML; default: <workdir>/course.toml, or the file an earlier run used)")
    g.add_argument("--restart", action="store_true", help="ignore the results of an earlier (interrupted) run in this workdir and grade everything again")
    g.add_argument("--take-latest", action="store_true",
                   help="let a resubmission that cannot be graded (invalid) replace a graded earlier version; by default the earlier version's result stands and the report says so")
    g.add_argument("--allow-unsandboxed", action="store_true", help="grade even if no sandbox is available (trusted submissions only; a loud warning is printed)")
    g.add_argument("--db", metavar="URL", default=None, help="the gradebook: any SQLAlchemy URL nbgrader accepts, e.g. postgresql+psycopg://grader@dbhost:5432/course (default: the one in <workdir>/nbgrader_config.py, else SQLite <workdir>/gradebook.db)")
    g.add_argument("--scheduler", metavar="tcp://HOST:8786", default=None,
                   help="grade on a running Dask cluster (`dask scheduler` + `dask worker` on the grading hosts; guides/large-courses.md, 'Grading a large "
                        "course'); default: an embedded cluster of --workers processes on this machine")

    r = sub.add_parser("report", help="rebuild every report from the gradebook and saved results (after formgrader, a roster import or new due dates)",
                       epilog=exit_status)
    r.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR, help="the grading working directory (default: grading/run)")
    r.add_argument("--course-config", type=Path, default=None, help="as for grade")
    r.add_argument("--db", metavar="URL", default=None, help="as for grade")

    c = sub.add_parser("check", help="run the grader's hidden checks on your own notebook, without the sandbox (for learners)",
                       description="Run exactly the grader's hidden checks on one notebook, on fresh inputs, and print each "
                                   "exercise's verdict, points and feedback. Your code runs in a plain subprocess (no sandbox); "
                                   "the real grade runs the same checks in the sandbox. See guides/learners.md.",
                       epilog="exit status: 0 the checks ran (whatever the score); 2 the notebook could not be checked (one line says why)")
    c.add_argument("notebook", type=Path, help="your exercises.ipynb (saved)")
    c.add_argument("--seed", type=int, default=None, help="seed of the hidden inputs (default: a fresh random one, printed; pass it to repeat them)")
    c.add_argument("--chapter", choices=registry.graded_chapters(), metavar="ID", default=None,
                   help="the notebook's chapter (default: told from its cells)")
    c.add_argument("--device", default="cpu", help="torch device for the checks (default cpu)")
    c.add_argument("--cell-timeout", type=int, default=CELL_TIMEOUT_S, help=f"seconds a cell may run (default {CELL_TIMEOUT_S}, as in grading)")

    f = sub.add_parser("formgrader", help="serve nbgrader's formgrader on the working directory; rebuild the reports when it stops")
    f.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR, help="the grading working directory (default: grading/run)")
    f.add_argument("--ip", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    f.add_argument("--port", type=int, default=8888, help="port (default 8888)")
    f.add_argument("--db", metavar="URL", default=None, help="as for grade")

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["grade"]:
        argv = _only_ids_as_values(argv, set(g._option_string_actions))
    args = parser.parse_args(argv)
    if args.command == "build":
        from autograder.authoring import build, demo

        workdir = args.workdir or registry.ROOT / "grading" / (f"build-{args.chapter[0]}" if args.chapter and len(args.chapter) == 1 else "build")
        build.clean_workdir(workdir)
        for path in build.build_student_notebooks(workdir, chapters=args.chapter):
            print(f"wrote {path.relative_to(registry.ROOT)}")
        if not args.chapter:
            for path in demo.write_demo():
                print(f"wrote {path.relative_to(registry.ROOT)}")
        return 0

    if args.command == "check":
        from autograder.grading import check

        return check.main(args.notebook, seed=args.seed, chapter=args.chapter, device=args.device, cell_timeout=args.cell_timeout)

    early = _start_early(args) if args.command == "grade" else None
    from autograder.grading.faults import Fault
    from autograder.grading.grade import EXIT_BUSY, EXIT_FAULT, EXIT_INTERRUPTED, EXIT_USAGE, UsageError
    from autograder.grading.lock import WorkdirBusy

    try:
        if args.command == "grade":
            from autograder.grading.grade import GradeOptions, grade

            options = GradeOptions(
                seed=args.seed, device=args.device, cell_timeout=args.cell_timeout, workers=args.workers,
                allow_unsandboxed=args.allow_unsandboxed, restart=args.restart, memory_mb=args.memory_mb,
                notebook_memory_mb=args.notebook_memory_mb, notebook_timeout=args.notebook_timeout,
                only=args.only, chapters=args.chapter, course_config=args.course_config, db=args.db, scheduler=args.scheduler,
                take_latest=args.take_latest, early=early,
            )
            outcome = grade(args.submissions, args.workdir, options)
            return outcome.exit_status
        if args.command == "report":
            from autograder.grading.grade import report

            return report(args.workdir, args.course_config, db=args.db)
        if args.command == "formgrader":
            return formgrader(args.workdir, args.ip, args.port, args.db)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except WorkdirBusy as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BUSY
    except Fault as exc:  # one line: the cause, the file, what to do (autograder/grading/faults.py)
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAULT
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        if early is not None:
            early.close()  # grade() closes it; here only if grade() was never reached
    return EXIT_USAGE


def _start_early(args):
    """What the run will most likely use, begun before the grader's imports (torch, nbgrader: about 3 s on one core)
    so that it starts on the other core meanwhile (cluster.early_start): for two or more notebooks the embedded
    cluster, returned (its workers import and start their templates); for one notebook (an --only rerun) this
    thread's warm template, which grade() then grades it with (warm.start_early; None is returned). Only where the
    device is known without importing torch (--device, the working directory's run, or a machine with no NVIDIA
    driver), and the template only on the CPU. None otherwise: grade() decides as usual."""
    import json

    from autograder.grading import cluster, sandbox, warm

    if args.scheduler or not args.submissions.is_dir():
        return None
    try:
        state = {} if args.restart else json.loads((args.workdir / "run-state.json").read_text())
    except (OSError, ValueError):
        state = {}
    device = args.device or (state.get("device") if isinstance(state, dict) else None) or (None if sandbox.nvidia_driver() else "cpu")
    if not isinstance(device, str):
        return None
    kind = cluster.early_start(args.submissions, args.workdir, args.only, args.chapter, args.restart)
    if kind == "cluster":
        return cluster.EarlyStart(args.workers or os.cpu_count() or 1, device)
    if kind == "template" and device == "cpu":
        limits = sandbox.run_limits(device, args.cell_timeout, args.notebook_timeout, args.memory_mb, args.notebook_memory_mb)
        mode = sandbox.mode()
        if mode != "none":
            warm.start_early(mode, limits)
    return None


SERVER_STOP_S = 30  # how long the formgrader's server may take to stop after Ctrl-C before it is killed


def _stop(proc) -> int:
    """Stop the server process: SIGTERM, then SIGKILL after SERVER_STOP_S (a second Ctrl-C kills it at once)."""
    proc.terminate()
    try:
        return proc.wait(timeout=SERVER_STOP_S)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        proc.kill()
        return proc.wait()


def formgrader(workdir: Path, ip: str, port: int, db: str | None = None) -> int:
    """`jupyter server` in the working directory (formgrader at /formgrader), then the reports rebuilt with
    the manual grades given there. nbgrader 0.9.6 has no `nbgrader formgrader` command."""
    from autograder.config import ensure_venv_on_path, nbgrader_api
    from autograder.grading.grade import UsageError, gradebook_url, course_settings, report

    workdir = workdir.resolve()
    db_url, has_gradebook = gradebook_url(workdir, db)
    if not has_gradebook:
        raise UsageError(f"{workdir} holds no gradebook: grade a folder into it first (python -m autograder grade FOLDER --workdir {workdir})")
    ensure_venv_on_path()
    nbgrader_api(workdir, settings=course_settings(workdir), db_url=db_url)  # nbgrader_config.py up to date: formgrader reads it
    command = [sys.executable, "-m", "jupyter", "server", f"--ServerApp.root_dir={workdir}", f"--ServerApp.ip={ip}",
               f"--ServerApp.port={port}", "--ServerApp.port_retries=0", "--ServerApp.default_url=/formgrader",
               "--ServerApp.open_browser=False"]
    if os.geteuid() == 0:
        command.append("--allow-root")
    print(f"formgrader: http://{ip}:{port}/formgrader (the token is in the URL jupyter prints below). "
          "Stop it with Ctrl-C: the reports are then rebuilt with your manual grades.", flush=True)
    # Ctrl-C (SIGINT) is how the formgrader is stopped: make it work even if this process was started with SIGINT
    # ignored (a non-interactive shell's `cmd &` does that, and the server would inherit it and never stop).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    proc = subprocess.Popen(command, cwd=workdir)
    previous = signal.signal(signal.SIGTERM, lambda s, f: proc.terminate())
    try:
        try:
            code = proc.wait()
        except KeyboardInterrupt:
            # Ctrl-C reaches the server too, but what it does with it depends on its stdin (on a terminal it asks
            # "Shutdown? (y/n)" and resumes after 5 s; elsewhere it may be caught mid-request): stop it here, with
            # SIGTERM (it shuts down at once, cleanly), and kill it if it has not stopped within SERVER_STOP_S.
            code = _stop(proc)
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(f"\nformgrader stopped (exit status {code}); rebuilding the reports from the gradebook...", flush=True)
    return report(workdir, db=db_url)


def exit_now(status: int):
    """End the command: the exit handlers (warm templates, temporary folders) run, the output is flushed, and the
    process ends without Python's teardown of its modules, which takes a second or more once torch, sympy and
    nbgrader are loaded (every file is written and closed by then). Where a thread other than a daemon is still
    alive, Python's own exit runs instead: it stops and waits for such threads as usual."""
    import atexit
    import threading

    if any(thread is not threading.current_thread() and not thread.daemon and thread.is_alive() for thread in threading.enumerate()):
        sys.exit(status)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    exit_now(main())

"""Grading a large course: the gradebook on a real PostgreSQL server, the grading jobs on a real Dask cluster.

Started by the tests on 127.0.0.1 and stopped afterwards: a PostgreSQL server (Debian's binaries, a temporary
data directory, a free port; as root, run as an unprivileged user), and a Dask scheduler with two workers
as separate processes (`dask scheduler`, `dask worker`, each worker its own nanny, as on grading hosts).
Shown: the same scores in PostgreSQL (Dask cluster) as in SQLite (embedded cluster) for the same batch and
seed, and `nbgrader export` reading the PostgreSQL gradebook; a worker killed with SIGKILL mid-notebook loses
nothing, and a notebook whose workers keep dying gets a clear error; the coordinator killed with SIGKILL and
resumed grades nothing twice; `--device cuda` jobs go only to workers that advertise a GPU.
Every wait is for a condition (a file, a process, a worker), bounded.
"""

import csv
import glob
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from autograder.authoring import demo
from autograder.reporting import gradebook
from conftest import ROOT, course_env, run_python
from test_pipeline import read_summary

CHAPTER = "02-qkv-attention"
EXPECTED = {"alice": 13.0, "bob": 0.0, "carol": 8.0, "dave": 8.0}  # the demo's scores
POISON = "KILL-MY-GRADING-WORKER"  # a notebook holding this is killed by the test whenever it is being graded
ALLOWED_FAILURES = 1  # the test scheduler's: a notebook whose worker dies twice is given up
WAIT_S = 180


def _pg_bin():
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else (Path(shutil.which("initdb")).parent if shutil.which("initdb") else None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(condition, what, timeout=WAIT_S, every=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _db_user():
    """(uid, gid) to run the server as: ourselves, or as root an unprivileged user (postgres, or one we add)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "course-postgres"):
        try:
            entry = pwd.getpwnam(name)
            return entry.pw_uid, entry.pw_gid
        except KeyError:
            continue
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "course-postgres"], check=True)
    entry = pwd.getpwnam("course-postgres")
    return entry.pw_uid, entry.pw_gid


@pytest.fixture(scope="module")
def postgres():
    """A PostgreSQL server on 127.0.0.1 for this module; yields a function that creates a fresh database and
    returns its SQLAlchemy URL."""
    bin_dir = _pg_bin()
    if bin_dir is None:
        pytest.skip("the PostgreSQL server binaries (initdb, pg_ctl) are not installed: apt install postgresql "
                    "(`make test` installs it as root)")
    user = _db_user()
    base = Path(tempfile.mkdtemp(prefix="course-pg-"))
    data, log = base / "data", base / "server.log"
    as_user = dict(user=user[0], group=user[1], extra_groups=[]) if user else {}
    if user:
        os.chown(base, *user)
    port = _free_port()
    env = dict(os.environ, LC_ALL="C.UTF-8", LANG="C.UTF-8")

    def run(*args, check=True):
        return subprocess.run([str(bin_dir / args[0]), *args[1:]], cwd=base, env=env, capture_output=True, text=True, timeout=120, check=check, **as_user)

    try:
        run("initdb", "-D", str(data), "-U", "grader", "-A", "trust", "-E", "UTF8", "--no-sync")
        started = run("pg_ctl", "-D", str(data), "-l", str(log), "-w", "-t", "60", "-o",
                      f"-p {port} -h 127.0.0.1 -k {base} -c fsync=off -c full_page_writes=off", "start", check=False)
        assert started.returncode == 0, f"PostgreSQL did not start: {started.stderr}\n{log.read_text() if log.exists() else ''}"
        import psycopg

        def create(name):
            with psycopg.connect(host="127.0.0.1", port=port, user="grader", dbname="postgres", autocommit=True) as con:
                con.execute(f'CREATE DATABASE "{name}"')
            return f"postgresql+psycopg://grader@127.0.0.1:{port}/{name}"

        yield create
    finally:
        if (data / "postmaster.pid").exists():
            run("pg_ctl", "-D", str(data), "-m", "immediate", "-w", "-t", "30", "stop", check=False)
        shutil.rmtree(base, ignore_errors=True)


def _spawn(args, log, env):
    return subprocess.Popen([sys.executable, "-m", *args], cwd=log.parent, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory):
    """A Dask scheduler and two workers (each with its nanny, one single-threaded worker process), separate
    processes on 127.0.0.1; the second advertises a GPU (a stand-in for a GPU host: its resource routes the
    --device cuda jobs). Yields (scheduler address, {name: nanny process})."""
    from distributed import Client

    base = tmp_path_factory.mktemp("dask")
    env = course_env(DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=str(ALLOWED_FAILURES),
                     DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION="1.0")
    scheduler_file = base / "scheduler.json"
    procs = {"scheduler": _spawn(["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                  "--scheduler-file", str(scheduler_file)], base / "scheduler.log", env)}
    try:
        _wait(lambda: scheduler_file.exists() and scheduler_file.stat().st_size > 0, "the Dask scheduler", timeout=60)
        address = json.loads(scheduler_file.read_text())["address"]
        for name, extra in (("cpu-host", []), ("gpu-host", ["--resources", "GPU=1"])):
            (base / name).mkdir()
            procs[name] = _spawn(["distributed.cli.dask_worker", address, "--name", name, "--nworkers", "1", "--nthreads", "1",
                                  "--memory-limit", "0", "--no-dashboard", "--local-directory", str(base / name), *extra],
                                 base / f"{name}.log", env)
        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=90)
        yield address, procs
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=20)


def _two_workers(address):
    from distributed import Client

    with Client(address, timeout=60) as client:
        client.wait_for_workers(2, timeout=90)


def _write(folder: Path, student: str, nb):
    path = folder / student / CHAPTER / "exercises.ipynb"
    path.parent.mkdir(parents=True)
    if isinstance(nb, (bytes, str)):
        path.write_bytes(nb if isinstance(nb, bytes) else nb.encode())
    else:
        nbformat.write(nb, path)
    return path


def _demo_folder(folder: Path, extra=None):
    shutil.copytree(demo.DEMO_DIR, folder)
    for student, nb in (extra or {}).items():
        _write(folder, student, nb)
    return folder


def _grade(submissions, workdir, *extra, seed="5"):
    return run_python("-m", "autograder", "grade", str(submissions), "--workdir", str(workdir), "--seed", seed, "--device", "cpu", *extra)


def _gradebook_scores(url):
    """{(student, chapter): {cell: auto score}} and the number of grade rows, read with nbgrader's own API."""
    from nbgrader.api import Grade, Gradebook, SubmittedAssignment

    with Gradebook(url) as gb:
        scores = {}
        for sub in gb.db.query(SubmittedAssignment).all():
            scores[(sub.student_id, sub.assignment.name)] = {g.cell.name: g.auto_score for nb in sub.notebooks for g in nb.grades}
        return scores, gb.db.query(Grade).count()


def _csv_rows(path):
    with open(path, encoding="utf-8") as f:
        return sorted(csv.DictReader(f), key=lambda r: (r["assignment"], r["student_id"]))


def test_postgres_on_a_dask_cluster_gives_the_sqlite_scores_and_nbgrader_export_reads_it(tmp_path, postgres, dask_cluster):
    address, _ = dask_cluster
    submissions = _demo_folder(tmp_path / "submissions", {"erin": b"{ this is not a notebook"})
    embedded = _grade(submissions, tmp_path / "sqlite", "--workers", "2")
    url = postgres("same_scores")
    remote = _grade(submissions, tmp_path / "postgres", "--db", url, "--scheduler", address)
    for result in (embedded, remote):
        assert result.returncode == 1, f"erin's file is not a notebook, the rest is graded:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert "embedded Dask cluster: 2 worker(s)" in embedded.stdout and f"Dask scheduler {address}: 2 worker(s)" in remote.stdout
    assert "gradebook postgresql+psycopg://grader@127.0.0.1" in remote.stdout

    sqlite_scores, sqlite_rows = _gradebook_scores(gradebook.default_url(tmp_path / "sqlite"))
    pg_scores, pg_rows = _gradebook_scores(url)
    assert pg_scores == sqlite_scores and pg_rows == sqlite_rows == 5 * 4  # 5 notebooks (erin's: invalid, 0) of 4 graded cells
    assert {s: sum(cells.values()) for (s, _), cells in pg_scores.items()} == {**EXPECTED, "erin": 0.0}
    assert not (tmp_path / "postgres" / "gradebook.db").exists(), "the PostgreSQL run must not write a SQLite gradebook"
    summaries = [read_summary(tmp_path / w) for w in ("sqlite", "postgres")]
    assert summaries[0]["erin"][CHAPTER][""]["status"] == "invalid"
    strip = lambda rows: {(s, c, cell): (r["status"], r["score"], r["message"]) for s, chs in rows.items() for c, cells in chs.items() for cell, r in cells.items()}  # noqa: E731
    assert strip(summaries[0]) == strip(summaries[1])
    for name in ("autograded", "feedback"):
        ours = sorted(p.relative_to(tmp_path / "sqlite" / name) for p in (tmp_path / "sqlite" / name).rglob("*.*"))
        assert ours and ours == sorted(p.relative_to(tmp_path / "postgres" / name) for p in (tmp_path / "postgres" / name).rglob("*.*"))

    # nbgrader's own commands read the same PostgreSQL gradebook (the URL is in the workdir's nbgrader_config.py),
    # and so do later commands of ours without --db.
    assert url in (tmp_path / "postgres" / "nbgrader_config.py").read_text()
    export = subprocess.run(["nbgrader", "export", "--to", "exported.csv"], cwd=tmp_path / "postgres", env=course_env(),
                            capture_output=True, text=True, timeout=300)
    assert export.returncode == 0, export.stderr[-3000:]
    exported = _csv_rows(tmp_path / "postgres" / "exported.csv")
    assert {r["student_id"]: float(r["raw_score"]) for r in exported} == {**EXPECTED, "erin": 0.0}
    assert exported == _csv_rows(tmp_path / "sqlite" / "grades.csv")
    report = run_python("-m", "autograder", "report", "--workdir", str(tmp_path / "postgres"))
    assert report.returncode == 1 and "gradebook postgresql+psycopg://" in report.stdout, report.stdout[-2000:]
    assert _gradebook_scores(url) == (pg_scores, pg_rows), "re-recording is idempotent"


def _job_dirs(bwrap: psutil.Process) -> list:
    """The job folders a sandbox runs: a cold sandbox's one (bwrap's `--ro-bind <dir> /job`), or those in a warm
    template's job folder (bound at /jobs: the notebook it is running now)."""
    args = bwrap.cmdline()
    for i in range(len(args) - 2):
        if args[i] == "--ro-bind" and args[i + 2] == "/job":
            return [Path(args[i + 1])]
        if args[i] == "--ro-bind" and args[i + 2] == "/jobs":
            return sorted(p for p in Path(args[i + 1]).iterdir() if p.is_dir())
    return []


class WorkerKiller(threading.Thread):
    """Kills (SIGKILL) the worker process that grades a notebook: the first ordinary one once, and the poisoned
    one every time it runs. What a grading host's OOM killer or a lost machine does."""

    def __init__(self, nannies):
        super().__init__(daemon=True)
        self.nannies, self.stop, self.killed = nannies, threading.Event(), []

    def run(self):
        seen = set()
        while not self.stop.is_set():
            for nanny in self.nannies:
                try:
                    sandboxes = [p for p in psutil.Process(nanny.pid).children(recursive=True) if p.name() == "bwrap"]
                except psutil.Error:
                    continue
                for box in sandboxes:
                    try:
                        worker = box.parent()
                        if worker is None or worker.name() == "bwrap":  # bwrap's own init inside the sandbox
                            continue
                        jobs = [(job, (job / "job.json").read_text()) for job in _job_dirs(box)]
                    except (psutil.Error, OSError):
                        continue
                    for job, text in jobs:
                        if not text or (box.pid, str(job)) in seen:
                            continue
                        poisoned = POISON in text
                        if poisoned or not any(not p for p in self.killed):
                            seen.add((box.pid, str(job)))
                            worker.send_signal(signal.SIGKILL)
                            self.killed.append(poisoned)
                            break
            time.sleep(0.05)


def test_a_worker_killed_mid_notebook_loses_nothing_and_a_notebook_that_keeps_killing_gets_an_error(tmp_path, postgres, dask_cluster):
    address, procs = dask_cluster
    _two_workers(address)
    poisoned = demo.filled_submission(CHAPTER)
    poisoned.cells.insert(3, nbformat.v4.new_code_cell(f"# {POISON}"))
    submissions = _demo_folder(tmp_path / "submissions", {"mallory": poisoned})
    url = postgres("worker_killed")
    killer = WorkerKiller([procs["cpu-host"], procs["gpu-host"]])
    killer.start()
    try:
        result = _grade(submissions, tmp_path / "work", "--db", url, "--scheduler", address)
    finally:
        killer.stop.set()
        killer.join(timeout=10)
    assert killer.killed.count(False) == 1, f"an ordinary notebook's worker is killed once mid-notebook: {killer.killed}"
    # Dask gives up once ALLOWED_FAILURES + 1 workers died while its records had the notebook on them; a kill it does
    # not count against the notebook (a worker it had not recorded as running it yet) adds one more.
    assert killer.killed.count(True) >= ALLOWED_FAILURES + 1, f"the poisoned notebook's workers, each time: {killer.killed}"
    assert result.returncode == 1, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    rows = read_summary(tmp_path / "work")
    assert rows["mallory"][CHAPTER][""]["status"] == "error"
    assert f"its grading worker died {ALLOWED_FAILURES + 1} times" in rows["mallory"][CHAPTER][""]["message"]
    assert "not graded  mallory/02-qkv-attention: error: grader error: its grading worker died" in result.stdout
    scores, grade_rows = _gradebook_scores(url)
    assert {s: sum(cells.values()) for (s, _), cells in scores.items()} == EXPECTED, "every other notebook graded, once"
    assert grade_rows == 4 * 4
    assert sorted(p.parent.name for p in (tmp_path / "work" / "results").glob(f"*/{CHAPTER}.json")) == sorted(EXPECTED)
    last = json.loads((tmp_path / "work" / "last_run.json").read_text())
    assert last["graded_now"] == 5 and last["this_run"]["graded"] == 4
    _two_workers(address)  # the nannies restarted the killed workers


def test_the_coordinator_killed_and_resumed_grades_nothing_twice(tmp_path, postgres, dask_cluster):
    address, _ = dask_cluster
    _two_workers(address)
    submissions = tmp_path / "submissions"
    for i in range(6):
        shutil.copytree(demo.DEMO_DIR / ["alice", "bob", "carol"][i % 3], submissions / f"s{i}")
    url = postgres("coordinator_killed")
    workdir = tmp_path / "work"
    command = [sys.executable, "-m", "autograder", "grade", str(submissions), "--workdir", str(workdir), "--seed", "5",
               "--device", "cpu", "--db", url, "--scheduler", address]
    proc = subprocess.Popen(command, cwd=ROOT, env=course_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        first = _wait(lambda: sorted((workdir / "results").glob(f"*/{CHAPTER}.json")), "the first result file")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    saved = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in (workdir / "results").glob(f"*/{CHAPTER}.json")}
    assert first and 1 <= len(saved) < 6, f"killed in the middle of the batch: {sorted(saved)}"

    again = subprocess.run(command, cwd=ROOT, env=course_env(), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, f"{again.stdout[-3000:]}\n{again.stderr[-3000:]}"
    assert f"Resuming: {len(saved)} notebook(s) already graded with seed 5; grading the other {6 - len(saved)}." in again.stdout
    for path, (mtime, data) in saved.items():
        assert (path.stat().st_mtime_ns, path.read_bytes()) == (mtime, data), f"{path.parent.name} was graded again"
    scores, grade_rows = _gradebook_scores(url)
    expected = {f"s{i}": EXPECTED[["alice", "bob", "carol"][i % 3]] for i in range(6)}
    assert {s: sum(cells.values()) for (s, _), cells in scores.items()} == expected
    assert grade_rows == 6 * 4, "one grade per cell: nothing recorded twice"
    assert json.loads((workdir / "last_run.json").read_text())["graded_now"] == 6 - len(saved)


def test_a_host_without_a_sandbox_is_retired_and_its_notebooks_graded_elsewhere(tmp_path):
    """A cluster of its own: first only a host without bubblewrap (it must refuse, be retired, and the batch wait),
    then a proper host joins and grades everything."""
    from autograder.grading import sandbox

    env = course_env(DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION="1.0")
    scheduler_file = tmp_path / "scheduler.json"
    procs = [_spawn(["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                     "--scheduler-file", str(scheduler_file)], tmp_path / "scheduler.log", env)]
    coordinator = None
    try:
        _wait(lambda: scheduler_file.exists() and scheduler_file.stat().st_size > 0, "the Dask scheduler", timeout=60)
        address = json.loads(scheduler_file.read_text())["address"]

        def worker(name, **extra_env):
            (tmp_path / name).mkdir()
            return _spawn(["distributed.cli.dask_worker", address, "--name", name, "--nworkers", "1", "--nthreads", "1", "--memory-limit", "0",
                           "--no-dashboard", "--local-directory", str(tmp_path / name)], tmp_path / f"{name}.log", course_env(**extra_env))

        bad = worker("no-sandbox-host", COURSE_SANDBOX="none")  # as if bubblewrap were missing on that host
        procs.append(bad)
        command = [sys.executable, "-m", "autograder", "grade", str(demo.DEMO_DIR), "--workdir", str(tmp_path / "work"), "--seed", "5",
                   "--device", "cpu", "--scheduler", address]
        coordinator = subprocess.Popen(command, cwd=ROOT, env=course_env(PYTHONUNBUFFERED="1"), stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        said = []
        for line in coordinator.stdout:
            said.append(line)
            if line.startswith("note: retiring the Dask worker"):
                break
        assert "has no sandbox" in said[-1], "".join(said)[-3000:]
        assert bad.wait(timeout=60) is not None, "the retired worker's `dask worker` stops"
        procs.append(worker("good-host"))
        rest, _ = coordinator.communicate(timeout=300)
        assert coordinator.returncode == 0, "".join(said)[-2000:] + rest[-3000:]
        rows = read_summary(tmp_path / "work")
        assert {s: sum(float(r["score"]) for c, r in chs[CHAPTER].items() if c) for s, chs in rows.items()} == EXPECTED
        modes = {json.loads(p.read_text())["result"]["sandbox"] for p in (tmp_path / "work" / "results").glob("*/*.json")}
        assert modes == {sandbox.mode()} != {"none"}, "every notebook graded in a sandbox"
    finally:
        for proc in procs + ([coordinator] if coordinator else []):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=20)


def test_cuda_jobs_go_only_to_workers_that_advertise_a_gpu(tmp_path, dask_cluster):
    from autograder.grading import cluster, sandbox
    from autograder.results import Settings

    address, _ = dask_cluster
    _two_workers(address)
    with cluster.connect(address, device="cuda") as grading:
        assert grading.capacity() == 1, "one worker advertises GPU=1"
        job = cluster.Job("alice", CHAPTER, b"{}", 2, b"", b"", Settings(str(tmp_path), 1, "cuda", sandbox.mode(), sandbox.Limits()), "x")
        futures = [grading.submit(job) for _ in range(3)]  # another code version: refused at once on the worker, and retried
        for future in futures:
            assert "another version of the course" in str(future.exception(timeout=120))
        # The cluster's story of those jobs: (worker address, key, start, finish, ...) for every worker transition.
        story = grading.client.story(*(f.key for f in futures))
        workers = {w["name"]: addr for addr, w in grading.workers().items()}
    executed_on = {event[0] for event in story if event[0] != "scheduler" and len(event) > 3 and event[3] == "executing"}
    assert executed_on == {workers["gpu-host"]}, f"ran on {executed_on}; workers {workers}"


def test_the_gradebook_url_and_one_transaction_per_notebook(tmp_path):
    from nbgrader.api import Student

    url = gradebook.default_url(tmp_path)
    assert gradebook.resolve_url(tmp_path) == url
    # The working directory's nbgrader_config.py names the gradebook for every later command; --db wins.
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\nc.CourseDirectory.db_url = 'postgresql+psycopg://grader:secret@db.example/course'\n")
    assert gradebook.resolve_url(tmp_path) == "postgresql+psycopg://grader:secret@db.example/course"
    assert gradebook.resolve_url(tmp_path, url) == url
    assert "secret" not in gradebook.describe("postgresql+psycopg://grader:secret@db.example/course")
    with gradebook.connect(url) as gb:
        with pytest.raises(RuntimeError):
            with gradebook.transaction(gb):
                gb.update_or_create_student("alice")  # nbgrader commits here: inside the block, only a flush
                raise RuntimeError("the grader is killed before the notebook is recorded whole")
        assert gb.db.query(Student).count() == 0
        with gradebook.transaction(gb):
            gb.update_or_create_student("alice")
            gb.update_or_create_student("alice")  # recording again changes nothing
    with gradebook.connect(url) as gb:
        assert [s.id for s in gb.db.query(Student).all()] == ["alice"]


@pytest.mark.parametrize("url, message, status", [
    ("nosuchdb://somewhere/course", "no database driver", 2),  # a wrong command: usage error
    # a database that cannot be reached: a fault (README's exit statuses), fixed by starting it
    ("postgresql+psycopg://grader@127.0.0.1:1/course", "cannot reach the gradebook database postgresql+psycopg://grader@127.0.0.1:1/course", 4),
])
def test_a_wrong_database_url_stops_before_grading(tmp_path, url, message, status):
    result = run_python("-m", "autograder", "grade", str(demo.DEMO_DIR), "--workdir", str(tmp_path), "--db", url)
    assert result.returncode == status, result.stdout[-2000:] + result.stderr[-2000:]
    assert not (tmp_path / "results").exists(), "nothing may be graded"
    assert message in result.stderr and "Traceback" not in result.stderr, result.stderr[-2000:]


def test_an_unreachable_scheduler_stops_with_a_clear_message(tmp_path):
    result = run_python("-m", "autograder", "grade", str(demo.DEMO_DIR), "--workdir", str(tmp_path), "--device", "cpu",
                        "--scheduler", f"tcp://127.0.0.1:{_free_port()}")
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "cannot reach the Dask scheduler" in result.stderr and "Traceback" not in result.stderr, result.stderr[-2000:]


def test_the_gradebook_is_stamped_with_the_revision_nbgrader_itself_reads(tmp_path):
    """nbgrader stamps a new gradebook with `alembic heads` run in a subprocess; the grader reads the same head in
    process (config.alembic_head_in_process, 3 s faster per new gradebook): both must name the same revision,
    and a gradebook made through the grader's nbgrader API carries it."""
    import subprocess
    import sqlite3

    from nbgrader import api as nbapi

    from autograder.config import alembic_head_in_process, nbgrader_api

    with nbapi._temp_alembic_ini("sqlite:////tmp/gradebook.db") as ini:
        heads = subprocess.run([str(Path(sys.executable).parent / "alembic"), "-c", ini, "heads"], capture_output=True, text=True, check=True).stdout
    head = heads.split("\n")[0].split(" ")[0]
    assert len(head) == 12 and alembic_head_in_process() == head, (heads, alembic_head_in_process())
    nbgrader_api(tmp_path).gradebook.close()
    with sqlite3.connect(tmp_path / "gradebook.db") as db:
        assert db.execute("select version_num from alembic_version").fetchall() == [(head,)]


def test_the_clis_early_start_begins_a_cluster_for_two_or_more_and_a_template_for_one(tmp_path):
    """cluster.early_start, the CLI's quick look before its imports: the embedded cluster for two or more notebooks
    in the selection with one of them without a result (or a selection or --restart, which regrade); the grading
    process's own template for exactly one (it grades it itself); nothing for an empty selection, a missing folder
    or a rerun with everything graded."""
    from autograder.grading.cluster import early_start

    folder, workdir = tmp_path / "in", tmp_path / "work"
    for student, chapter in (("ana", "02-qkv-attention"), ("bo", "02-qkv-attention"), ("bo", "05-masks")):
        (folder / student / chapter).mkdir(parents=True)
        (folder / student / chapter / "exercises.ipynb").write_text("{}")
    assert early_start(folder, workdir) == "cluster"
    assert early_start(folder, workdir, only=["ana"]) == "template", "one notebook is graded in the grading process"
    assert early_start(folder, workdir, only=["bo"]) == "cluster"
    assert early_start(folder, workdir, chapters=["05-masks"]) == "template"
    assert early_start(folder, workdir, only=["cy"]) is None, "nobody selected"
    assert early_start(tmp_path / "missing", workdir) is None
    for student, chapter in (("ana", "02-qkv-attention"), ("bo", "02-qkv-attention"), ("bo", "05-masks")):
        (workdir / "results" / student).mkdir(parents=True, exist_ok=True)
        (workdir / "results" / student / f"{chapter}.json").write_text("{}")
    assert early_start(folder, workdir) is None, "a rerun with every notebook graded starts nothing early"
    assert early_start(folder, workdir, restart=True) == "cluster"
    assert early_start(folder, workdir, chapters=["02-qkv-attention"]) == "cluster", "a selection regrades"
    assert early_start(folder, workdir, only=["ana"]) == "template", "--only regrades"


@pytest.mark.parametrize("torch_first", [True, False], ids=["torch-imported-first", "torch-not-yet-imported"])
def test_a_job_is_judged_on_one_torch_thread_wherever_it_runs(torch_first):
    """run_job, the one path of a worker and of the grading process's own notebook (an --only rerun), judges with
    torch on one thread: a Dask worker's nanny sets OMP_NUM_THREADS=1, the grading process does not, and on a
    loaded machine a judge on two threads waits for the second to wake at every call (seconds on chapter 08).
    The grading itself is replaced by a stub that records torch's threads at the moment the judge would start."""
    code = f"""
import json, os, sys
os.environ.pop("OMP_NUM_THREADS", None)
if {torch_first}:
    import torch
    torch.set_num_threads(2)
from autograder.grading import cluster, notebook, sandbox
from autograder.results import Result, Settings
seen = {{}}
def stub(student, chapter, path, settings):
    import torch
    seen["threads"] = torch.get_num_threads()
    return Result(student, chapter, "graded")
notebook.grade_submission = stub
settings = Settings("/nonexistent", 0, "cpu", "none", sandbox.Limits())
job = cluster.Job("ana", "02-qkv-attention", b"{{}}", 2, b"{{}}", b"{{}}", settings, cluster.code_version())
result, _ = cluster.run_job(job)
print(json.dumps([result.status, seen["threads"]]))
"""
    done = run_python("-c", code, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    status, threads = json.loads(done.stdout.splitlines()[-1])
    assert status == "graded"
    assert threads == 1, f"the judge ran on {threads} torch threads (expected 1, as on a Dask worker)"

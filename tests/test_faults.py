"""Faults of what the grader writes to, through the real CLI (autograder/grading/faults.py): a full disk, a working
directory turned read-only or vanished mid-run, an unreachable gradebook database.

Each gives one line naming the cause, exit status 4, no traceback; nothing saved before is lost (byte for byte), no
temporary file is left, and once the fault is fixed the same command resumes. The full and read-only disks are a
small tmpfs the test mounts itself (skipped, saying why, where mounting is not permitted). Nothing depends on
timing: the faults are made between runs, and the working directory vanishes at a rendezvous (the grader blocks
reading its course configuration from a named pipe while the test removes the directory).
"""

import errno
import os
import shutil
import socket
import subprocess
import sys
import time

import nbformat
import pytest

from autograder.authoring import demo
from conftest import ROOT, course_env, run_python

CHAPTER = "02-qkv-attention"  # small and fast: 13 points
EXIT_FAULT = 4


def add_submission(folder, student):
    path = folder / student / CHAPTER / "exercises.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(demo.filled_submission(CHAPTER), str(path))


def grade_args(submissions, workdir, *extra):
    return ["-m", "autograder", "grade", str(submissions), "--workdir", str(workdir), "--seed", "1", "--device", "cpu",
            "--workers", "2", *extra]


def grade(submissions, workdir, *extra):
    return run_python(*grade_args(submissions, workdir, *extra))


def report(workdir, *extra):
    return run_python("-m", "autograder", "report", "--workdir", str(workdir), *extra)


def output(run) -> str:
    return f"exit {run.returncode}\n--- stdout\n{run.stdout[-3000:]}\n--- stderr\n{run.stderr[-3000:]}"


def assert_fault(run, *words):
    """Exit status 4, one `error:` line holding every word, no traceback."""
    assert run.returncode == EXIT_FAULT, output(run)
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, f"expected one error line:\n{output(run)}"
    for word in words:
        assert word in errors[0], f"{word!r} not in the error line:\n{errors[0]}"
    assert "Traceback" not in run.stdout + run.stderr, output(run)


def saved(workdir) -> dict:
    """Every saved result and the reports, byte for byte."""
    files = sorted((workdir / "results").rglob("*.json")) + [workdir / name for name in ("grades.csv", "summary.csv", "run-state.json")]
    return {p.relative_to(workdir).as_posix(): p.read_bytes() for p in files}


def temporary_files(root) -> list:
    return sorted(str(p) for p in root.rglob("*") if p.name.endswith(".tmp"))


def fill(folder):
    """A filler file that takes every free block of the filesystem."""
    with open(folder / "filler", "wb", buffering=0) as f:
        for chunk in (2**20, 2**12, 2**9):
            try:
                while True:
                    f.write(b"\0" * chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    assert shutil.disk_usage(folder).free < 2**16, shutil.disk_usage(folder)


@pytest.fixture
def small_fs(tmp_path):
    """A 24 MiB tmpfs at tmp_path/fs, unmounted afterwards whatever happens."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root (mount -t tmpfs)")
    mountpoint = tmp_path / "fs"
    mountpoint.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mountpoint)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {mounted.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", str(mountpoint)], capture_output=True)


def graded_twice(tmp_path, workdir):
    """alice and bob graded into workdir; carol added to the folder afterwards. Returns (folder, saved files)."""
    folder = tmp_path / "class"
    for student in ("alice", "bob"):
        add_submission(folder, student)
    first = grade(folder, workdir)
    assert first.returncode == 0 and "13/13" in first.stdout, output(first)
    add_submission(folder, "carol")
    return folder, saved(workdir)


def assert_resumes(folder, workdir, before):
    """The same command, once the fault is fixed: the earlier results are reused as they are, carol is graded."""
    again = grade(folder, workdir)
    assert again.returncode == 0, output(again)
    assert "Resuming: 2 notebook(s) already graded" in again.stdout, output(again)
    after = saved(workdir)
    for name in before:
        if name.startswith("results/"):
            assert after[name] == before[name], f"{name} changed on resume"
    assert "results/carol/02-qkv-attention.json" in after, sorted(after)
    assert temporary_files(workdir) == []


def test_a_full_disk_stops_with_one_line_keeps_every_result_and_resumes(tmp_path, small_fs):
    workdir = small_fs / "work"
    folder, before = graded_twice(tmp_path, workdir)
    fill(small_fs)

    run = grade(folder, workdir)
    assert_fault(run, f"the working directory {workdir} is full (No space left on device)", "run the same command again")
    assert saved(workdir) == before, "a result or report saved before the disk was full changed"
    assert temporary_files(small_fs) == [], "a temporary file was left on the full disk"

    rebuilt = report(workdir)  # it used to leave .summary.csv.<pid>.tmp behind, with a traceback
    assert_fault(rebuilt, "is full (No space left on device)")
    assert saved(workdir) == before
    assert temporary_files(small_fs) == [], "report left a temporary file on the full disk"

    (small_fs / "filler").unlink()
    assert_resumes(folder, workdir, before)


def test_a_read_only_working_directory_stops_with_one_line_and_resumes_once_writable(tmp_path, small_fs):
    workdir = small_fs / "work"
    folder, before = graded_twice(tmp_path, workdir)
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    try:
        run = grade(folder, workdir)
        assert_fault(run, f"the working directory {workdir} is read-only (Read-only file system)", "run the same command again")
        rebuilt = report(workdir)
        assert_fault(rebuilt, "is read-only (Read-only file system)")
        assert saved(workdir) == before
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_fs)], check=True)
    assert temporary_files(small_fs) == []
    assert_resumes(folder, workdir, before)


def test_a_working_directory_that_vanishes_mid_run_is_not_silently_made_again(tmp_path):
    folder = tmp_path / "class"
    workdir = tmp_path / "work"
    add_submission(folder, "alice")
    first = grade(folder, workdir)
    assert first.returncode == 0, output(first)
    add_submission(folder, "bob")

    pipe = tmp_path / "course.toml"
    os.mkfifo(pipe)
    proc = subprocess.Popen([sys.executable, *grade_args(folder, workdir, "--course-config", str(pipe))], cwd=ROOT, env=course_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while True:  # the grader holds the working directory and is reading its configuration: the rendezvous
            try:
                writer = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError as exc:
                assert exc.errno == errno.ENXIO, exc
            assert proc.poll() is None, f"the grader ended before reading its configuration:\n{proc.communicate()}"
            assert time.monotonic() < deadline, "the grader never read its configuration"
            time.sleep(0.05)
        shutil.rmtree(workdir)  # removed (or unmounted) while the run holds it
        os.close(writer)  # an empty configuration: the run goes on
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    run = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert_fault(run, f"the working directory {workdir} vanished during the run")
    assert not workdir.exists(), "the run made a new, empty working directory and graded into it"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_database_stops_with_one_line_and_grades_nothing(tmp_path):
    folder = tmp_path / "class"
    workdir = tmp_path / "work"
    add_submission(folder, "alice")
    url = f"postgresql+psycopg://grader@127.0.0.1:{closed_port()}/course"

    run = grade(folder, workdir, "--db", url)
    assert_fault(run, "cannot reach the gradebook database", f"127.0.0.1:", "start the database")
    assert not (workdir / "results").exists() and not (workdir / "submitted").exists(), "something was graded"

    rebuilt = report(workdir, "--db", url)
    assert_fault(rebuilt, "cannot reach the gradebook database")

    wrong = report(workdir, "--db", "not a url")  # a wrong URL stays a usage error
    assert wrong.returncode == 2 and "is not a database URL" in wrong.stderr, output(wrong)

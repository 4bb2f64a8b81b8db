"""One grader per working directory (autograder/grading/lock.py), through the real CLI and real processes.

The other run is a real process holding the grader's own lock (so the test does not depend on how long a grading
run takes): while it holds it, `grade` and `report` on that working directory do nothing and exit 3, naming it;
once it is killed (kill -9: the kernel releases an flock with the process), the same command grades.
"""

import os
import signal
import subprocess
import sys
import time

from autograder.authoring import demo
from conftest import ROOT, course_env, run_python

HOLDER = """
import sys
from pathlib import Path
from autograder.grading import lock
with lock.hold(Path(sys.argv[1]), "grade (a test's holder)"):
    print("held", flush=True)
    sys.stdin.read()  # until the test closes stdin, or kills this process
"""


def start_holder(workdir):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(workdir)], cwd=ROOT, env=course_env(), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_second_run_on_a_held_working_directory_does_nothing_and_says_who_holds_it(tmp_path):
    workdir = tmp_path / "work"
    holder = start_holder(workdir)
    try:
        graded = run_python("-m", "autograder", "grade", str(demo.DEMO_DIR), "--workdir", str(workdir), "--seed", "1", "--device", "cpu")
        assert graded.returncode == 3, graded.stdout[-1500:] + graded.stderr[-1500:]
        assert "in use by another run of the grader" in graded.stderr and f"process {holder.pid}" in graded.stderr, graded.stderr
        assert not (workdir / "results").exists() and not (workdir / "run-state.json").exists(), "the refused run wrote into the working directory"
        reported = run_python("-m", "autograder", "report", "--workdir", str(workdir))
        assert reported.returncode == 3 and f"process {holder.pid}" in reported.stderr, reported.stderr
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_run_leaves_nothing_stuck(tmp_path):
    workdir = tmp_path / "work"
    holder = start_holder(workdir)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    graded = run_python("-m", "autograder", "grade", str(demo.DEMO_DIR), "--workdir", str(workdir), "--seed", "1", "--device", "cpu")
    assert graded.returncode == 0, graded.stdout[-2000:] + graded.stderr[-2000:]
    assert "13/13" in graded.stdout


def test_a_refused_usage_leaves_no_working_directory_behind(tmp_path):
    workdir = tmp_path / "new-work"
    empty = tmp_path / "empty-class"
    empty.mkdir()
    result = run_python("-m", "autograder", "grade", str(empty), "--workdir", str(workdir))
    assert result.returncode == 2 and "no submissions found" in result.stderr, result.stderr
    assert not workdir.exists(), "a run that graded nothing left a working directory it created"

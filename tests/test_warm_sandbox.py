"""The warm path (autograder/grading/warm.py): each notebook is forked from a template that has paid its imports,
with the same isolation as a cold sandbox, and nothing one notebook does reaches the next.

The leak corpus runs through the real CLI with one worker, so that every notebook is a child of the same template:
`a-leaver` tries to leave something behind of every kind the issue names (files in /tmp, the home and /dev/shm,
environment variables, monkeypatched torch and builtins, sys.modules entries, RNG state, signal handlers, threads,
and a thread and a child process left running that forge report records for the next notebook's cells);
`b-detector`, graded after it, breaks its own attention if it finds any of it, so a leak costs it points. The
control `c-self-leak` leaves the same state (without the forgers) and detects in the same notebook: it must lose
those points, so the detector is not blind. The same batch graded cold gives every notebook the same
score. A notebook that tries to kill or corrupt the template is contained, and the notebooks after it still fork
warm.
"""

import json
import threading
from pathlib import Path

import pytest

from autograder.grading import sandbox
from conftest import course_env, run_python
from test_grading_safety import CHAPTER, FULL, add_cell, reference_nb, write_submission

pytestmark = pytest.mark.skipif(sandbox.mode() == "none", reason="the warm path needs bubblewrap (make test installs it as root)")

LEAVE_STATE = r'''
import builtins, os, random, signal, sys, threading, time
import numpy as np
import torch

for path in ("/tmp/left-by-a", os.path.expanduser("~/left-in-home"), "/dev/shm/left-by-a"):
    try:
        open(path, "w").write("left")
    except OSError:
        pass
os.environ["LEFT_BY_A"] = "1"
builtins.LEFT_BY_A = True
torch.left_by_a = True
torch.Tensor.left_by_a = True
sys.modules["left_by_a"] = type(sys)("left_by_a")
torch.manual_seed(1234); np.random.seed(1234); random.seed(1234)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGUSR1, signal.SIG_IGN)

threading.Thread(target=lambda: time.sleep(3600), daemon=True).start()
'''

FORGE = r'''
import json, os, signal, threading, time

# Forged records for every cell of the next notebook, on every descriptor that might be the report channel.
FORGED = "".join(json.dumps(r) + "\n" for k in range(40) for r in (
    {"event": "probe", "cell": k, "calls": [{"ok": False, "error": "forged by a-leaver", "outputs": None, "forbidden": []}] * 8},
    {"event": "done", "cell": k, "ok": False, "error": "forged by a-leaver"})) + json.dumps({"event": "end"}) + "\n"

def spam():
    while True:
        for fd in range(3, 30):
            try:
                os.write(fd, FORGED.encode())
            except OSError:
                pass
        time.sleep(0.02)

threading.Thread(target=spam, daemon=True).start()
try:
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        spam()
except OSError:
    pass
'''


DETECT = r'''
import builtins, os, random, signal, sys, threading
import numpy as np
import torch

leaks = []
for path in ("/tmp/left-by-a", os.path.expanduser("~/left-in-home"), "/dev/shm/left-by-a"):
    if os.path.exists(path):
        leaks.append(f"file {path}")
if os.environ.get("LEFT_BY_A"):
    leaks.append("environment")
if getattr(builtins, "LEFT_BY_A", False):
    leaks.append("builtins")
if getattr(torch, "left_by_a", False) or getattr(torch.Tensor, "left_by_a", False):
    leaks.append("torch patched")
if "left_by_a" in sys.modules:
    leaks.append("sys.modules")
if torch.initial_seed() == 1234 or np.random.get_state()[1][0] == np.random.RandomState(1234).get_state()[1][0] \
        or random.getstate() == random.Random(1234).getstate():
    leaks.append("RNG state")
if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN or signal.getsignal(signal.SIGUSR1) is signal.SIG_IGN:
    leaks.append("signal handler")
if threading.active_count() > 1 or len(os.listdir("/proc/self/task")) > 1:
    leaks.append("thread")
if leaks:  # a leak makes this notebook's attention wrong, so it costs points
    _real_matmul = torch.matmul
    torch.matmul = lambda a, b, **kw: _real_matmul(a, b, **kw) + 1.0
    torch.Tensor.__matmul__ = lambda a, b: _real_matmul(a, b) + 1.0
print("leaks:", leaks)
'''

KILL_TEMPLATE = r'''
import os, signal
for pid in range(1, 200):  # every process this notebook can name or see
    if pid == os.getpid():
        continue
    for sig in (signal.SIGKILL, signal.SIGSTOP):
        try:
            os.kill(pid, sig)
        except OSError:
            pass
for entry in os.listdir("/proc"):  # and through /proc: the memory of whatever else is listed there
    if entry.isdigit() and int(entry) != os.getpid():
        try:
            with open(f"/proc/{entry}/mem", "r+b") as mem:
                mem.seek(0x400000)
                mem.write(b"\0" * 4096)
        except OSError:
            pass
try:
    os.kill(os.getppid(), signal.SIGKILL)
    os.kill(-1, signal.SIGKILL)
except OSError:
    pass
'''


def _grade(root, workdir, **env):
    return run_python("-m", "autograder", "grade", str(root), "--workdir", str(workdir), "--device", "cpu", "--seed", "3",
                      "--workers", "1", "--cell-timeout", "10", timeout=900) if not env else _run_env(root, workdir, env)


def _run_env(root, workdir, env):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "autograder", "grade", str(root), "--workdir", str(workdir), "--device", "cpu",
                           "--seed", "3", "--workers", "1", "--cell-timeout", "10"],
                          env=course_env(**env), capture_output=True, text=True, timeout=900)


def _results(workdir):
    return {p.parent.name: json.loads(p.read_text())["result"] for p in (workdir / "results").glob(f"*/{CHAPTER}.json")}


def _scores(workdir):
    return {student: result["score"] for student, result in _results(workdir).items()}


def _starts(workdir):
    return {student: result["start"] for student, result in _results(workdir).items()}


@pytest.fixture(scope="module")
def leak_batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("leak-submissions")
    notebooks = {
        "a-leaver": add_cell(add_cell(reference_nb(), FORGE, after="imports"), LEAVE_STATE, after="imports"),
        "b-detector": add_cell(reference_nb(), DETECT, after="imports"),
        "c-self-leak": add_cell(add_cell(reference_nb(), DETECT, after="imports"), LEAVE_STATE, after="imports"),
        "d-kills-template": add_cell(reference_nb(), KILL_TEMPLATE, after="imports"),
        "e-after-kill": add_cell(reference_nb(), DETECT, after="imports"),
    }
    for student, nb in notebooks.items():
        write_submission(root, student, nb)
    warm_dir, cold_dir = tmp_path_factory.mktemp("warm"), tmp_path_factory.mktemp("cold")
    warm = _grade(root, warm_dir)
    cold = _grade(root, cold_dir, COURSE_WARM="off")
    return dict(warm=warm, cold=cold, warm_dir=warm_dir, cold_dir=cold_dir)


def test_the_batch_runs_warm(leak_batch):
    warm = leak_batch["warm"]
    assert warm.returncode == 0, f"{warm.stdout[-3000:]}\n{warm.stderr[-3000:]}"
    starts = _starts(leak_batch["warm_dir"])
    assert set(starts.values()) == {"warm"}, f"every notebook should fork from the template: {starts}"
    assert "notebook(s) forked from a warm template" in warm.stdout


def test_no_template_folder_outlives_its_grader(leak_batch):
    """The workers close their templates when the run ends; folders of a grader killed before it could are removed by
    the next one's first template."""
    import tempfile
    from pathlib import Path

    left = [p.name for p in Path(tempfile.gettempdir()).glob("course-[tj]*-*-*")
            if p.name.startswith(("course-template-", "course-jobs-")) and not Path(f"/proc/{p.name.split('-')[2]}").exists()]
    assert not left, f"template folders of graders that have ended: {left}"


def test_nothing_a_notebook_leaves_reaches_the_next(leak_batch):
    scores = _scores(leak_batch["warm_dir"])
    assert scores["b-detector"] == FULL, f"the notebook graded after a-leaver found something it left: {scores}"


def test_the_detector_finds_leaks_in_its_own_notebook(leak_batch):
    """The control: leaving and detecting in one notebook costs points, so the detector is not blind."""
    scores = _scores(leak_batch["warm_dir"])
    assert scores["c-self-leak"] < FULL, f"the detector missed leaks in its own notebook: {scores}"


def test_a_notebook_that_attacks_the_template_is_contained(leak_batch):
    scores, starts = _scores(leak_batch["warm_dir"]), _starts(leak_batch["warm_dir"])
    assert scores["d-kills-template"] == FULL, f"its own functions are right: {scores}"
    assert scores["e-after-kill"] == FULL, f"the notebook after it is graded as usual: {scores}"
    assert starts["e-after-kill"] == "warm", f"the template survived (the next notebook forked warm): {starts}"


def test_cold_and_warm_give_the_same_scores(leak_batch):
    cold = leak_batch["cold"]
    assert cold.returncode == 0, f"{cold.stdout[-3000:]}\n{cold.stderr[-3000:]}"
    assert set(_starts(leak_batch["cold_dir"]).values()) == {"cold: COURSE_WARM=off"}
    assert "started cold (5 COURSE_WARM=off)" in cold.stdout
    assert _scores(leak_batch["warm_dir"]) == _scores(leak_batch["cold_dir"])


def _job(tmp_path, *sources):
    """A job folder with plain code cells (no probes), as notebook.write_job writes it."""
    import shutil

    import numpy as np

    from autograder.checks import runner

    folder = tmp_path / f"job{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    cells = [{"index": i, "kind": "code", "probe": None, "source": source} for i, source in enumerate(sources)]
    (folder / "job.json").write_text(json.dumps({"cells": cells, "probes": {}}))
    np.savez(folder / "inputs.npz")
    shutil.copy(runner.__file__, folder / "runner.py")
    for path in [folder, *folder.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


def _printed(outcome):
    return [r.get("stdout", "").strip() for r in outcome.records if r.get("event") == "done"]


def test_a_lost_template_is_replaced_and_a_hung_notebook_ends_only_its_own(tmp_path):
    """The template killed from outside (a crash, the OOM killer): the next notebook forks from a new one. A notebook
    past its time limit ends its template as it would end a cold sandbox, and so does nothing to the next notebook;
    a notebook whose process dies is reported as a cold run reports it."""
    from autograder.grading import warm

    limits, mode = sandbox.Limits(cell_seconds=3, notebook_seconds=20), sandbox.mode()
    first = warm.run_job(_job(tmp_path, "print(6 * 7)"), mode, limits)
    assert (first.status, first.start, _printed(first)) == ("finished", "warm", ["42"]), first
    template = next(t for t in warm._templates.values() if t.key == warm._key(mode, limits))
    import os

    os.killpg(template.proc.pid, 9)
    template.proc.wait()
    lost = warm.run_job(_job(tmp_path, "print('after the loss')"), mode, limits)
    assert lost.status == "finished" and _printed(lost) == ["after the loss"], lost
    again = warm.run_job(_job(tmp_path, "print('warm again')"), mode, limits)
    assert (again.status, again.start) == ("finished", "warm"), again
    hung = warm.run_job(_job(tmp_path, "print('before')", "while True: pass", "print('never')"), mode, limits)
    assert hung.status == "timeout" and hung.cell == 1 and hung.start == "warm", hung
    after = warm.run_job(_job(tmp_path, "print('next')"), mode, limits)
    assert (after.status, after.start, _printed(after)) == ("finished", "warm", ["next"]), after
    died = warm.run_job(_job(tmp_path, "import os; os._exit(3)"), mode, limits)
    assert died.status == "died" and "status 3" in died.detail and died.start == "warm", died
    warm.close_all()


def test_a_chapters_longer_time_limit_is_served_by_the_same_warm_template(tmp_path):
    """A chapter whose check trains a model asks for more time (its checks module's LIMITS): its notebook forks from
    the same template as every other chapter's (the time limits are per job, not part of the template's key), gets
    its own longer limit, and the next notebook is held to the run's limit again."""
    import types

    from autograder.grading import notebook, warm

    limits, mode = sandbox.Limits(cell_seconds=1, notebook_seconds=20), sandbox.mode()
    capstone = types.SimpleNamespace(__name__="capstone_checks", LIMITS={"cell_seconds": 8})
    longer = notebook.chapter_limits(limits, capstone)
    assert (longer.cell_seconds, longer.notebook_seconds, longer.memory_bytes) == (8, 20, limits.memory_bytes)
    slow = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 2.5: pass\nprint('trained')"
    first = warm.run_job(_job(tmp_path, "print(1)"), mode, limits)
    assert (first.status, first.start) == ("finished", "warm"), first
    template = next(t for t in warm._templates.values() if t.key == warm._key(mode, limits))
    served = warm.run_job(_job(tmp_path, slow), mode, longer)
    assert (served.status, served.start, _printed(served)) == ("finished", "warm", ["trained"]), served
    assert template.alive() and warm._templates.get(threading.get_native_id()) is template  # the same template
    held = warm.run_job(_job(tmp_path, slow), mode, limits)  # the run's own 1 s limit: the same cell times out
    assert held.status == "timeout" and "1 s" in held.detail, held
    warm.close_all()


def test_a_template_started_early_serves_the_thread_that_started_it(tmp_path):
    """warm.start_early (the grading process's single notebook, an --only rerun) returns at once and its template
    serves this thread's first notebook warm: the template must outlive the helper thread that waits for it to be
    ready (bubblewrap ends a sandbox with the thread that started it, --die-with-parent)."""
    import time

    from autograder.grading import warm

    warm.close_all()
    limits, mode = sandbox.Limits(cell_seconds=5, notebook_seconds=20), sandbox.mode()
    began = time.monotonic()
    warm.start_early(mode, limits)
    assert time.monotonic() - began < 1.0, "start_early waited for the template to start"
    time.sleep(0.5)  # the helper thread may finish before the first job: the template must stay
    first = warm.run_job(_job(tmp_path, "print('served')"), mode, limits)
    assert (first.status, first.start, _printed(first)) == ("finished", "warm", ["served"]), first
    assert len(warm._templates) == 1, "a second template was started beside the early one"
    warm.close_all()


def test_the_cli_starts_the_template_of_a_single_notebook_before_importing_torch(tmp_path):
    """An --only rerun of one notebook: the command begins its grading process's template before its own imports
    (torch, nbgrader), with the limits grade() will give it (sandbox.run_limits: the same key, so it is used, not
    started again); for two or more notebooks it begins none (the cluster's workers have their own)."""
    import json
    import subprocess
    import sys

    for student in ("ana", "bo"):
        (tmp_path / "in" / student / "02-qkv-attention").mkdir(parents=True)
        (tmp_path / "in" / student / "02-qkv-attention" / "exercises.ipynb").write_text("{}")
    probe = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from autograder import __main__ as m\n"
        "from autograder.grading import warm, sandbox\n"
        "args = m.argparse.Namespace(scheduler=None, submissions=Path(sys.argv[1]), workdir=Path(sys.argv[2]), restart=False,\n"
        "    device='cpu', only=sys.argv[3:], chapter=None, workers=2, cell_timeout=30.0, notebook_timeout=None, memory_mb=None,\n"
        "    notebook_memory_mb=None)\n"
        "cluster = m._start_early(args)\n"
        "starting = bool(warm._starting)\n"
        "torch_loaded = 'torch' in sys.modules\n"
        "for thread in list(warm._starting.values()): thread.join()\n"
        "early = next(iter(warm._templates.values()), None)\n"
        "template, why = warm._template(sandbox.mode(), sandbox.run_limits('cpu', 30.0))\n"
        "print(json.dumps({'cluster': cluster is not None, 'starting': starting, 'torch': torch_loaded,\n"
        "                  'same': template is not None and template is early, 'why': why}))\n"
        "if cluster is not None: cluster.close()\n"
        "warm.close_all()\n"
    )

    def start(*only):
        done = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "in"), str(tmp_path / "work"), *only],
                              capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[1])
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    one = start("ana")
    assert one["starting"] and not one["cluster"], f"one notebook: its template is begun, no cluster ({one})"
    assert not one["torch"], "the template was begun after torch was imported: it would not overlap the imports"
    assert one["same"] and one["why"] is None, f"grade()'s limits give another template key: started twice ({one})"
    both = start("ana", "bo")
    assert both["cluster"] and not both["starting"], f"two notebooks: the cluster, no template of the process ({both})"


def test_a_chapter_can_raise_its_time_limits_but_nothing_else():
    import types

    from autograder.grading import notebook

    limits = sandbox.Limits(cell_seconds=30, notebook_seconds=120)
    plain = types.SimpleNamespace(__name__="plain")
    assert notebook.chapter_limits(limits, plain) == limits
    lower = types.SimpleNamespace(__name__="lower", LIMITS={"cell_seconds": 5, "notebook_seconds": 600})
    assert (notebook.chapter_limits(limits, lower).cell_seconds, notebook.chapter_limits(limits, lower).notebook_seconds) == (30, 600)
    memory = types.SimpleNamespace(__name__="memory", LIMITS={"memory_bytes": 2**40})
    with pytest.raises(ValueError, match="memory_bytes"):
        notebook.chapter_limits(limits, memory)


# --- Hostile notebooks against the channels between sandboxes and the grader (issue 29) -------------------------
# tests/isolation_corpus.py holds the class: attackers on the report channel, on what a child inherits and on the
# kernel's shared objects, victims with secrets, a snoop, an accomplice that runs whatever was planted for it, and a
# sentinel. The whole class is graded once per mode through the real CLI with one worker; every rule must hold in
# each (scripts/isolation_attacks.py grades each attack alone, to show what it does on another version).

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import isolation_corpus as corpus


def _mode_unavailable(mode):
    warm, unprivileged, groups = corpus.MODES[mode]
    if unprivileged and os.geteuid() != 0:
        return "the unprivileged modes run the grader as uid 65534, which needs root"
    if unprivileged:
        probe = subprocess.run(["setpriv", f"--reuid={corpus.UNPRIVILEGED_UID}", f"--regid={corpus.UNPRIVILEGED_UID}",
                                "--clear-groups", "bwrap", "--unshare-user", "--unshare-net", "--ro-bind", "/", "/", "true"],
                               capture_output=True)
        if probe.returncode != 0:
            return "this host gives an unprivileged user no user namespaces (bubblewrap cannot run unprivileged)"
    if not unprivileged and os.geteuid() != 0:
        return "the root modes need root"
    if groups and sandbox.memory_group_parent() is None:
        return "no memory cgroup can be made on this host"
    return None


# The suite grades the class in every warm mode (the template and its children are where a notebook could reach the
# next one) and in one cold mode, the one with the most to drop (root, memory groups). A cold run differs from a
# warm one only in how its sandbox starts: the same bubblewrap command and rlimits, without the template. The other
# two cold modes (about 70 s each) are graded by `python scripts/isolation_attacks.py` (all six modes by default).
SUITE_MODES = ("warm-root-groups", "warm-root-nogroups", "warm-unprivileged", "cold-root-groups")


@pytest.fixture(scope="module", params=SUITE_MODES)
def attacked_class(request):
    mode = request.param
    why = _mode_unavailable(mode)
    if why:
        pytest.skip(why)
    base = Path(tempfile.mkdtemp(prefix="course-attacked-"))
    base.chmod(0o755)  # the unprivileged grader must reach its folders
    root, workdir = base / "class", base / "work"
    root.mkdir()
    students = corpus.class_folder(root)
    account = corpus.grade_class(root, workdir, mode, sys.executable, course_env())
    yield mode, students, account
    shutil.rmtree(base, ignore_errors=True)


def test_no_attack_reaches_another_students_grade_or_the_grader(attacked_class):
    """Every victim, the sentinel and every attacker keep the score of their own work, the accomplice keeps the blank
    score, no victim's secret is in another student's outputs, and the grader's memory stays under its bound."""
    mode, students, account = attacked_class
    found = corpus.harms(account, students)
    assert not found, (f"{mode}: " + "; ".join(found) + f"\n{account['stdout'][-2500:]}\n{account['stderr'][-1500:]}")


def test_the_class_ran_in_the_mode_asked(attacked_class):
    """The attacks ran where they were meant to: forked from warm templates, or cold; the accomplice's loader and
    the snoop did run (their lines are in their feedback), so a clean result is not a loader that never ran."""
    mode, students, account = attacked_class
    warm, unprivileged, _ = corpus.MODES[mode]
    assert account["sandbox"] == ("bwrap" if unprivileged else "bwrap-root"), account["sandbox"]
    starts = {s: r.get("start", "") for s, r in account["results"].items()}
    if warm:
        assert starts["z-sentinel"] == "warm" and starts["m-victim-1"] == "warm", starts
    else:
        assert all(start.startswith("cold") for start in starts.values()), starts
    assert "ACCOMPLICE FOUND: nothing" in account["outputs"]["y-accomplice"]
    assert "SNOOP FOUND: nothing" in account["outputs"]["x-snoop"]
    assert account["peak_rss_mib"] is not None


def _points(result, names):
    return sum(c["score"] for c in result["cells"] if c["grade_id"].removesuffix("_hidden") in names)


def test_hidden_inputs_printed_in_one_feedback_earn_nothing_elsewhere(tmp_path):
    """A notebook prints its hidden inputs into its own feedback; answers computed elsewhere for exactly those inputs
    (the reference's, standing for a friend's solution or a forbidden built-in) earn nothing in another student's
    notebook, nor in the printer's own next version: each submission's inputs are drawn for it (the run's seed, the
    student, the chapter, the code). The table is shown right for the printed inputs, so its misses are the inputs'."""
    import html
    import re

    from solutions import ch06_positional_encoding as reference

    root, workdir = tmp_path / "class", tmp_path / "work"
    path = root / "p-printer" / corpus.CHAPTER / "exercises.ipynb"
    path.parent.mkdir(parents=True)
    import nbformat

    nbformat.write(corpus.printer(), path)
    first = corpus.grade_class(root, workdir, "warm-root-nogroups", sys.executable, course_env())
    assert first["results"]["p-printer"]["score"] == corpus.FULL, first["stdout"][-2000:]
    printed = json.loads(re.search(r"INPUTS:(\{.*?\}):END", html.unescape(first["outputs"]["p-printer"])).group(1))
    table = corpus.answer_table(printed, reference)
    namespace = {}
    exec(corpus.LOOKUP.replace("TABLE_JSON", repr(json.dumps(table))), namespace)
    for name, calls in printed.items():  # the table answers the printed inputs exactly as the reference does
        for args, kwargs, device in calls:
            a = [corpus.decode_printed(s, device) for s in args]
            k = {key: corpus.decode_printed(s, device) for key, s in kwargs.items()}
            try:
                expected = getattr(reference, name)(*a, **k)
            except ValueError:
                with pytest.raises(ValueError):
                    namespace["_lookup"](name, a, k)
                continue
            assert torch_equal(namespace["_lookup"](name, a, k), expected)

    copier = root / "q-copier" / corpus.CHAPTER / "exercises.ipynb"
    copier.parent.mkdir(parents=True)
    nbformat.write(corpus.table_notebook(table), copier)
    nbformat.write(corpus.table_notebook(table), path)  # the printer's next version answers from its own table
    second = corpus.grade_class(root, workdir, "warm-root-nogroups", sys.executable, course_env())
    for student in ("q-copier", "p-printer"):
        result = second["results"][student]
        assert result["status"] == "graded" and _points(result, corpus.TABLED) == 0, (
            f"{student} earned {_points(result, corpus.TABLED)} points from a table of another submission's inputs")


def torch_equal(a, b):
    import torch

    return a.device == b.device and a.dtype == b.dtype and (a.device.type == "meta" or torch.equal(a, b))


def test_a_notebooks_inputs_are_its_own_and_the_same_on_every_rerun():
    from autograder.grading.notebook import inputs_seed

    cells = [{"source": "def f(x):\n    return x\n"}]
    seed = inputs_seed(3, "alice", corpus.CHAPTER, cells)
    assert seed == inputs_seed(3, "alice", corpus.CHAPTER, [dict(c) for c in cells]), "a rerun draws the same inputs"
    others = {inputs_seed(3, "bob", corpus.CHAPTER, cells), inputs_seed(4, "alice", corpus.CHAPTER, cells),
              inputs_seed(3, "alice", "02-qkv-attention", cells),
              inputs_seed(3, "alice", corpus.CHAPTER, [{"source": "def f(x):\n    return x  # v2\n"}])}
    assert seed not in others and len(others) == 4, "another student, run, chapter or version draws other inputs"

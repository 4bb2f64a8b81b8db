"""Grading you can trust: a cheat corpus and a bad-input corpus, each graded by the real CLI in one batch.

Every cheat is asserted to earn no unearned points (its score equals what its honest code earns: the
notebook's functions are wrong or absent, and the cheat tries to turn that into points) and to leave the
gradebook and the batch intact. Every bad input is asserted to get a clear per-student status or message
while the honest submissions in the same batch keep full marks. Then: resuming after kill -9, parallel
grading equal to serial, and feedback that does not leak the hidden checks.
"""

import json
import os
import queue
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time

import nbformat
import pytest

from autograder.authoring import demo
from autograder.grading import sandbox
from conftest import ROOT, course_env, run_python
from test_pipeline import graded_cells
from test_pipeline import read_summary as read_all_chapters

CHAPTER = "02-qkv-attention"
FULL = 13.0
# The honest score of a notebook whose scaled_dot_product_attention misses the scale: softmax (3), the
# variance experiment (2) and self-attention (3, graded with the reference in place of the learner's
# attention) are right; attention (5) is wrong.
MISSING_SCALE_SCORE = 8.0


def read_summary(workdir):
    """{student: {cell id: row}} for chapter 02."""
    return read_all_chapters(workdir, CHAPTER)


def reference_nb():
    return demo.filled_submission(CHAPTER)


def with_cell(nb, grade_id, edit):
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    cell.source = edit(cell.source)
    return nb


def add_cell(nb, source, after=None):
    """A code cell the learner added (no nbgrader metadata), after the cell `after` (default: at the top)."""
    cell = nbformat.v4.new_code_cell(source)
    index = 0
    if after:
        index = 1 + next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == after)
    nb.cells.insert(index, cell)
    return nb


def cheat(source, base="missing_scale", after="imports"):
    """A wrong notebook (one typical mistake) with a cheating cell added."""
    return add_cell(demo.filled_submission(CHAPTER, [base]), source, after)


def hidden_cell_of(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


@pytest.fixture(scope="module")
def listener():
    """A TCP server on the host's loopback: a sandboxed notebook must not be able to reach it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    connections = []
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                connections.append(server.accept())
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], connections
    stop.set()
    server.close()


def cheat_corpus(workdir, port):
    """{student: (notebook or raw text, the score it may earn at most)}."""
    gradebook = workdir / "gradebook.db"
    checks_file = ROOT / "autograder" / "checks" / "ch02_qkv_attention.py"
    corpus = {
        "honest": (reference_nb(), FULL),
        "honest-with-warnings": (
            with_cell(reference_nb(), "stable_softmax", lambda s: "import sys, warnings\n" + s.replace('    """', '    warnings.warn("just a warning")\n    print("debug output", file=sys.stderr)\n    """', 1)),
            FULL,
        ),
        "patch-allclose": (cheat("import torch\ntorch.allclose = lambda *a, **k: True\ntorch.equal = lambda *a, **k: True\ntorch.testing.assert_close = lambda *a, **k: None"), MISSING_SCALE_SCORE),
        "input-transformer": (cheat("get_ipython().input_transformers_cleanup.append(lambda lines: [])"), MISSING_SCALE_SCORE),
        "write-gradebook": (cheat(
            "import sqlite3\n"
            f"for path in ['../../../gradebook.db', {str(gradebook)!r}]:\n"
            "    try:\n"
            "        con = sqlite3.connect(path); con.execute('update grade set manual_score = 100'); con.commit()\n"
            "    except Exception as e:\n"
            "        print('blocked:', e)\n"
            f"open({str(gradebook)!r}, 'ab').write(b'x')"), MISSING_SCALE_SCORE),
        "read-hidden-checks": (cheat(
            "import glob\n"
            f"print(open({str(checks_file)!r}).read())\n"
            f"print(glob.glob({str(ROOT)!r} + '/**', recursive=True))"), MISSING_SCALE_SCORE),
        "import-course-packages": (cheat(
            "from solutions.ch02_qkv_attention import scaled_dot_product_attention\n"
            "from autograder.checks import ch02_qkv_attention"), MISSING_SCALE_SCORE),
        "import-solutions-in-solution": (
            with_cell(demo.filled_submission(CHAPTER, ["missing_scale"]), "scaled_dot_product_attention",
                      lambda s: s + "\nfrom solutions.ch02_qkv_attention import scaled_dot_product_attention\n"),
            MISSING_SCALE_SCORE,
        ),
        "torch-sdpa-in-solution": (
            with_cell(reference_nb(), "scaled_dot_product_attention", lambda s: (
                "def scaled_dot_product_attention(q, k, v, mask=None):\n"
                "    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)\n"
                "    w = stable_softmax((q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).masked_fill(~mask if mask is not None else torch.zeros((), dtype=torch.bool, device=q.device), float('-inf')), dim=-1)\n"
                "    return out, w\n")),
            # Attention earns nothing. Self-attention, which calls it, is run again with the reference's attention
            # results in its place (a replay round) and keeps its points: the built-in is switched off, so a
            # "callee" cannot carry the caller's shortcut.
            FULL - 5,
        ),
        "torch-softmax-hidden-in-helper": (
            add_cell(with_cell(reference_nb(), "stable_softmax", lambda s: "def stable_softmax(x, dim=-1):\n    return _helper(x, dim)\n"),
                     "import torch\n_helper = getattr(torch, 'soft' + 'max')", after="imports"),
            # The static scan sees nothing; the guard has switched softmax off, so stable_softmax earns nothing; the
            # attention functions that call it are graded in a replay round with the reference's softmax results.
            FULL - 3,
        ),
        # Redefining a graded function in an added cell, with torch's function modes switched off through a
        # private API, around the forbidden built-in: every learner cell is read (the softmax exercise earns nothing),
        # and the guard has switched softmax off; the attention functions that call it are graded in a replay round.
        "redefine-with-private-api": (
            add_cell(reference_nb(), "import torch\ndef stable_softmax(x, dim=-1):\n    with torch._C.DisableTorchFunction():\n"
                     "        return torch.softmax(x, dim)", after="stable_softmax"),
            FULL - 3,
        ),
        # Switching the observers off for the whole run, in a cell of its own: every exercise earns nothing.
        "disable-observers-globally": (
            add_cell(reference_nb(), "import torch\n_guard = torch._C.DisableTorchFunction()\n_guard.__enter__()", after="imports"),
            0.0,
        ),
        # An ATen op reached through a name the static reading cannot resolve: switched off by the guard (and seen by
        # the dispatch-level observer); the attention functions that call it are graded in a replay round.
        "aten-softmax-through-a-computed-name": (
            add_cell(with_cell(reference_nb(), "stable_softmax", lambda s: "def stable_softmax(x, dim=-1):\n    return _helper(x, dim, False)\n"),
                     "import torch\n_helper = getattr(torch.ops.aten, '_soft' + 'max')", after="imports"),
            FULL - 3,
        ),
        # In-process tampering: learner code in the graded interpreter reaching the grader's own objects (frames,
        # tracebacks, gc, module globals, sys.modules lookalikes, the report stream, a fresh interpreter, a fork) to
        # make it forget the forbidden built-ins it used, found without naming them. The guard switches the
        # built-ins off before any learner code runs, so none of these routes yields the built-in's values.
        # (Self-attention, which calls the cheating attention, is graded in a replay round and keeps its 3 points.)
        **{f"tamper-{route}": (tampering_attention(code), FULL - 5) for route, code in TAMPER_ROUTES.items()},
        "tamper-runner-globals": (add_cell(tampering_attention(""), TAMPER_RUNNER_GLOBALS, after="imports"), FULL - 5),
        "tamper-sys-modules-lookalike": (add_cell(tampering_attention(""), TAMPER_LOOKALIKE, after="imports"), FULL - 5),
        "tamper-forged-report": (add_cell(demo.filled_submission(CHAPTER, ["missing_scale"]), TAMPER_FORGED_REPORT, after="self_attention"),
                                 MISSING_SCALE_SCORE),
        # Faking the end of the run only stops the grader from reading further: the learner loses the rest.
        "fake-report-end": (cheat("import os\nfor fd in range(3, 20):\n    try:\n        os.write(fd, b'{\"event\": \"end\"}\\n')\n    except OSError:\n        pass"), 0.0),
        "network": (cheat(
            "import socket\ntry:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'stolen')\n"
            "except OSError as e:\n    print('no network:', e)"), MISSING_SCALE_SCORE),
        "edit-hidden-cell": (
            _edited_hidden(demo.filled_submission(CHAPTER, ["missing_scale"])), MISSING_SCALE_SCORE,
        ),
        "duplicated-cell": (_duplicated(reference_nb()), FULL),
        "kill-the-grader": (cheat("import os, signal\nfor pid in (1, os.getppid()):\n    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass"), MISSING_SCALE_SCORE),
    }
    return corpus


# scaled_dot_product_attention computed by torch's built-ins, found by scanning a module's namespace, in a helper
# that a cell the learner added defines (that cell defines no graded function: the static reading looks there only
# for torch's private machinery), with {tamper} run after the built-ins to erase what the grader observed. The
# solution cell only calls the helper.
TAMPERING_HELPER = """import math, sys, torch
def _fast_attention(q, k, v, mask=None):
    space = vars(torch.nn.functional)
    attend = next(f for n, f in space.items() if n.startswith("scaled_dot") and callable(f))
    normalise = next(f for n, f in space.items() if n.startswith("sof") and n.endswith("tmax"))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = normalise(scores, dim=-1)
    out = attend(q, k, v, attn_mask=mask)
{tamper}
    return out, weights
"""
CALLS_THE_HELPER = "def scaled_dot_product_attention(q, k, v, mask=None):\n    return _fast_attention(q, k, v, mask)\n"
ERASE = """        for value in list(frame.f_locals.values()):
            if isinstance(value, list) and any(isinstance(x, str) and ("soft" in x or "attention" in x) for x in value):
                value.clear()
"""
TAMPER_ROUTES = {
    "frames": "    frame = sys._getframe(1)\n    while frame is not None:\n" + ERASE + "        frame = frame.f_back",
    "traceback": ("    try:\n        raise ValueError()\n    except ValueError as e:\n        frame = e.__traceback__.tb_frame\n"
                  "    while frame is not None:\n" + ERASE + "        frame = frame.f_back"),
    "gc-objects": ("    import gc\n    for value in gc.get_objects():\n"
                   "        if isinstance(value, list) and any(isinstance(x, str) and ('soft' in x or 'attention' in x) for x in value):\n"
                   "            value.clear()"),
    "gc-referrers": ("    import gc\n    for holder in gc.get_referrers(attend, normalise):\n"
                     "        if isinstance(holder, list):\n            holder.clear()"),
    "finalizers": "    import weakref\n    for finalizer in list(weakref.finalize._registry):\n        finalizer()",
    # A fresh interpreter has no guard: the built-ins computed there, the values read back.
    "subprocess": ("    import pickle, subprocess\n    data = pickle.dumps((q.cpu(), k.cpu(), v.cpu(), None if mask is None else mask.cpu()))\n"
                   "    code = 'import pickle, sys, torch; q, k, v, m = pickle.load(sys.stdin.buffer); '"
                   " 'sys.stdout.buffer.write(pickle.dumps(torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)))'\n"
                   "    out = pickle.loads(subprocess.run([sys.executable, '-c', code], input=data, capture_output=True).stdout).to(q.device, q.dtype)"),
    "ctypes": "    import ctypes\n    ctypes.memset(id(sys.modules) + 10**9, 0, 8)",
}


def tampering_attention(tamper):
    """The reference notebook whose scaled_dot_product_attention calls the helper above, run with `tamper`."""
    nb = with_cell(reference_nb(), "scaled_dot_product_attention", lambda s: CALLS_THE_HELPER)
    return add_cell(nb, TAMPERING_HELPER.replace("{tamper}", tamper or "    pass"), after="imports")


# A cell that replaces the grader's observers through the runner's module globals.
TAMPER_RUNNER_GLOBALS = """import sys
_grader = sys.modules["__main__"]
for _name in dir(_grader):
    if "modes" in _name:
        _original = getattr(_grader, _name)
        setattr(_grader, _name, lambda names, *a, _original=_original, **k: _original(set(), *a, **k))
"""
# A cell that plants lookalike modules: the grader's observers, imported later by name, become no-ops.
TAMPER_LOOKALIKE = """import sys, types
class _Nothing:
    def __init__(self, *a, **k):
        pass
    def __enter__(self):
        return self
    def __exit__(self, *a):
        return False
for _name, _cls in (("torch.over" + "rides", "TorchFunction" + "Mode"), ("torch.utils._py" + "thon_dispatch", "TorchDispatch" + "Mode")):
    _fake = types.ModuleType(_name)
    setattr(_fake, _cls, _Nothing)
    sys.modules[_name] = _fake
"""
# A cell after the graded functions: it reads the grader's inputs, computes attention with the built-ins and writes
# a forged result for the attention check into every open file descriptor (the report stream among them).
TAMPER_FORGED_REPORT = """import json, os, sys
import numpy as np, torch
_grader = sys.modules["__main__"]
_job = json.load(open("/job/job.json"))
_arrays = dict(np.load("/job/inputs.npz"))
_space = vars(torch.nn.functional)
_attend = next(f for n, f in _space.items() if n.startswith("scaled_dot") and callable(f))
_normalise = next(f for n, f in _space.items() if n.startswith("sof") and n.endswith("tmax"))
_index = next(c["index"] for c in _job["cells"] if c.get("probe") == "scaled_dot_product_attention_hidden")
_forged = []
try:
    for _spec in _job["probes"]["scaled_dot_product_attention_hidden"]["calls"]:
        _args = [_grader.decode_arg(a, _arrays, _spec["device"]) for a in _spec["args"]]
        _q, _k, _v = _args[:3]
        _m = _args[3] if len(_args) > 3 else None
        _s = _q @ _k.transpose(-2, -1) / _q.size(-1) ** 0.5
        _w = _normalise(_s if _m is None else _s.masked_fill(~_m, float("-inf")), dim=-1)
        _forged.append({"ok": True, "error": None, "outputs": _grader.encode_value((_attend(_q, _k, _v, attn_mask=_m), _w)),
                        "mutated": False, "forbidden": []})
except Exception as e:
    print("could not forge:", e)
else:
    for _fd in range(3, 30):
        try:
            os.write(_fd, (json.dumps({"event": "probe", "cell": _index, "calls": _forged}) + "\\n").encode())
        except OSError:
            pass
"""


def _edited_hidden(nb):
    cell = hidden_cell_of(nb, "scaled_dot_product_attention_hidden")
    cell.source = "print('all checks passed')"
    cell.metadata["nbgrader"]["points"] = 100
    return nb


def _duplicated(nb):
    i = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "stable_softmax")
    nb.cells.insert(i + 1, nbformat.from_dict(json.loads(json.dumps(nb.cells[i]))))
    return nb


def bad_input_corpus(tmp_path):
    """{student: (notebook, raw text, or a callable writing the file; expected (score, message fragment))}."""
    ref = reference_nb
    loop_src = "    while True:\n        pass\n"
    stubborn_loop = "    while True:\n        try:\n            time.sleep(10)\n        except BaseException:\n            pass\n"
    renamed = ref()
    hidden_cell_of(renamed, "stable_softmax").metadata["nbgrader"]["grade_id"] = "my_softmax"
    deleted_tests = ref()
    deleted_tests.cells = [c for c in deleted_tests.cells if not c.metadata.get("nbgrader", {}).get("grade", False)]
    missing_solution = ref()
    missing_solution.cells = [c for c in missing_solution.cells if c.metadata.get("nbgrader", {}).get("grade_id") != "dot_product_variance"]
    v3 = nbformat.writes(ref()).replace('"nbformat": 4', '"nbformat": 3')
    no_metadata = ref()
    for c in no_metadata.cells:
        c.metadata = {}
    return {
        "good": (ref(), (FULL, "")),
        "malformed-json": ('{"cells": [', (0, "not a valid notebook")),
        "empty-file": ("", (0, "not a valid notebook")),
        "binary-garbage": (bytes(range(256)) * 10, (0, "not a valid notebook")),
        "json-not-notebook": ("[1, 2, 3]", (0, "not a notebook")),
        "nbformat-3": (v3, (0, "nbformat 3")),
        "symlink": ("symlink", (0, "symbolic link")),
        "renamed-cell-id": (renamed, (FULL, "missing")),
        "no-nbgrader-metadata": (no_metadata, (FULL, "missing")),  # the functions are still defined and checked
        "deleted-test-cells": (deleted_tests, (FULL, "")),
        "missing-solution-cell": (missing_solution, (FULL - 2, "not defined")),
        "kernel-death": (with_cell(ref(), "dot_product_variance", lambda s: "import os\nos._exit(3)\n" + s), (FULL - 2, "exited")),
        "segfault": (with_cell(ref(), "dot_product_variance", lambda s: "import faulthandler\nfaulthandler._sigsegv()\n" + s), (FULL - 2, "SIGSEGV")),
        "infinite-loop": (with_cell(ref(), "dot_product_variance", lambda s: s.replace('    """', loop_src + '    """', 1) + "\ndot_product_variance(4, 10, None)\n"), (FULL - 2, "time limit")),
        "loop-catching-interrupts": (with_cell(ref(), "self_attention", lambda s: "import time\n" + s + "\nwhile True:\n    try:\n        time.sleep(10)\n    except BaseException:\n        pass\n"), (FULL - 3, "time limit")),
        "memory-bomb": (with_cell(ref(), "dot_product_variance", lambda s: "hog = []\nwhile True:\n    hog.append(bytearray(2**26))\n" + s), (FULL - 2, ("MemoryError", "time limit", "memory limit"))),  # which comes first depends on the machine
        "torch-memory-bomb": (with_cell(ref(), "dot_product_variance", lambda s: "import torch\nhuge = torch.empty(2**40)\n" + s), (FULL - 2, "")),
        "output-flood": (add_cell(ref(), "for i in range(10**6):\n    print('flood' * 20)", after="self_attention"), (FULL, "")),
        "fd-flood": (add_cell(ref(), "import os\nfor i in range(10**5):\n    os.write(1, b'x' * 10000)\n    os.write(2, b'y' * 10000)", after="self_attention"), (FULL, "")),
        "fork-bomb": (add_cell(ref(), "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", after="self_attention"), (FULL, "time limit")),
        "sys-exit": (with_cell(ref(), "dot_product_variance", lambda s: "raise SystemExit(0)\n" + s), (FULL - 2, "")),
        **({"fork-and-fill": (add_cell(ref(), FORK_AND_FILL, after="self_attention"), (FULL, "went over their memory limit"))}
           if sandbox.memory_group_parent() else {}),  # without a memory cgroup it would fill the host's memory
    }, stubborn_loop


# An added cell that starts 3 processes filling 512 MiB each: under the per-process address-space limit (4 GiB),
# over what the notebook's processes may use together in this batch (--notebook-memory-mb 1024). The kernel
# stops some of them; the notebook goes on. The pages are populated by the kernel in one call (faster than
# writing them), and few, so the cell stays inside this batch's 8 s cell limit on a loaded machine; where it does
# not (a group at its limit may crawl while the kernel reclaims), the message still says the memory limit.
FORK_AND_FILL = """import mmap, os, time
children = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        block = mmap.mmap(-1, 2**29, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE)  # resident
        time.sleep(0.5)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
"""


def write_submission(root, student, content):
    path = root / student / CHAPTER / "exercises.ipynb"
    path.parent.mkdir(parents=True)
    if isinstance(content, nbformat.NotebookNode):
        nbformat.write(content, path)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content == "symlink":
        target = root.parent / f"{root.name}-elsewhere.ipynb"  # outside the folder: a file in it would be a "stray" entry
        nbformat.write(reference_nb(), target)
        path.symlink_to(target)
    else:
        path.write_text(content)
    return path


@pytest.fixture(scope="module")
def batch(tmp_path_factory, listener):
    """Both corpora in one batch, graded by the CLI with 2 workers and a short cell time limit."""
    port, connections = listener
    root = tmp_path_factory.mktemp("submissions")
    workdir = tmp_path_factory.mktemp("grading")
    cheats = cheat_corpus(workdir, port)
    bad, _ = bad_input_corpus(root)
    for student, (content, _) in {**cheats, **bad}.items():
        write_submission(root, student, content)
    start = time.perf_counter()
    result = run_python("-m", "autograder", "grade", str(root), "--workdir", str(workdir), "--device", "cpu", "--seed", "11",
                        "--cell-timeout", "8", "--workers", "2", "--notebook-memory-mb", "1024", timeout=1500)
    elapsed = time.perf_counter() - start
    return dict(workdir=workdir, rows=read_summary(workdir), result=result, cheats=cheats, bad=bad, connections=connections, seconds=elapsed,
                finished=time.time())


def score(rows, student):
    return sum(float(r["score"]) for r in graded_cells(rows, student).values())


def messages(rows, student):
    return " | ".join(r["message"] for r in rows[student].values())


def test_the_batch_finishes_and_reports_every_student(batch):
    result, rows = batch["result"], batch["rows"]
    assert sandbox.mode() != "none", "these tests need bubblewrap (apt install bubblewrap); `make test` installs it as root"
    assert result.returncode == 1, f"a batch with ungradable notebooks exits 1:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert set(rows) == set(batch["cheats"]) | set(batch["bad"]), f"missing from summary.csv: {set(batch['cheats']) | set(batch['bad']) - set(rows)}"
    for student in rows:
        assert len(graded_cells(rows, student)) == 4, f"{student}: every graded cell gets a row"


# Cheats that break torch itself for their own notebook (a lookalike module torch imports from too): they may earn less.
AT_MOST = {"tamper-sys-modules-lookalike"}


@pytest.mark.parametrize("student", [
    "honest", "honest-with-warnings", "patch-allclose", "input-transformer", "write-gradebook", "read-hidden-checks",
    "import-course-packages", "import-solutions-in-solution", "torch-sdpa-in-solution", "torch-softmax-hidden-in-helper",
    "fake-report-end", "network", "edit-hidden-cell", "duplicated-cell", "kill-the-grader",
    "redefine-with-private-api", "disable-observers-globally", "aten-softmax-through-a-computed-name",
    *[f"tamper-{route}" for route in TAMPER_ROUTES], "tamper-runner-globals", "tamper-sys-modules-lookalike", "tamper-forged-report",
])
def test_cheat_earns_no_unearned_points(batch, student):
    rows = batch["rows"]
    _, allowed = batch["cheats"][student]
    got = score(rows, student)
    if student in AT_MOST:
        assert got <= allowed, f"{student}: scored {got}, more than {allowed}; messages: {messages(rows, student)}"
        return
    assert got == allowed, f"{student}: scored {got}, expected exactly {allowed}; messages: {messages(rows, student)}"


def test_tampering_cheats_are_told_the_built_in_they_used(batch):
    rows = batch["rows"]
    for student in batch["cheats"]:
        if student.startswith("tamper-") and student not in AT_MOST | {"tamper-forged-report"}:
            message = rows[student]["scaled_dot_product_attention_hidden"]["message"]
            assert "the built-in this exercise asks you to write yourself" in message, f"{student}: {message[:300]}"


def test_forbidden_shortcuts_say_why(batch):
    rows = batch["rows"]
    assert "write it yourself" in rows["torch-sdpa-in-solution"]["scaled_dot_product_attention_hidden"]["message"]
    assert "imports the course's own" in rows["import-solutions-in-solution"]["scaled_dot_product_attention_hidden"]["message"]
    assert "torch.softmax" in rows["torch-softmax-hidden-in-helper"]["stable_softmax_hidden"]["message"]
    assert "private machinery" in rows["redefine-with-private-api"]["stable_softmax_hidden"]["message"]
    assert "switch off the grader's observation" in rows["disable-observers-globally"]["self_attention_hidden"]["message"]
    assert "torch._softmax" in rows["aten-softmax-through-a-computed-name"]["stable_softmax_hidden"]["message"]


def test_cheats_leave_the_gradebook_intact(batch):
    workdir = batch["workdir"]
    con = sqlite3.connect(workdir / "gradebook.db")
    manual = con.execute("select count(*) from grade where manual_score is not null").fetchone()[0]
    scores = dict(con.execute(
        "select student.id, sum(grade.auto_score) from grade join submitted_notebook on grade.notebook_id = submitted_notebook.id "
        "join submitted_assignment on submitted_notebook.assignment_id = submitted_assignment.id "
        "join student on submitted_assignment.student_id = student.id group by student.id").fetchall())
    con.close()
    assert manual == 0, "a submission wrote manual scores into the gradebook"
    rows = batch["rows"]
    for student in rows:
        assert scores.get(student) == pytest.approx(score(rows, student)), f"{student}: gradebook and summary disagree"


def test_no_submission_reached_the_network(batch):
    assert batch["connections"] == [], "a sandboxed notebook connected to the host's loopback"


def test_feedback_does_not_leak_the_hidden_checks(batch):
    workdir = batch["workdir"]
    secrets = ["check_scaled_dot_product_attention", "_attention_cases", "SDPA_MISTAKES", "TOLERANCES", "generator(seed"]
    for path in (workdir / "feedback").rglob("*.html"):
        text = path.read_text()
        leaked = [s for s in secrets if s in text]
        assert not leaked, f"{path} shows {leaked}"
    text = (workdir / "feedback" / "read-hidden-checks" / CHAPTER / "exercises.html").read_text()
    assert "No such file" in text or "Errno" in text, "the attempt to read the checks should have failed visibly"


@pytest.mark.parametrize("student", [
    "good", "malformed-json", "empty-file", "binary-garbage", "json-not-notebook", "nbformat-3", "symlink",
    "renamed-cell-id", "no-nbgrader-metadata", "deleted-test-cells", "missing-solution-cell", "kernel-death", "segfault",
    "infinite-loop", "loop-catching-interrupts", "memory-bomb", "torch-memory-bomb", "output-flood", "fd-flood", "fork-bomb",
    "sys-exit", "fork-and-fill",
])
def test_bad_input_gets_a_clear_result(batch, student):
    if student not in batch["bad"]:
        pytest.skip(f"{student}: no memory cgroup can be made on this host (root with cgroup v1's memory controller, or v2 memory delegated)")
    rows = batch["rows"]
    _, (expected, fragment) = batch["bad"][student]
    got = score(rows, student)
    assert got == expected, f"{student}: scored {got}, expected {expected}; messages: {messages(rows, student)}"
    fragments = fragment if isinstance(fragment, tuple) else (fragment,)
    if fragment:
        assert any(f in messages(rows, student) for f in fragments), f"{student}: no message mentions {fragment!r}: {messages(rows, student)}"


def test_sandboxed_processes_are_all_gone(batch):
    """No process of a sandbox user that started before the batch ended is still there. (Processes started
    later belong to other grading runs on the machine; a bounded wait lets a neighbour's finish.)"""
    def leftover():
        since_end = time.time() - batch["finished"]
        rows = subprocess.run(["ps", "-eo", "uid=,pid=,etimes=,args="], capture_output=True, text=True).stdout.splitlines()
        return [line for line in rows if int(line.split()[0]) >= sandbox.SANDBOX_UID_BASE and int(line.split()[2]) >= since_end]

    deadline = time.monotonic() + 60  # a leak stays for good; a loaded machine may take seconds to tear down
    while leftover() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not leftover(), f"processes of sandbox users survive the batch: {leftover()}"


def _fill_in_children(group, children, mib):
    """Start `children` processes in the group, each writing `mib` MiB; how many of them were stopped."""
    code = (f"import os, time\npids = []\nfor _ in range({children}):\n    pid = os.fork()\n    if pid == 0:\n"
            f"        block = b'x' * ({mib} * 2**20)\n        time.sleep(1)\n        os._exit(0)\n    pids.append(pid)\n"
            "print(sum(os.waitpid(p, 0)[1] != 0 for p in pids))")
    proc = subprocess.run([sys.executable, "-c", code], preexec_fn=group.join, capture_output=True, text=True, timeout=120)
    return int(proc.stdout.strip())


def test_a_memory_group_bounds_the_processes_of_a_notebook_together():
    if sandbox.memory_group_parent() is None:
        pytest.skip("no memory cgroup can be made on this host (root with cgroup v1's memory controller, or v2 memory delegated)")
    small, large = sandbox.MemoryGroup(256 * 2**20), sandbox.MemoryGroup(1024 * 2**20)
    paths = [small.path, large.path]
    try:
        assert _fill_in_children(small, 4, 100) >= 1, "4 x 100 MiB in a 256 MiB group: the kernel must stop some"
        assert small.oom_kills() >= 1
        assert small.was_full(), "the group whose processes were stopped says it was full"
        assert _fill_in_children(large, 4, 100) == 0, "4 x 100 MiB in a 1 GiB group: nothing to stop"
        assert large.oom_kills() == 0
        assert not large.was_full(), "a group never full says so"
    finally:
        small.close()
        large.close()
    assert not any(p.exists() for p in paths), "the groups are removed after the run"


def test_a_memory_group_left_by_a_killed_grader_is_removed_by_the_next_one():
    parent = sandbox.memory_group_parent()
    if parent is None:
        pytest.skip("no memory cgroup can be made on this host (root with cgroup v1's memory controller, or v2 memory delegated)")
    dead = 4_000_000 + next(pid for pid in range(190_000) if not os.path.exists(f"/proc/{4_000_000 + pid}"))
    orphan, ours = parent[1] / f"course-sandbox-{dead}-{dead}-0", parent[1] / f"course-sandbox-{os.getpid()}-1-999999"
    orphan.mkdir()
    ours.mkdir()  # a group of a grading process that still runs (this one) stays
    try:
        group = sandbox.MemoryGroup(256 * 2**20)
        group.close()
        assert not orphan.exists(), "the orphan of a process that is gone is removed"
        assert ours.exists(), "a live process's group is left alone"
    finally:
        for path in (orphan, ours):
            if path.exists():
                path.rmdir()


def _grade_demo(workdir, workers, seed="5"):
    return run_python("-m", "autograder", "grade", str(demo.DEMO_DIR), "--workdir", str(workdir), "--seed", seed,
                      "--device", "cpu", "--workers", str(workers))


def test_parallel_grading_gives_exactly_the_serial_scores(tmp_path):
    runs = {}
    for workers in (1, 2):
        result = _grade_demo(tmp_path / f"w{workers}", workers)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        rows = read_summary(tmp_path / f"w{workers}")
        runs[workers] = {(s, c): (r["score"], r["message"]) for s in rows for c, r in graded_cells(rows, s).items()}
    assert runs[1] == runs[2]
    assert len(runs[1]) == 4 * len(demo.DEMO_STUDENTS)


def sandboxes_running():
    """Pids of the grading sandboxes alive now (zombies have no command line, so they do not count)."""
    return subprocess.run(["pgrep", "-f", "runner.py /job"], capture_output=True, text=True).stdout.split()


def test_kill_9_mid_batch_resumes_without_regrading(tmp_path):
    workdir = tmp_path / "work"
    proc = subprocess.Popen(
        [sys.executable, "-m", "autograder", "grade", str(demo.DEMO_DIR), "--workdir", str(workdir), "--seed", "5", "--device", "cpu", "--workers", "1"],
        cwd=ROOT, env=course_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    results = workdir / "results"
    deadline = time.time() + 300
    while time.time() < deadline and len(list(results.rglob("*.json"))) < 1:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the grader and its workers, at once
    proc.wait()
    done_before = {p: p.stat().st_mtime_ns for p in results.rglob("*.json")}
    assert 1 <= len(done_before) < len(demo.DEMO_STUDENTS), "kill the batch in the middle"
    # A sandbox dies with its parent (bwrap --die-with-parent), but only once the killed worker has been torn
    # down, which on a loaded machine can take seconds (CI once saw three still there after 1 s). A leak stays
    # for good, so wait for them to go, bounded, instead of looking once after a fixed pause.
    leftover, settle = sandboxes_running(), time.time() + 60
    while leftover and time.time() < settle:
        time.sleep(0.5)
        leftover = sandboxes_running()
    assert not leftover, f"sandboxes outlived the killed grader by 60 s: {leftover}"

    again = _grade_demo(workdir, 1)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert f"Resuming: {len(done_before)} notebook(s) already graded" in again.stdout
    assert all(p.stat().st_mtime_ns == t for p, t in done_before.items()), "a finished result was graded again"
    fresh = _grade_demo(tmp_path / "fresh", 2)
    resumed, clean = read_summary(workdir), read_summary(tmp_path / "fresh")
    assert {s: score(resumed, s) for s in resumed} == {s: score(clean, s) for s in clean}
    assert {s: score(resumed, s) for s in resumed} == {"alice": 13.0, "bob": 0.0, "carol": MISSING_SCALE_SCORE, "dave": MISSING_SCALE_SCORE}
    grades = (workdir / "grades.csv").read_text()
    assert all(student in grades for student in demo.DEMO_STUDENTS)
    assert fresh.returncode == 0


def test_without_a_sandbox_the_grader_refuses_or_warns_loudly(tmp_path):
    submissions = tmp_path / "submissions"
    write_submission(submissions, "alice", reference_nb())
    env = course_env(COURSE_SANDBOX="none")
    base = [sys.executable, "-m", "autograder", "grade", str(submissions), "--seed", "1", "--device", "cpu"]
    refused = subprocess.run(base + ["--workdir", str(tmp_path / "a")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert refused.returncode != 0 and "no sandbox available" in refused.stderr + refused.stdout
    assert not (tmp_path / "a" / "results").exists(), "nothing may run before the instructor agrees"
    allowed = subprocess.run(base + ["--workdir", str(tmp_path / "b"), "--allow-unsandboxed"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert allowed.returncode == 0, allowed.stdout[-2000:] + allowed.stderr[-2000:]
    assert allowed.stdout.count("WARNING: grading WITHOUT a sandbox") == 2, "the warning comes before and after the run"
    assert json.loads((tmp_path / "b" / "last_run.json").read_text())["sandbox"] == "none"
    assert score(read_summary(tmp_path / "b"), "alice") == FULL


def test_a_course_under_tmp_stays_visible_in_the_sandbox(tmp_path, monkeypatch):
    """A course cloned under /tmp (as a CI runner may do) has its venv there: the sandbox's own /tmp, a fresh
    tmpfs, must not hide it (it did once: every notebook then died with status 127, python not found)."""
    mode = sandbox.mode()
    assert mode != "none", "this test needs bubblewrap (apt install bubblewrap)"
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / "marker").write_text("the venv is visible\n")
    job = tmp_path / "job"
    job.mkdir()
    monkeypatch.setattr(sandbox, "_python_paths", lambda: [venv])
    argv, _ = sandbox.command(job, mode, sandbox.Limits())
    argv = argv[: argv.index("-I") - 1] + ["/bin/cat", str(venv / "marker")]  # run cat instead of the runner
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0 and result.stdout == "the venv is visible\n", (
        f"a venv under /tmp is hidden in the sandbox (exit {result.returncode}): {result.stderr[-500:]}")


def test_a_sandbox_that_cannot_run_python_is_found_before_anything_is_graded(monkeypatch):
    """Once a venv reached through a symbolic link was invisible in the sandbox: every notebook exited 127 and got 0
    in a run that looked finished. The pre-flight check must pass here, and fail, naming why, when the venv is hidden."""
    mode = sandbox.mode()
    assert mode != "none", "this test needs bubblewrap (apt install bubblewrap)"
    assert sandbox.python_check(mode, sandbox.Limits()) is None
    monkeypatch.setattr(sandbox, "_python_paths", lambda: [])  # the venv not bound into the sandbox
    why = sandbox.python_check(mode, sandbox.Limits())
    assert why and "python" in why.lower(), why


# --- Module exercises (chapter 04): cheats on the weights the grader gives ---------------------------

MODULE_CHAPTER = "04-multi-head"
MODULE_FULL, MHA_POINTS, FIX_POINTS = 18.0, 6.0, 5.0


def module_cheat_corpus():
    """{student: (notebook, exact score)}: a correct chapter-04 notebook whose modules cheat on their weights."""
    ref = lambda: demo.filled_submission(MODULE_CHAPTER)  # noqa: E731
    return {
        "honest": (ref(), MODULE_FULL),
        # Keeps its own weights: every layer's loading replaced by a no-op, in a subclass that replaces the
        # graded class (and a load_state_dict that does nothing, which the grader does not call anyway).
        "patch-load-state-dict": (add_cell(ref(), (
            "_Honest = MultiHeadAttention\n"
            "class MultiHeadAttention(_Honest):\n"
            "    def __init__(self, *args, **kwargs):\n"
            "        super().__init__(*args, **kwargs)\n"
            "        for layer in self.modules():\n"
            "            layer._load_from_state_dict = lambda *a, **k: None\n"
            "    def load_state_dict(self, *args, **kwargs):\n        return None\n"), after="MultiHeadAttention"),
            MODULE_FULL - MHA_POINTS),
        # nn.Module.load_state_dict itself replaced for the whole run: both module exercises lose their points.
        "patch-nn-module-load": (add_cell(ref(), "import torch\ntorch.nn.Module.load_state_dict = lambda self, *a, **k: None", after="imports"),
                                 MODULE_FULL - MHA_POINTS - FIX_POINTS),
        # Ignores the weights it was given: draws its own at every forward.
        "reinitialise-in-forward": (add_cell(ref(), (
            "_Honest = MultiHeadAttention\n"
            "class MultiHeadAttention(_Honest):\n"
            "    def forward(self, *args, **kwargs):\n"
            "        with torch.no_grad():\n"
            "            for p in self.parameters():\n                p.normal_()\n"
            "        return super().forward(*args, **kwargs)\n"), after="MultiHeadAttention"),
            MODULE_FULL - MHA_POINTS),
        # Loads weights of its own from a file (none is there when grading: no files besides the notebook).
        "weights-from-a-file": (add_cell(ref(), (
            "_Honest = MultiHeadAttention\n"
            "class MultiHeadAttention(_Honest):\n"
            "    def __init__(self, *args, **kwargs):\n"
            "        super().__init__(*args, **kwargs)\n"
            "        self.load_state_dict(torch.load('my_weights.pt'))\n"), after="MultiHeadAttention"),
            MODULE_FULL - MHA_POINTS),
    }


@pytest.fixture(scope="module")
def module_batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("module-submissions")
    workdir = tmp_path_factory.mktemp("module-grading")
    corpus = module_cheat_corpus()
    for student, (nb, _) in corpus.items():
        path = root / student / MODULE_CHAPTER / "exercises.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)
    result = run_python("-m", "autograder", "grade", str(root), "--workdir", str(workdir), "--device", "cpu", "--seed", "5", timeout=900)
    return dict(rows=read_all_chapters(workdir, MODULE_CHAPTER), result=result, corpus=corpus)


@pytest.mark.parametrize("student", list(module_cheat_corpus()))
def test_module_cheat_earns_no_unearned_points(module_batch, student):
    rows, (_, allowed) = module_batch["rows"], module_batch["corpus"][student]
    assert student in rows, f"{student} missing from summary.csv:\n{module_batch['result'].stdout[-2000:]}"
    got = score(rows, student)
    assert got == allowed, f"{student}: scored {got}, expected exactly {allowed}; messages: {messages(rows, student)}"


def test_module_cheats_are_told_why(module_batch):
    rows = module_batch["rows"]
    assert "not the weights it was given" in rows["patch-load-state-dict"]["MultiHeadAttention_hidden"]["message"]
    assert "my_weights.pt" in rows["weights-from-a-file"]["MultiHeadAttention_hidden"]["message"]


class _FakeGroup:
    """Stands in for a MemoryGroup in the watchdog's test: how full it was and how many it stopped."""
    limit = 2 * 2**30

    def __init__(self, was_full, oom_kills):
        self._full, self._kills = was_full, oom_kills

    def was_full(self):
        return self._full

    def oom_kills(self):
        return self._kills


@pytest.mark.parametrize("was_full, oom_kills, says_memory", [(False, 0, False), (True, 0, True), (True, 2, True)])
def test_a_cell_that_times_out_at_its_memory_limit_is_told_so(was_full, oom_kills, says_memory):
    """A cell whose processes press against the memory group's limit crawls while the kernel reclaims memory and
    may run past the cell limit before anything is stopped: the learner is told both, not only the time."""
    records = queue.Queue()
    records.put(("line", json.dumps({"event": "start", "cell": 3}).encode()))  # then silence: the cell hangs
    limits = sandbox.Limits(cell_seconds=0.2, notebook_seconds=30)
    outcome = sandbox.watch(records, limits, _FakeGroup(was_full, oom_kills), time.perf_counter(), exit_code=lambda: -9)
    assert outcome.status == "timeout" and outcome.cell == 3, outcome
    assert "a cell ran past the time limit (0.2 s)" in outcome.detail, outcome.detail
    assert ("went over their memory limit (2 GiB)" in outcome.detail) == says_memory, outcome.detail
    assert ("stopped 2 of them" in outcome.detail) == bool(oom_kills), outcome.detail


# --- torch's own implementations of a forbidden built-in, through the real CLI (issue 31) ----------------------
# Each route puts torch's Python implementation of softmax behind a helper in a cell of its own (which the static
# reading of the exercise does not read), so only the sandbox's guard stands between it and the points. Each earned
# stable_softmax's points on the guard that only switched kernels off.

EVASION_HELPER = "import operator, types, marshal, importlib.util, torch\n_get = operator.attrgetter\n_p = '_'\n"
EVASION_ROUTES = {
    "refs-softmax-attrgetter": "_helper = _get(_p + 'refs.soft' + 'max')(torch)\n",
    "decomposition-table": "_table = _get(_p + 'decomp.decomposition_table')(torch)\n_op = _get('ops.aten.' + _p + 'softmax.default')(torch)\n"
                           "def _helper(x, dim):\n    return _table[_op](x, dim, False)\n",
    "categorical-logits": "def _helper(x, dim):\n    d = torch.distributions.Categorical(logits=x.movedim(dim, -1))\n"
                          "    return d.logits.exp().movedim(-1, dim)\n",
    "revived-from-pyc": "_m = _get(_p + 'refs')(torch)\n_code = marshal.loads(open(importlib.util.cache_from_source(_m.__file__), 'rb').read()[16:])\n"
                        "_code = next(c for c in _code.co_consts if getattr(c, 'co_name', None) == 'soft' + 'max')\n"
                        "_f = types.FunctionType(_code, vars(_m), 'mine')\n"
                        "def _helper(x, dim):\n    return _f(x, dim, dtype=None)\n",
}


def evasion_corpus():
    honest = reference_nb()
    corpus = {"evasion-honest": honest}
    for name, helper in EVASION_ROUTES.items():
        nb = with_cell(reference_nb(), "stable_softmax", lambda s: "def stable_softmax(x, dim=-1):\n    return _helper(x, dim)\n")
        corpus[f"evasion-{name}"] = add_cell(nb, EVASION_HELPER + helper, after="imports")
    return corpus


@pytest.fixture(scope="module")
def evasion_batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("evasion-submissions")
    workdir = tmp_path_factory.mktemp("evasion-grading")
    for student, nb in evasion_corpus().items():
        path = root / student / CHAPTER / "exercises.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)
    result = run_python("-m", "autograder", "grade", str(root), "--workdir", str(workdir), "--device", "cpu", "--seed", "5", timeout=900)
    return dict(rows=read_summary(workdir), result=result)


@pytest.mark.parametrize("route", list(EVASION_ROUTES))
def test_torchs_own_softmax_earns_nothing_through_the_cli(evasion_batch, route):
    rows, student = evasion_batch["rows"], f"evasion-{route}"
    assert student in rows and "evasion-honest" in rows, f"missing from summary.csv:\n{evasion_batch['result'].stdout[-2000:]}"
    honest = rows["evasion-honest"]
    assert score(rows, "evasion-honest") == FULL, messages(rows, "evasion-honest")
    lost = {c for c in rows[student] if c and float(rows[student][c]["score"]) < float(honest[c]["score"])}
    assert lost and all(c.startswith("stable_softmax") for c in lost), f"{route}: lost {lost}; messages: {messages(rows, student)}"
    assert score(rows, student) == FULL - 3.0, f"{route}: scored {score(rows, student)}; messages: {messages(rows, student)}"

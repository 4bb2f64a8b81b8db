"""Run the learner's code in a sandbox: bubblewrap namespaces, another user, rlimits, and a watchdog.

What the sandboxed process gets (see guides/security.md):
- a filesystem with /usr, the Python installation and the course venv read-only, a size-limited tmpfs as
  /tmp, and the job folder (the submission's code and the grader's inputs) read-only as /job; nothing else
  of the host: not the gradebook, not the instructor sources, not `solutions/`, not the hidden checks;
- no network (a new, empty network namespace), its own PID, IPC and UTS namespaces, a new session;
- when the grader runs as root: an unprivileged uid of its own per worker, so a process limit holds;
- rlimits: address space (memory), processes (fork bombs), file size, CPU time, no core dumps;
- a memory cgroup of its own where the host allows one (cgroup v1's memory controller, or v2 with memory
  delegated to the grader's cgroup): all its processes together stay under one memory limit, so a notebook
  that forks and fills memory in every process is stopped by the kernel inside its group;
- a watchdog in the grading process: a per-cell and a per-notebook wall-clock limit, and a cap on what
  the process may report; past any of them the whole sandbox (its PID namespace) is killed.

Without bubblewrap the grader refuses to run learner code unless told `--allow-unsandboxed`, and then
says so loudly in its output, the summary and last_run.json.
"""

import contextlib
import itertools
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

SANDBOX_UID_BASE = 200_000  # + the worker thread's id: a uid of its own per worker, with no files and no login


def sandbox_uid() -> int:
    """The unprivileged uid this worker's sandboxes run as. One per worker, so that the process limit
    (RLIMIT_NPROC counts per user) of one submission's fork bomb cannot starve another's. The kernel's id of
    the calling thread: the worker's pid in a single-threaded worker, and distinct for each thread of a
    Dask worker started with several threads (thread ids and pids are unique together on a host)."""
    return SANDBOX_UID_BASE + threading.get_native_id()


@dataclass
class Limits:
    cell_seconds: float = 30.0
    notebook_seconds: float = 120.0
    memory_bytes: int = 4 * 2**30  # address space; CUDA needs far more, so it is lifted for cuda grading
    group_memory_bytes: int = 4 * 2**30  # all the notebook's processes together (memory cgroup, where available)
    report_bytes: int = 32 * 2**20  # what the runner may send back
    processes: int = 256
    file_bytes: int = 64 * 2**20
    tmp_bytes: int = 64 * 2**20
    gpu: bool = False  # grading on CUDA: the GPU's device nodes and the driver's environment reach the sandbox


def nvidia_driver() -> bool:
    """Is an NVIDIA driver loaded? Without one there is no CUDA, known without importing torch (about 2 s): the
    CLI's early start and grade()'s default device both ask this first."""
    return Path("/proc/driver/nvidia").exists()


def run_limits(device: str, cell_seconds: float, notebook_seconds=None, memory_mb=None, notebook_memory_mb=None) -> Limits:
    """A grading run's limits from its options (grade's --cell-timeout, --notebook-timeout, --memory-mb,
    --notebook-memory-mb) and device: what grade.py gives every notebook, and what the CLI starts a template with
    before its imports (the template's key must be the same, or it is started again)."""
    limits = Limits(cell_seconds=cell_seconds)
    if notebook_seconds:
        limits.notebook_seconds = notebook_seconds
    if memory_mb:
        limits.memory_bytes = memory_mb * 2**20
    if device.startswith("cuda"):
        limits.gpu = True
        limits.memory_bytes = 0  # CUDA reserves a huge address space; rely on the GPU's own memory limit
        limits.group_memory_bytes = 16 * 2**30  # the CUDA context's host memory, beside the notebook's own
    if notebook_memory_mb:
        limits.group_memory_bytes = notebook_memory_mb * 2**20
    return limits


@dataclass
class Outcome:
    records: list
    status: str  # "finished", "timeout", "died", "report_limit"
    cell: int | None = None  # the cell that was running when the run stopped early
    detail: str = ""
    seconds: float = 0.0
    oom_kills: int = 0  # processes the kernel stopped because the notebook's memory group was full
    start: str = ""  # "warm" (forked from the worker's template) or "cold: <why>"


# --- A memory cgroup per sandbox ---------------------------------------------------------------------

CGROUP_ROOT = Path("/sys/fs/cgroup")
_group_numbers = itertools.count()


def _own_cgroup(version: int) -> str | None:
    """This process's cgroup path in the v2 hierarchy (version 2) or in v1's memory hierarchy (version 1)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        number, controllers, path = line.split(":", 2)
        if (version == 2 and number == "0" and controllers == "") or (version == 1 and "memory" in controllers.split(",")):
            return path
    return None


def memory_group_parent() -> tuple[int, Path] | None:
    """(cgroup version, folder) under which a sandbox's memory group can be made, or None.

    v1: the memory controller's hierarchy, below this process's own memory cgroup (so the groups are counted
    in it). v2: this process's own cgroup, if memory is delegated to its children (cgroup.subtree_control
    lists it; e.g. a systemd unit with Delegate=yes whose grader runs in a leaf of its own). Either way the
    folder must be writable (root, or a delegated subtree). COURSE_MEMORY_GROUPS=off turns groups off."""
    if os.environ.get("COURSE_MEMORY_GROUPS") == "off":
        return None
    v1 = CGROUP_ROOT / "memory"
    own = _own_cgroup(1)
    if own is not None and (v1 / "memory.limit_in_bytes").exists():
        folder = v1 / own.lstrip("/")
        if (folder / "memory.limit_in_bytes").exists() and os.access(folder, os.W_OK):
            return 1, folder
    for root in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
        own = _own_cgroup(2)
        folder = root / (own or "").lstrip("/")
        try:
            delegated = "memory" in (folder / "cgroup.subtree_control").read_text().split()
        except OSError:
            continue
        if own is not None and delegated and os.access(folder, os.W_OK):
            return 2, folder
    return None


class MemoryGroup:
    """A memory cgroup for one run of the sandbox: the sandbox and every process it starts join it, and
    their memory together stays under `limit` bytes (no swap around it); past it, the kernel's OOM killer
    stops one of them, inside the group. Made where `memory_group_parent()` finds a place; elsewhere
    `path` is None and only the per-process address-space limit holds."""

    def __init__(self, limit: int):
        self.limit, self.version, self.path = limit, None, None
        parent = memory_group_parent() if limit else None
        if parent is None:
            return
        version, folder = parent
        _remove_orphans(folder)
        path = folder / f"course-sandbox-{os.getpid()}-{threading.get_native_id()}-{next(_group_numbers)}"
        try:
            path.mkdir()
        except OSError:
            return
        self.version, self.path = version, path
        try:
            if version == 1:
                (path / "memory.limit_in_bytes").write_text(str(limit))
                if (path / "memory.memsw.limit_in_bytes").exists():
                    (path / "memory.memsw.limit_in_bytes").write_text(str(limit))
                else:  # no swap accounting (swapaccount=0): the group may still not swap (v1: swappiness 0 means none)
                    with contextlib.suppress(OSError):  # best effort: the limit above is what matters
                        (path / "memory.swappiness").write_text("0")
            else:
                (path / "memory.max").write_text(str(limit))
                if (path / "memory.swap.max").exists():
                    (path / "memory.swap.max").write_text("0")
        except OSError:
            self.close()

    def join(self) -> None:
        """Move the calling process into the group (called in the sandbox's process before it starts)."""
        if self.path is not None:
            fd = os.open(self.path / "cgroup.procs", os.O_WRONLY)
            try:
                os.write(fd, str(os.getpid()).encode())
            finally:
                os.close(fd)

    def add(self, pid: int) -> None:
        """Move another process into the group (the warm template's child, before it may start)."""
        if self.path is not None:
            (self.path / "cgroup.procs").write_text(str(pid))

    def oom_kills(self) -> int:
        """How many of the group's processes the kernel stopped for lack of memory."""
        if self.path is None:
            return 0
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            for line in (self.path / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def was_full(self) -> bool:
        """Whether the group's processes together reached its limit (then the kernel reclaims memory, slowly, and
        at last stops one of them); False without a group. v1: the peak usage reached the limit (this kernel
        family may leave failcnt at 0); v2: the "max" or "oom_kill" events."""
        if self.path is None:
            return False
        try:
            if self.version == 1:
                peak = max(int((self.path / name).read_text()) for name in ("memory.max_usage_in_bytes", "memory.memsw.max_usage_in_bytes")
                           if (self.path / name).exists())
                return peak >= self.limit or self.oom_kills() > 0
            events = dict(line.split(" ", 1) for line in (self.path / "memory.events").read_text().splitlines())
            return int(events.get("max", 0)) > 0 or int(events.get("oom_kill", 0)) > 0
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        """Stop whatever still runs in the group and remove it (bounded: about 10 s at most)."""
        if self.path is None:
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                pids = [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
            except OSError:
                pids = []
            for pid in pids:
                try:
                    os.kill(pid, 9)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                self.path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.05)
        self.path = None


def _remove_orphans(folder: Path) -> None:
    """Remove the empty groups left by grading processes that were killed before they could (their process,
    named in the group's name, is gone)."""
    for path in folder.glob("course-sandbox-*-*-*"):
        pid = path.name.split("-")[2]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            try:
                path.rmdir()
            except OSError:
                pass  # processes still in it, or removed meanwhile by another worker


def describe_memory(limits: "Limits") -> str:
    """The memory limits a run will have, in words (for the grading run's first lines)."""
    per_process = f"{limits.memory_bytes / 2**30:g} GiB of address space per process" if limits.memory_bytes else "no address-space limit"
    parent = memory_group_parent() if limits.group_memory_bytes else None
    if parent is None:
        return f"{per_process}; no memory cgroup on this host, so not bounded for the notebook's processes together"
    return f"{limits.group_memory_bytes / 2**30:g} GiB for each notebook's processes together (cgroup v{parent[0]}), {per_process}"


PLAIN = "plain"  # `python -m autograder check`: the learner's own code on the learner's own machine, no sandbox


def run_plain(job_dir: Path, limits: Limits) -> Outcome:
    """Run the runner on a job folder in a plain subprocess of this Python, under the same watchdog and report reader
    as a sandboxed run, with nothing Linux-only (no bubblewrap, rlimits, cgroups or process groups): the path of
    `python -m autograder check`, on the learner's own code, on macOS, Windows or Linux."""
    env = dict(os.environ, MPLBACKEND="Agg", OMP_NUM_THREADS="1")
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-I", str(job_dir / "runner.py"), str(job_dir)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    lines = read_reports(proc.stdout, limits.report_bytes)

    def exit_code():
        if proc.poll() is None:
            proc.kill()
        return proc.wait()

    return watch(lines, limits, MemoryGroup(0), start, exit_code)


def mode() -> str:
    """'bwrap-root' (namespaces + an unprivileged uid per worker), 'bwrap' (unprivileged namespaces), or 'none'.

    COURSE_SANDBOX=none pretends bubblewrap is missing (to see and test what happens without it)."""
    if os.environ.get("COURSE_SANDBOX") == "none" or shutil.which("bwrap") is None:
        return "none"
    probe = ["bwrap", "--unshare-net", "--ro-bind", "/", "/", "true"]
    if subprocess.run(probe, capture_output=True).returncode != 0:
        return "none"
    return "bwrap-root" if os.geteuid() == 0 and shutil.which("setpriv") else "bwrap"


def _ancestors(path: Path) -> list[str]:
    """bwrap creates missing parent folders 0700 (root's): make them 0755 so the sandbox's user can pass."""
    args = []
    for parent in reversed(path.parents):
        if str(parent) != "/":
            args += ["--perms", "0755", "--dir", str(parent)]
    return args


def _python_paths() -> list[Path]:
    """The folders the venv's Python needs: the venv and the installation its interpreter comes from."""
    paths = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), Path(os.path.realpath(sys.executable)).parent.parent}
    return sorted(p for p in paths if not str(p).startswith("/usr"))


# What CUDA needs inside the sandbox: the NVIDIA device nodes (a fresh /dev has none: without them torch sees no
# GPU, and every call on cuda fails) and the driver's variables (where its libraries are, which GPUs are visible).
GPU_ENVIRONMENT = ("LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES",
                   "CUDA_DEVICE_ORDER")


def gpu_device_nodes() -> list[str]:
    """The NVIDIA device nodes of this host (/dev/nvidiactl, /dev/nvidia0, /dev/nvidia-uvm, ...; /dev/nvidia-caps)."""
    return sorted(str(p) for p in Path("/dev").glob("nvidia*"))


def gpu_check(sandbox_mode: str, limits: Limits, device: str = "cuda") -> str | None:
    """Does CUDA work in this sandbox, under the runner's guard? None if tensor operations ran on `device` there
    after the guard was armed (as in a real job), else what went wrong. Run once before a cuda grading run: a
    sandbox that cannot use the GPU would fail every learner's every call. (device="cpu" runs the same steps
    without CUDA: the tests show the check itself passes where it should.)"""
    import tempfile

    from autograder.checks import builtins, runner

    switch_off = sorted(builtins.switched_off(builtins.forbidden("softmax")))
    with tempfile.TemporaryDirectory(prefix="course-gpu-check-") as tmp:
        job_dir = Path(tmp)
        job_dir.chmod(0o755)
        shutil.copy(runner.__file__, job_dir / "course_runner.py")
        (job_dir / "runner.py").write_text(
            "import sys\n"
            "sys.path.insert(0, '/job' if len(sys.argv) < 2 else sys.argv[1])\n"
            "import torch\n"
            "import course_runner\n"
            f"device = {device!r}\n"
            "if device.startswith('cuda'):\n"
            "    assert torch.cuda.is_available(), f'torch sees no CUDA device (torch {torch.__version__})'\n"
            "    course_runner.start_cuda(device)\n"
            f"course_runner.arm_guard({switch_off!r})\n"
            "x = torch.randn(4, 4, device=device, dtype=torch.float64)\n"
            "y = (x @ x.T).exp() / (x @ x.T).exp().sum(-1, keepdim=True)\n"
            "print('gpu ok', float(y.sum().round()))\n"
        )
        for name in ("runner.py", "course_runner.py"):
            (job_dir / name).chmod(0o644)
        argv, env = command(job_dir, sandbox_mode, limits)
        try:
            done = subprocess.run(argv, env=env or None, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return "CUDA did not start in the sandbox within 120 s"
    if done.returncode == 0 and "gpu ok 4.0" in done.stdout:
        return None
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit status {done.returncode}"


def python_check(sandbox_mode: str, limits: Limits) -> str | None:
    """Can the sandbox run the course's Python and see its packages? None if so, else what went wrong. Run once
    before a CPU grading run (about a tenth of a second): a sandbox that cannot start Python (a venv it cannot see,
    a missing setpriv) would give every notebook 0 with "exited with status 127" and a run that looks finished."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="course-sandbox-check-") as tmp:
        job_dir = Path(tmp)
        job_dir.chmod(0o755)
        (job_dir / "runner.py").write_text(
            "import importlib.util\n"
            "missing = [m for m in ('torch', 'numpy') if importlib.util.find_spec(m) is None]\n"
            "print('sandbox ok' if not missing else f'cannot import {missing}')\n")
        (job_dir / "runner.py").chmod(0o644)
        argv, env = command(job_dir, sandbox_mode, limits)
        try:
            done = subprocess.run(argv, env=env or None, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return "Python did not start in the sandbox within 120 s"
    if done.returncode == 0 and done.stdout.strip() == "sandbox ok":
        return None
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit status {done.returncode}"


def command(job_dir: Path, sandbox_mode: str, limits: Limits, mount_at: str = "/job", program=None,
            extra_ro_binds=()) -> list[str]:
    """The command line of a sandboxed run: `job_dir` read-only at `mount_at`, and `program` (default: the job's
    runner on the job folder) run by the venv's Python. The warm template (autograder.grading.warm) uses the same
    sandbox with its own folder at /template and the job folders at /jobs (`extra_ro_binds`)."""
    # The venv's real path: the binds below are resolved, so a venv reached through a symbolic link (a shared
    # venv linked into a checkout) would otherwise be missing inside the sandbox (every notebook: status 127).
    python = str(Path(sys.prefix).resolve() / "bin" / "python")
    env = {"HOME": "/tmp", "PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg", "MPLCONFIGDIR": "/tmp", "OMP_NUM_THREADS": "1", "LANG": "C.UTF-8"}
    # The learner's code uses the same CPU kernels as the reference it is compared with (outside the sandbox).
    if os.environ.get("ATEN_CPU_CAPABILITY"):
        env["ATEN_CPU_CAPABILITY"] = os.environ["ATEN_CPU_CAPABILITY"]
    if limits.gpu:
        env.update({k: os.environ[k] for k in GPU_ENVIRONMENT if k in os.environ})
    if sandbox_mode == "none":
        return [python, "-I", str(job_dir / "runner.py"), str(job_dir)], env
    program = program or [f"{mount_at}/runner.py", mount_at]
    args = ["bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    if sandbox_mode == "bwrap":
        args += ["--unshare-user"]
    args += ["--die-with-parent", "--new-session", "--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    # /tmp first: the binds below may lie under /tmp (a course cloned there), and a tmpfs mounted after them
    # would hide them.
    args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp"]
    for node in gpu_device_nodes() if limits.gpu else ():
        args += ["--dev-bind", node, node]
    args += ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib64", "sbin"):
        target = Path("/" + name)
        if target.is_symlink():
            args += ["--symlink", os.readlink(target), str(target)]
        elif target.is_dir():
            args += ["--ro-bind", str(target), str(target)]
    for path in _python_paths():
        args += _ancestors(path) + ["--ro-bind", str(path), str(path)]
    args += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    args += ["--ro-bind", str(job_dir), mount_at]
    for source, target in extra_ro_binds:
        args += ["--ro-bind", str(source), target]
    # The sandbox's root folder read-only: run unprivileged, bubblewrap makes it a tmpfs of the grader's user, which
    # every process of a warm template's children would otherwise share (and could leave files in).
    args += ["--remount-ro", "/", "--chdir", "/tmp"]
    if sandbox_mode == "bwrap-root":
        uid = sandbox_uid()
        args += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs",
                 "--inh-caps=-all", "--bounding-set=-all"]
    args += [python, "-I", *program]
    return args, {}


def set_limits(limits: Limits, sandbox_mode: str, group: MemoryGroup | None = None, cpu: bool = True):
    """The rlimits of a sandbox's first process (and the memory group it joins), applied before bubblewrap starts.
    cpu=False for the warm template, which lives for many notebooks: each of its children sets its own CPU limit."""
    def apply():
        import resource  # Unix only: imported where used, so that `check` (sandbox mode "plain") runs on Windows too

        if group is not None:
            group.join()
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if limits.memory_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
        if cpu:
            seconds = int(limits.notebook_seconds) + 10
            resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds))
        if sandbox_mode == "bwrap-root":  # counted for the sandbox's own uid
            resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
    return apply


def run(job_dir: Path, sandbox_mode: str, limits: Limits) -> Outcome:
    """Run the runner on a job folder under the watchdog, cold: a sandbox of its own for this job (bubblewrap,
    Python and the runner's imports, then the cells); every record it sent comes back, whatever happens. Grading
    goes through autograder.grading.warm.run_job, which forks the job from a warm template where it can."""
    argv, env = command(job_dir, sandbox_mode, limits)
    group = MemoryGroup(limits.group_memory_bytes)
    try:
        return _run(argv, env, sandbox_mode, limits, group)
    finally:
        group.close()


def _run(argv, env, sandbox_mode, limits, group) -> Outcome:
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env=env or None, start_new_session=True, preexec_fn=set_limits(limits, sandbox_mode, group),
    )
    lines = read_reports(proc.stdout, limits.report_bytes)

    def exit_code():
        _kill(proc)
        return proc.wait()

    return watch(lines, limits, group, start, exit_code)


# --- The report channel: the one reader of what a sandbox sends (cold and warm) ----------------------------------
# Everything on it may come from the learner's code (it runs in the runner's process and can write to the channel),
# so it is read as an adversary's input: in pieces, counted before anything is kept, one job's channel per reader
# (a pipe that only that job's processes hold), and each line parsed where any failure ends the line, never the
# reader. What it keeps is at most `limit` bytes of one job's report.

READ_CHUNK = 1 << 16
EVENTS = {  # the runner's records: event -> {field: the types it may have}
    "start": {"cell": (int,)},
    "done": {"cell": (int,), "ok": (bool,), "error": (str, type(None)), "stdout": (str,), "stderr": (str,)},
    "probe": {"cell": (int,), "calls": (list,)},
    "guard": {"names": (list,), "exec_blocked": (bool,), "walls": (bool,)},
    "cuda": {"device": (str,), "error": (str,)},
    "end": {},
}


def read_reports(stream, limit: int) -> queue.Queue:
    """Start reading a report channel (a binary stream, or a file descriptor that the reader then owns and closes) in
    a thread of its own. The queue gets
    ("line", bytes) for each line, then ("eof", None) at its end, or ("overflow", None) as soon as more than
    `limit` bytes have come (then reading stops): a line without an end is counted as it comes, so no line, however
    long, is ever held whole beyond the limit."""
    lines: queue.Queue = queue.Queue()
    owned = isinstance(stream, int)  # a descriptor is the reader's own: it closes it when the channel ends
    fd = stream if owned else stream.fileno()

    def reader():
        pending, received = bytearray(), 0
        try:
            while True:
                chunk = os.read(fd, READ_CHUNK)
                if not chunk:
                    break
                received += len(chunk)
                if received > limit:
                    pending.clear()
                    lines.put(("overflow", None))
                    break
                begin = 0
                while True:  # each newline of the chunk ends a line (only the chunk is searched)
                    end = chunk.find(b"\n", begin)
                    if end < 0:
                        pending += chunk[begin:]
                        break
                    pending += chunk[begin:end + 1]
                    lines.put(("line", bytes(pending)))
                    pending.clear()
                    begin = end + 1
        except OSError:
            pass
        finally:
            if owned:
                os.close(fd)
        if received <= limit:
            if pending:
                lines.put(("line", bytes(pending)))
            lines.put(("eof", None))

    threading.Thread(target=reader, daemon=True).start()
    return lines


def parse_record(raw: bytes) -> dict | None:
    """One line of a report channel as a runner's record, or None: a line that is not JSON, whose parsing fails in
    any way (deep nesting, huge numbers, bad bytes), or whose event or fields are not the runner's."""
    try:
        record = json.loads(raw)
    except Exception:  # ValueError, RecursionError, MemoryError, ...: the line is dropped, the reader goes on
        return None
    if not isinstance(record, dict) or record.get("event") not in EVENTS:
        return None
    for field, types in EVENTS[record["event"]].items():
        if field in record and (not isinstance(record[field], types) or (types == (int,) and isinstance(record[field], bool))):
            return None
    if record["event"] in ("start", "done", "probe") and not isinstance(record.get("cell"), int):
        return None
    if record["event"] == "probe" and not all(isinstance(call, dict) for call in record["calls"]):
        return None
    return record


def watch(lines, limits: Limits, group, start: float, exit_code) -> Outcome:
    """The watchdog: read the runner's records (`lines.get(timeout)` gives ("line", raw), ("overflow", None) or
    ("eof", None)) until its end, a time limit, too much output or its death; `exit_code()` ends what is left and
    says how the process ended (None if unknown)."""
    records, running, cell_started = [], None, start
    status, detail = "died", ""
    while True:
        now = time.perf_counter()
        deadline = min(cell_started + limits.cell_seconds if running is not None else float("inf"), start + limits.notebook_seconds)
        try:
            kind, raw = lines.get(timeout=max(0.01, deadline - now))
        except queue.Empty:
            status = "timeout"
            over_notebook = time.perf_counter() >= start + limits.notebook_seconds
            detail = f"the notebook ran past its time limit ({limits.notebook_seconds:g} s)" if over_notebook else f"a cell ran past the time limit ({limits.cell_seconds:g} s)"
            break
        if kind == "overflow":  # the reader counts every byte (read_reports)
            status, detail = "report_limit", f"the code printed or returned more than {limits.report_bytes // 2**20} MiB"
            break
        if kind == "eof":
            break
        record = parse_record(raw)
        if record is None:
            continue  # not a record of the runner's: the learner's code writing to the channel
        records.append(record)
        if record.get("event") == "start":
            running, cell_started = record.get("cell"), time.perf_counter()
        elif record.get("event") == "done":
            running = None
        elif record.get("event") == "end":
            status = "finished"
            break
    code = exit_code()
    oom_kills = group.oom_kills()
    if status == "timeout" and (oom_kills or group.was_full()):  # a group at its limit slows to a crawl first
        detail += (f"; the notebook's processes together went over their memory limit ({group.limit / 2**30:g} GiB)"
                   + (f" and the kernel stopped {oom_kills} of them" if oom_kills else ", which slows them while the kernel reclaims memory"))
    if status == "died":
        detail = _death(code) if code is not None else "the code's process ended before the end"
        if oom_kills:
            detail = (f"the notebook's processes together went over their memory limit ({group.limit / 2**30:g} GiB) "
                      "and the code's process was stopped")
    return Outcome(records, status, running if status != "finished" else None, detail, time.perf_counter() - start, oom_kills)


def _kill(proc):
    try:
        os.killpg(proc.pid, 9)
    except (ProcessLookupError, PermissionError):
        pass


def _death(code: int) -> str:
    if code > 128 and code - 128 in range(1, 65):  # bwrap reports a child killed by signal N as 128 + N
        code = -(code - 128)
    if code < 0:
        import signal

        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        hint = {"SIGKILL": " (out of memory or a limit)", "SIGSEGV": " (a crash)", "SIGXCPU": " (CPU time limit)", "SIGXFSZ": " (file size limit)"}.get(name, "")
        return f"the code's process was killed by {name}{hint}"
    return f"the code's process exited with status {code} before the end (sys.exit, os._exit or a crash)"

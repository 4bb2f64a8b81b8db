"""Run the learner's code in a sandbox: bubblewrap namespaces, another user, rlimits, and a watchdog.

What the sandboxed process gets (see README, "Grading safely"):
- a filesystem with /usr, the Python installation and the course venv read-only, a size-limited tmpfs as
  /tmp, and the job folder (the submission's code and the grader's inputs) read-only as /job; nothing else
  of the host: not the gradebook, not the instructor sources, not `solutions/`, not the hidden checks;
- no network (a new, empty network namespace), its own PID, IPC and UTS namespaces, a new session;
- when the grader runs as root: an unprivileged uid of its own per worker, so a process limit holds;
- rlimits: address space (memory), processes (fork bombs), file size, CPU time, no core dumps;
- a watchdog in the grading process: a per-cell and a per-notebook wall-clock limit, and a cap on what
  the process may report; past any of them the whole sandbox (its PID namespace) is killed.

Without bubblewrap the grader refuses to run learner code unless told `--allow-unsandboxed`, and then
says so loudly in its output, the summary and last_run.json.
"""

import json
import os
import queue
import resource
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
    report_bytes: int = 32 * 2**20  # what the runner may send back
    processes: int = 256
    file_bytes: int = 64 * 2**20
    tmp_bytes: int = 64 * 2**20


@dataclass
class Outcome:
    records: list
    status: str  # "finished", "timeout", "died", "report_limit"
    cell: int | None = None  # the cell that was running when the run stopped early
    detail: str = ""
    seconds: float = 0.0


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


def command(job_dir: Path, sandbox_mode: str, limits: Limits) -> list[str]:
    python = str(Path(sys.prefix) / "bin" / "python")
    env = {"HOME": "/tmp", "PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg", "MPLCONFIGDIR": "/tmp", "OMP_NUM_THREADS": "1", "LANG": "C.UTF-8"}
    # The learner's code uses the same CPU kernels as the reference it is compared with (outside the sandbox).
    if os.environ.get("ATEN_CPU_CAPABILITY"):
        env["ATEN_CPU_CAPABILITY"] = os.environ["ATEN_CPU_CAPABILITY"]
    if sandbox_mode == "none":
        return [python, "-I", str(job_dir / "runner.py"), str(job_dir)], env
    args = ["bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    if sandbox_mode == "bwrap":
        args += ["--unshare-user"]
    args += ["--die-with-parent", "--new-session", "--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    # /tmp first: the binds below may lie under /tmp (a course cloned there), and a tmpfs mounted after them
    # would hide them.
    args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp"]
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
    args += ["--ro-bind", str(job_dir), "/job", "--chdir", "/tmp"]
    if sandbox_mode == "bwrap-root":
        uid = sandbox_uid()
        args += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs",
                 "--inh-caps=-all", "--bounding-set=-all"]
    args += [python, "-I", "/job/runner.py", "/job"]
    return args, {}


def _set_limits(limits: Limits, sandbox_mode: str):
    def apply():
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if limits.memory_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
        cpu = int(limits.notebook_seconds) + 10
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        if sandbox_mode == "bwrap-root":  # counted for the sandbox's own uid
            resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
    return apply


def run(job_dir: Path, sandbox_mode: str, limits: Limits) -> Outcome:
    """Run the runner on a job folder under the watchdog; every record it sent comes back, whatever happens."""
    argv, env = command(job_dir, sandbox_mode, limits)
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env=env or None, start_new_session=True, preexec_fn=_set_limits(limits, sandbox_mode),
    )
    lines: queue.Queue = queue.Queue()

    def reader():
        received = 0
        for raw in proc.stdout:
            received += len(raw)
            if received > limits.report_bytes:
                lines.put(("overflow", None))
                return
            lines.put(("line", raw))
        lines.put(("eof", None))

    threading.Thread(target=reader, daemon=True).start()
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
        if kind == "overflow":
            status, detail = "report_limit", f"the code printed or returned more than {limits.report_bytes // 2**20} MiB"
            break
        if kind == "eof":
            break
        try:
            record = json.loads(raw)
        except ValueError:
            continue  # not ours: a learner writing to the channel
        if not isinstance(record, dict):
            continue
        records.append(record)
        if record.get("event") == "start":
            running, cell_started = record.get("cell"), time.perf_counter()
        elif record.get("event") == "done":
            running = None
        elif record.get("event") == "end":
            status = "finished"
            break
    _kill(proc)
    code = proc.wait()
    if status == "died":
        detail = _death(code)
    return Outcome(records, status, running if status != "finished" else None, detail, time.perf_counter() - start)


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

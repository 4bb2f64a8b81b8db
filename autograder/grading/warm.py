"""Warm start: one sandboxed template per grading worker, forked once per notebook (issue 18).

A cold run (`sandbox.run`) starts bubblewrap, Python and `import torch` for every notebook: 1.5-2.5 s before the
first cell. Here each worker starts that once: a template process in the same sandbox (`template.py`, see there)
that has imported numpy, torch and the runner and then forks one child per notebook into namespaces of its own
(user, mount with a fresh /tmp, PID, network, IPC), with its own memory group (the grader moves the child into it
before the child may start) and rlimits. The child reports exactly what a cold run reports; the watchdog is the
same (`sandbox.watch`). A notebook that times out or floods its report ends the whole template (as a cold run
ends its sandbox); the next notebook starts a new one.

Cold instead, with the reason stated in the run's summary: COURSE_WARM=off, no sandbox, CUDA grading (a template
must not initialise CUDA, and a forked CUDA context is unusable), or a host where a child cannot get namespaces of
its own (said by the template when it starts).
"""

import atexit
import itertools
import json
import os
import queue
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from autograder.grading import sandbox

START_TIMEOUT_S = 120  # bubblewrap, Python and import torch on a loaded machine
FORK_TIMEOUT_S = 30  # from the request to the child's pid
EXIT_TIMEOUT_S = 15  # from the runner's last record to the child's exit
_templates: dict = {}  # native thread id -> Template (one per grading worker thread)
_cold_reasons: dict = {}  # (mode, limits) -> why this host runs cold, said once
# The sandbox's end of the checks (standalone), copied into each template. By path, not imported: importing the
# checks package imports torch, and the CLI starts a template before its own imports (autograder/__main__.py).
RUNNER = Path(__file__).resolve().parent.parent / "checks" / "runner.py"
_starting: dict = {}  # native thread id -> the thread starting that thread's template (start_early)


def cold_reason(sandbox_mode: str, limits) -> str | None:
    """Why a notebook is run cold rather than forked from a template, or None (warm)."""
    if os.environ.get("COURSE_WARM", "").lower() in ("off", "0", "no", "cold"):
        return "COURSE_WARM=off"
    if sandbox_mode == "none":
        return "no sandbox"
    if limits.gpu:
        return "CUDA grading (a template must not initialise CUDA)"
    return _cold_reasons.get(_key(sandbox_mode, limits))


TIME_LIMITS = ("cell_seconds", "notebook_seconds")  # set per job (a chapter may ask for more): not part of a template's key


def _key(sandbox_mode, limits):
    kept = {k: v for k, v in vars(limits).items() if k not in TIME_LIMITS}
    return (sandbox_mode, json.dumps(kept, sort_keys=True, default=str))


def _cpu_seconds(limits) -> int:
    """The CPU time a notebook's process may use: its wall-clock budget and a margin (the watchdog stops it first)."""
    return int(limits.notebook_seconds) + 10


class TemplateGone(Exception):
    """The template is not there to fork from (never started, or ended): the notebook is run cold."""


class Template:
    """The template process of this worker thread and the folders it sees: /template (its code) and /jobs (the job
    folders, one per notebook, read-only). The grader talks to it over a socket that only the template holds; each
    job's records come on a pipe of that job's own (see template.py)."""

    def __init__(self, sandbox_mode: str, limits):
        self.mode, self.limits, self.key = sandbox_mode, limits, _key(sandbox_mode, limits)
        _remove_orphans()
        self.folder = Path(tempfile.mkdtemp(prefix=f"course-template-{os.getpid()}-"))
        self.spool = Path(tempfile.mkdtemp(prefix=f"course-jobs-{os.getpid()}-"))
        self.numbers = itertools.count()
        self.proc = None
        self.control = None
        self.pidns = None
        shutil.copy(Path(__file__).with_name("template.py"), self.folder / "template.py")
        shutil.copy(RUNNER, self.folder / "course_runner.py")
        for path in (self.folder, self.spool, *self.folder.iterdir()):
            path.chmod(0o755 if path.is_dir() else 0o644)

    def start(self) -> str | None:
        """Start the template; None when it is ready to fork, else why it cannot be used on this host."""
        self.launch()
        return self.ready()

    def launch(self):
        """Start the template's process, from the thread that grades with it: bubblewrap ends the sandbox with the
        thread that started it (--die-with-parent), so this must not run in a thread that ends before the grading."""
        child_limits = {"memory_bytes": self.limits.memory_bytes, "file_bytes": self.limits.file_bytes,
                        "cpu_seconds": _cpu_seconds(self.limits), "tmp_bytes": self.limits.tmp_bytes}
        argv, env = sandbox.command(self.folder, self.mode, self.limits, mount_at="/template",
                                    program=["/template/template.py", json.dumps(child_limits)],
                                    extra_ro_binds=[(self.spool, "/jobs")])
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(argv, stdin=theirs, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         env=env or None, start_new_session=True,
                                         preexec_fn=sandbox.set_limits(self.limits, self.mode, cpu=False))
        finally:
            theirs.close()

    def ready(self) -> str | None:
        """Wait for the launched template: None when it is ready to fork, else why it cannot be used on this host."""
        ready = self._message(time.monotonic() + START_TIMEOUT_S)
        if ready is None or ready.get("event") != "ready":
            self.close()
            return "the template did not start"
        if not ready.get("warm"):
            self.close()
            return ready.get("why") or "the template cannot fork warm here"
        self.pidns = _pid_namespace_of_child(self.proc.pid)
        return None

    def _message(self, deadline: float) -> dict | None:
        """The template's next message, or None when it has gone or the deadline passed."""
        try:
            self.control.settimeout(max(0.01, deadline - time.monotonic()))
            data = self.control.recv(4096)
            message = json.loads(data) if data else None
        except (OSError, ValueError):
            return None
        return message if isinstance(message, dict) else None

    def _expect(self, event: str, job: str, seconds: float) -> dict:
        message = self._message(time.monotonic() + seconds)
        if message is None or message.get("event") != event or message.get("job") != job:
            raise TemplateGone(f"the template did not say '{event}' for the job")
        return message

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def run(self, job_dir: Path, limits=None) -> sandbox.Outcome:
        """Run one job folder in a child of the template, under the same watchdog as a cold run. limits: this job's
        (the template's own but for the time limits, which a chapter may raise: see notebook.chapter_limits)."""
        limits = limits or self.limits
        if not self.alive():
            raise TemplateGone("the template has ended")
        name = str(next(self.numbers))
        target = self.spool / name
        shutil.copytree(job_dir, target)  # with the job folder's modes (readable, not writable, by the sandbox's user)
        group = sandbox.MemoryGroup(self.limits.group_memory_bytes)
        try:
            return self._run(name, group, limits)
        finally:
            group.close()
            shutil.rmtree(target, ignore_errors=True)

    def _run(self, name: str, group, limits) -> sandbox.Outcome:
        start = time.perf_counter()
        report_read, report_write = os.pipe()  # this job's report channel: only this job's processes hold its write end
        lines = sandbox.read_reports(report_read, self.limits.report_bytes)  # the reader closes report_read at the end
        try:
            try:
                request = {"run": name, "cpu_seconds": _cpu_seconds(limits)}
                socket.send_fds(self.control, [json.dumps(request).encode()], [report_write])
            finally:
                os.close(report_write)
            forked = self._expect("forked", name, FORK_TIMEOUT_S)
            if group.path is not None:
                host_pid = _host_pid(forked.get("pid"), self.pidns)
                if host_pid is None:
                    raise TemplateGone("the child's process was not found to put it in its memory group")
                group.add(host_pid)
            self.control.sendall(json.dumps({"go": name}).encode())
        except OSError as exc:
            self.close()
            raise TemplateGone(f"the template stopped answering ({exc})") from None
        except TemplateGone:
            self.close()
            raise
        watched, ended = _Watched(lines), {}

        def exit_status():
            """The child's exit status, which the template sends as soon as the child has gone (after the runner's last
            record, or when the channel closed), or None: after a time limit or a flood, or a child that does not end,
            the whole template is ended, as a cold run's sandbox would be."""
            if not watched.stopped_early:
                try:
                    ended["status"] = self._expect("exit", name, EXIT_TIMEOUT_S).get("status")
                    return ended["status"]
                except TemplateGone:
                    pass
            self.close()
            return None

        outcome = sandbox.watch(watched, limits, group, start, exit_code=exit_status)
        if outcome.status == "died" and "status" not in ended:
            raise TemplateGone("the template ended during the notebook")
        return outcome

    def close(self):
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if self.control is not None:
            self.control.close()
        shutil.rmtree(self.folder, ignore_errors=True)
        shutil.rmtree(self.spool, ignore_errors=True)


def _remove_orphans():
    """Remove the folders of templates whose grading process is gone (a worker killed before it could clean up:
    its template died with it, bubblewrap's --die-with-parent)."""
    for path in Path(tempfile.gettempdir()).glob("course-[tj]*-*-*"):
        parts = path.name.split("-")
        if path.name.startswith(("course-template-", "course-jobs-")) and parts[2].isdigit() \
                and not Path(f"/proc/{parts[2]}").exists():
            shutil.rmtree(path, ignore_errors=True)


class _Watched:
    """A job's report lines as `sandbox.watch` reads them, noting whether the watchdog stopped the run early (a time
    limit or a flood)."""

    def __init__(self, lines: queue.Queue):
        self.lines, self.stopped_early = lines, False

    def get(self, timeout):
        try:
            kind, raw = self.lines.get(timeout=timeout)
        except queue.Empty:
            self.stopped_early = True
            raise
        if kind == "overflow":
            self.stopped_early = True
        return kind, raw


def _processes():
    """(pid folder, fields of /proc/<pid>/status) for every process that can be read."""
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            yield status.parent, dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
        except OSError:
            continue


def _pid_namespace_of_child(pid: int) -> str | None:
    """The PID namespace of bubblewrap's first process inside the sandbox (a child of `pid`): the template's."""
    for folder, fields in _processes():
        try:
            if int(fields.get("PPid", "0")) == pid:
                return os.readlink(folder / "ns" / "pid")
        except (OSError, ValueError):
            continue
    return None


def _host_pid(pid, pidns) -> int | None:
    """The host's pid of a template's child process G, given G's pid in the template's namespace: the process whose
    NSpid is (host, pid, 1) and whose parent lives in the template's namespace."""
    if not isinstance(pid, int) or pidns is None:
        return None
    for _, fields in _processes():
        nspid = fields.get("NSpid", "").split()
        if len(nspid) == 3 and nspid[1] == str(pid) and nspid[2] == "1":
            try:
                if os.readlink(f"/proc/{fields['PPid'].strip()}/ns/pid") == pidns:
                    return int(nspid[0])
            except (OSError, ValueError, KeyError):
                continue
    return None


def _template(sandbox_mode: str, limits) -> tuple[Template | None, str | None]:
    """This worker thread's template for these settings, started if needed: (template, None) or (None, why not)."""
    me = threading.get_native_id()
    starting = _starting.pop(me, None)
    if starting is not None:  # start_early's start of this thread's template: wait for it
        starting.join()
    why = cold_reason(sandbox_mode, limits)
    if why:
        return None, why
    template = _templates.get(me)
    if template is not None and (template.key != _key(sandbox_mode, limits) or not template.alive()):
        template.close()
        template = None
    if template is None:
        template = Template(sandbox_mode, limits)
        why = template.start()
        if why:
            _cold_reasons[_key(sandbox_mode, limits)] = why
            return None, why
        _templates[me] = template
    return template, None


def start_early(sandbox_mode: str, limits):
    """Start the calling thread's template in the background and return at once: the grading process's own single
    notebook (an --only rerun) then has its template's bubblewrap, Python and `import torch` run beside the
    grader's preparation and its import of the chapter's checks, not after them. Its first run waits for it."""
    me = threading.get_native_id()
    if cold_reason(sandbox_mode, limits) or me in _templates or me in _starting:
        return

    template = Template(sandbox_mode, limits)
    template.launch()  # here: the sandbox lives as long as the thread that started it

    def wait():
        why = template.ready()
        if why:
            _cold_reasons[_key(sandbox_mode, limits)] = why
        else:
            _templates[me] = template

    thread = threading.Thread(target=wait, name="course-template-start", daemon=True)
    _starting[me] = thread
    thread.start()


def prestart(sandbox_mode: str, limits) -> str:
    """Start this worker thread's template before its first notebook (while the grader still prepares the run):
    "warm", or why its notebooks will run cold."""
    template, why = _template(sandbox_mode, limits)
    return "warm" if template is not None else why


def run(job_dir: Path, sandbox_mode: str, limits) -> tuple[sandbox.Outcome | None, str]:
    """Run a job in this worker's template: (outcome, "warm"), or (None, why) when it must be run cold."""
    template, why = _template(sandbox_mode, limits)
    if template is None:
        return None, why
    me = threading.get_native_id()
    try:
        return template.run(job_dir, limits), "warm"
    except TemplateGone as exc:
        _templates.pop(me, None)
        template.close()
        return None, f"the template was lost ({exc}); this notebook ran cold"


def run_job(job_dir: Path, sandbox_mode: str, limits) -> sandbox.Outcome:
    """Run a job as grading does: forked from this worker's warm template where it can be, else cold
    (`sandbox.run`); the outcome says which (`start`: "warm" or "cold: <why>"). Sandbox mode "plain" (`check`):
    a plain subprocess, no sandbox (`sandbox.run_plain`)."""
    if sandbox_mode == sandbox.PLAIN:
        outcome = sandbox.run_plain(job_dir, limits)
        outcome.start = "plain (no sandbox)"
        return outcome
    outcome, how = run(job_dir, sandbox_mode, limits)
    if outcome is not None:
        outcome.start = how
        return outcome
    outcome = sandbox.run(job_dir, sandbox_mode, limits)
    outcome.start = f"cold: {how}"
    return outcome


@atexit.register
def close_all():
    for starting in list(_starting.values()):  # a template still starting is closed once it has started
        starting.join()
    _starting.clear()
    for template in list(_templates.values()):
        template.close()
    _templates.clear()

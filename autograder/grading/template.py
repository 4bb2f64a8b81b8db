"""The warm template: runs inside the grading sandbox and forks one child per notebook (issue 18).

Started once per grading worker by `autograder.grading.warm` with the same bubblewrap sandbox, environment and
rlimits as a cold run, and copied (with the runner, as course_runner.py) into the folder bound at /template. It
imports what every notebook needs (numpy, torch, the runner) and nothing else: no tensor operation, no autograd,
no CUDA, no thread pool (the sandbox's OMP_NUM_THREADS=1 keeps OpenBLAS from starting one), so that forking it is
safe. It never runs a learner's line itself.

Protocol: the grader and the template talk over one Unix socket (SOCK_SEQPACKET, one JSON message per packet) that
the template holds as its standard input and no child ever holds. From the grader: {"run": "<job folder under /jobs>"}
with one file descriptor attached, the write end of a pipe made for that job alone (its report channel), then
{"go": "<the same job>"} once the grader has put the child into the notebook's memory group. From the template:
{"event": "ready", "warm": bool, "why": str}, then per job {"event": "forked", "job": ..., "pid": <the child's pid in
this sandbox>} and, when the child has gone, {"event": "exit", "job": ..., "status": <wait status as an exit code>}.
The runner's records go only to the job's own pipe, so what one notebook writes can never be read as another's, and
nothing a notebook does reaches the socket.

Each notebook runs below a child: the child M first drops every descriptor of the template (the socket, any pipe)
but the job's own, with /dev/null as its standard streams, leaves for namespaces of its own (user, mount, PID, network,
IPC, UTS) and forks G, the first process of the new PID namespace: when G ends, the kernel ends every process the
notebook started, so nothing is left for the next one. G mounts a fresh /tmp (also the home) and /dev/shm, makes /dev
read-only (the sandbox's root already is), so that no writable place is shared with another child, waits for the
grader's go, drops its capabilities and forks R, which applies the notebook's rlimits, reseeds the random
generators, and runs the runner on the job folder (records on stdout, exactly as a cold run); G reaps until R ends. The template is not dumpable and is outside
G's PID namespace: G can neither signal it nor read or write its memory.
"""

import ctypes
import importlib
import json
import os
import random
import resource
import socket
import struct
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 0x1, 0x2, 0x4, 0x8, 0x20
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 0x400, 0x800, 0x200000
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
PR_SET_DUMPABLE = 4
CAP_VERSION_3 = 0x20080522

libc = ctypes.CDLL(None, use_errno=True)
# Modules torch imports lazily on a notebook's first call on the meta device (the checks' shape pass) and on first
# use of its reference implementations: about 800 modules, 1.1 s. Importing them here, once, is an import and
# nothing more (no tensor operation, no thread: checked before the template says it is ready).
PRELOAD = ("torch._dynamo", "torch.fx.experimental.symbolic_shapes", "torch._refs", "torch._prims", "torch._decomp",
           "torch.nn.functional", "statistics", "dataclasses")


def _check(result, what):
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def enter_namespaces():
    """In M: namespaces of its own, with this sandbox's uid and gid mapped to themselves (same user, no new rights
    outside)."""
    uid, gid = os.getuid(), os.getgid()
    libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # the template is not dumpable; its child must be, to write its maps
    _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")


def kept_under_tmp():
    """The sandbox's read-only folders that lie under /tmp (a course, and its venv, cloned there): the fresh /tmp must
    show them again, or nothing more could be imported from them."""
    paths = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))}
    return sorted(os.path.realpath(p) for p in paths if os.path.realpath(p).startswith("/tmp/"))


def fresh_mounts(tmp_bytes, keep=()):
    """In G: mounts private to this notebook, and an empty /tmp and /dev/shm (nothing from an earlier notebook). The
    folders in `keep` (under /tmp) are bound again into the new /tmp, read-only as they were, from a handle opened
    on them before it hid them."""
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make mounts private")
    handles = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in keep]
    options = f"size={tmp_bytes},mode=1777".encode()
    _check(libc.mount(b"tmpfs", b"/tmp", b"tmpfs", MS_NOSUID | MS_NODEV, options), "mount /tmp")
    for path, handle in handles:
        os.makedirs(path, exist_ok=True)
        _check(libc.mount(f"/proc/self/fd/{handle}".encode(), path.encode(), None, MS_BIND | MS_REC, None), f"bind {path}")
        os.close(handle)
    if os.path.isdir("/dev/shm"):
        _check(libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV, options), "mount /dev/shm")
    read_only("/dev")


def read_only(path):
    """Remount `path` read-only, keeping the flags it has (a user namespace may not clear them)."""
    flags = os.statvfs(path).f_flag
    kept = sum(bit for st, bit in ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
                                   (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME),
                                   (os.ST_RELATIME, MS_RELATIME)) if flags & st)
    _check(libc.mount(None, path.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY | kept, None), f"make {path} read-only")


def drop_capabilities():
    """In G: no capabilities left, even inside its own user namespace (no more mounts or namespaces of its own)."""
    header = struct.pack("Ii", CAP_VERSION_3, 0)
    data = bytes(24)  # two __user_cap_data_struct: effective, permitted, inheritable all zero
    _check(libc.capset(ctypes.c_char_p(header), ctypes.c_char_p(data)), "drop capabilities")


def apply_limits(limits):
    """In G: the notebook's rlimits (a child starts with no CPU time of its own, so the CPU limit is its own)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if limits.get("memory_bytes"):
        resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"], limits["memory_bytes"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_bytes"], limits["file_bytes"]))
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_seconds"], limits["cpu_seconds"]))


def reseed():
    """In G: generators as unpredictable as a fresh process's (each child would otherwise repeat the template's)."""
    import numpy as np
    import torch

    random.seed()
    np.random.seed()
    torch.seed()


def grandchild(job_dir, go_fd, report_fd, limits):
    """G: the first process of the notebook's PID namespace. It prepares the mounts, waits for the grader's go, and
    forks the process that runs the notebook (R), then reaps until R ends and ends with R's status: the kernel
    then ends whatever else the notebook started. R is not the namespace's first process, so signals reach it as
    they reach a cold run's process (a namespace's first process ignores the signals it has no handler for)."""
    fresh_mounts(limits["tmp_bytes"], kept_under_tmp())
    os.chdir("/tmp")
    if os.read(go_fd, 1) != b"g":  # the grader's go: G is in the notebook's memory group, and R will be too
        os._exit(70)
    os.close(go_fd)
    os.dup2(report_fd, 1)  # the job's own report channel, where the runner writes its records
    os.close(report_fd)
    drop_capabilities()
    runner_pid = os.fork()
    if runner_pid == 0:
        try:
            run_notebook(job_dir, limits)
        finally:
            os._exit(73)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(74)
        if pid == runner_pid:
            os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def run_notebook(job_dir, limits):
    """R: the notebook's rlimits and fresh random generators, then the runner, exactly as in a cold run."""
    import course_runner

    apply_limits(limits)
    reseed()
    course_runner.main(job_dir)  # ends the process (os._exit) after its last record


def keep_only(fds):
    """In M: /dev/null as standard input, output and error, and no other descriptor open but `fds` (the template's
    socket and whatever else it holds are closed before anything of the notebook exists)."""
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in fds:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own descriptor, closed already


def child(job_dir, go_fd, pid_fd, report_fd, limits):
    """M: keeps only the job's descriptors, enters the notebook's namespaces, forks G, tells the template G's pid,
    and exits with G's status."""
    keep_only({go_fd, pid_fd, report_fd})
    enter_namespaces()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(pid_fd)
            grandchild(job_dir, go_fd, report_fd, limits)
        finally:
            os._exit(71)
    os.close(go_fd)
    os.close(report_fd)
    os.write(pid_fd, str(pid).encode())
    os.close(pid_fd)
    _, status = os.waitpid(pid, 0)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def single_threaded():
    return len(os.listdir("/proc/self/task")) == 1


def can_fork_warm(limits):
    """Can a child get its namespaces and mounts here? Tried once in a throwaway child."""
    pid = os.fork()
    if pid == 0:
        try:
            enter_namespaces()
            inner = os.fork()
            if inner == 0:
                try:
                    fresh_mounts(limits["tmp_bytes"], kept_under_tmp())
                    drop_capabilities()
                    os._exit(0)
                except BaseException:
                    os._exit(1)
            _, status = os.waitpid(inner, 0)
            os._exit(0 if status == 0 else 2)
        except BaseException:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    return {0: None, 2: "a child cannot make its own mounts (/tmp, /dev/shm, a read-only /dev)",
            3: "a child cannot enter namespaces of its own"}.get(
        os.waitstatus_to_exitcode(status), f"the trial child ended with {status}")


def main():
    limits = json.loads(sys.argv[1])
    control = socket.socket(fileno=0)  # the grader's socket (SOCK_SEQPACKET), held as standard input

    def report(obj):
        control.send(json.dumps(obj).encode())

    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    sys.path.insert(0, "/template")
    import numpy  # noqa: F401  (what every notebook's runner imports: paid once here)
    import torch  # noqa: F401
    import course_runner  # noqa: F401

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # another torch version: the notebook imports it itself, later
    why = None if single_threaded() else "the template started a thread while importing (a fork would copy it half)"
    why = why or can_fork_warm(limits)
    report({"event": "ready", "warm": why is None, "why": why or ""})
    if why:
        return
    while True:
        message, fds, _, _ = socket.recv_fds(control, 4096, 1)
        if not message:
            return  # the grader has gone
        request = json.loads(message)
        if len(fds) != 1 or not isinstance(request.get("run"), str):
            return  # not the grader's protocol: end, and the grader starts a new template
        job = os.path.basename(request["run"])
        seconds = request.get("cpu_seconds", limits["cpu_seconds"])  # this job's CPU limit (a chapter may raise it)
        if not isinstance(seconds, int) or isinstance(seconds, bool) or not 1 <= seconds <= 24 * 3600:
            return  # not the grader's protocol
        job_limits = dict(limits, cpu_seconds=seconds)
        go_read, go_write = os.pipe()
        pid_read, pid_write = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                child(os.path.join("/jobs", job), go_read, pid_write, fds[0], job_limits)
            finally:
                os._exit(72)
        for fd in (go_read, pid_write, fds[0]):
            os.close(fd)
        with os.fdopen(pid_read, "rb") as f:
            grandchild_pid = f.read(32).decode() or None
        report({"event": "forked", "job": job, "pid": int(grandchild_pid) if grandchild_pid else None})
        go = json.loads(control.recv(4096) or b"{}")  # after the fork: the child never sees the grader's messages
        try:
            if go.get("go") == job:
                os.write(go_write, b"g")
        except OSError:
            pass  # the child has already gone (its exit record says how)
        os.close(go_write)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
        report({"event": "exit", "job": job, "status": code})


if __name__ == "__main__":
    main()

"""One grader per working directory.

Two runs on one working directory would both grade everything and leave its seed out of step with its results,
so `grade` and `report` hold an exclusive lock on <workdir>/.autograder.lock for the whole run. It is an flock:
the kernel releases it when the process ends in any way (Ctrl-C, kill -9, a crash), so a killed run never leaves
it stuck; the file itself only says who held it last, for the message of a run that is refused.
"""

import fcntl
import os
import socket
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

LOCK_FILE = ".autograder.lock"
_HELD = {}  # working directory -> (device, inode) of the lock file this process holds there


class WorkdirBusy(Exception):
    """Another run of the grader holds the working directory: nothing was done (exit status 3)."""


@contextmanager
def hold(workdir: Path, command: str):
    """Hold the working directory's lock while the block runs; raise WorkdirBusy at once if another run holds it.
    A working directory this call had to create, and that holds nothing else afterwards, is removed again."""
    workdir = Path(workdir)
    created = not workdir.exists()
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 500, 0).decode("utf-8", "replace").strip() or "it did not say which"
            raise WorkdirBusy(f"{workdir} is in use by another run of the grader ({holder}); wait for it to finish "
                              "(or stop it), or grade into another --workdir") from None
        os.ftruncate(fd, 0)
        since = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        os.pwrite(fd, f"`{command}`, process {os.getpid()} on {socket.gethostname()}, since {since}\n".encode("utf-8"), 0)
        held = os.fstat(fd)
        _HELD[str(workdir)] = (held.st_dev, held.st_ino)
        yield
    finally:
        _HELD.pop(str(workdir), None)
        os.close(fd)  # releases the lock
        try:
            if created and [p.name for p in workdir.iterdir()] == [LOCK_FILE]:
                path.unlink(missing_ok=True)
                workdir.rmdir()
        except OSError:
            pass  # it vanished, or cannot be written: nothing to tidy


def still_held(workdir: Path) -> bool:
    """False when the working directory whose lock this process holds is gone or was replaced since (removed,
    renamed, unmounted: its lock file is not the one held); True otherwise, also where no lock is held."""
    held = _HELD.get(str(Path(workdir)))
    if held is None:
        return True
    try:
        now = os.stat(Path(workdir) / LOCK_FILE)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True  # cannot look (no permission, a disk error): that fault is said where it hits
    return (now.st_dev, now.st_ino) == held

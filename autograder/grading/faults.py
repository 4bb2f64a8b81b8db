"""Faults of what the grader writes to: a full disk, a working directory turned read-only or vanished, an
unreachable gradebook database.

`grade` and `report` run inside `guard`: such a fault, wherever it hits, becomes a `Fault`, one line naming the
cause, the file and what to do, and the command exits with status 4 (`EXIT_FAULT` in grade.py), never with a
traceback. Nothing already saved is lost: every result, report and state file is written atomically
(`autograder.results.atomic_open`: the old file stays as it was, no temporary file is left), and the gradebook
records each notebook in one transaction; a notebook graded but not yet saved when the fault hit is graded
again by the next run. Once the fault is fixed, the same command resumes as after an interruption.

A wrong command, folder or configuration (a --db URL that cannot be parsed, a missing driver) stays a usage
error (status 2): only a database that cannot be reached, or is lost mid-run, is a fault.
"""

import contextlib
import errno
import re
from pathlib import Path

from autograder.grading import lock

# errno -> (what happened to the place, what the instructor does)
CAUSES = {
    errno.ENOSPC: ("is full", "free space"),
    errno.EDQUOT: ("is over its disk quota", "free space or raise the quota"),
    errno.EROFS: ("is read-only", "make it writable again (e.g. remount it read-write)"),
    errno.EACCES: ("cannot be written", "give this user write permission on it"),
    errno.EPERM: ("cannot be written", "give this user write permission on it"),
    errno.EIO: ("cannot be written", "check the disk"),
}
KEPT = "every result saved before is kept (a notebook graded but not yet saved is graded again)"
# What SQLite says for each fault of the file it writes to, as the errno it stands for.
SQLITE = {"database or disk is full": errno.ENOSPC, "readonly database": errno.EROFS, "disk i/o error": errno.EIO}


class Fault(Exception):
    """What the grader writes to failed (disk, working directory, gradebook database): one line saying which, why
    and what to do; exit status 4."""


def one_line(text: str) -> str:
    """A driver's message (psycopg's spans lines and ends with a link to SQLAlchemy's docs) on one line."""
    text = re.sub(r"\(Background on this error at: [^)]*\)", "", str(text))
    return " ".join(text.split())


def vanished(workdir: Path) -> Fault:
    return Fault(f"the working directory {workdir} vanished during the run (removed, renamed or unmounted); nothing more was "
                 "written: mount it again (or restore it) and run the same command again (it resumes); in a new working "
                 "directory everything is graded again")


def check_present(workdir: Path):
    """Raise Fault when the working directory this run holds is gone or was replaced (an unmounted share shows as
    its empty mount point): writing on would silently start a new one, without the results or the gradebook."""
    if not lock.still_held(workdir):
        raise vanished(workdir)


def from_os_error(exc: OSError, workdir: Path) -> Fault | None:
    """The Fault for an OSError of a write, or None when it is no such fault (a bug: its traceback is wanted)."""
    if not lock.still_held(workdir):
        return vanished(workdir)
    if exc.errno not in CAUSES:
        return None
    what, action = CAUSES[exc.errno]
    reason = exc.strerror or str(exc)
    path = Path(exc.filename) if exc.filename else None
    if path == workdir and not workdir.exists():
        return Fault(f"the working directory {workdir} cannot be created ({reason}): {action} or choose another --workdir, "
                     "and run the same command again")
    inside = path is None or path == workdir or workdir in path.parents
    place = f"the working directory {workdir}" if inside else str(path)
    doing = f" while writing {path.relative_to(workdir)}" if inside and path is not None and path != workdir else ""
    return Fault(f"{place} {what} ({reason}){doing}; {KEPT}: {action} and run the same command again")


def from_build_error(text: str, workdir: Path) -> Fault | None:
    """nbgrader reports a failed generate_assignment as text (its log): the fault it names, if it names one."""
    found = re.search(r"\[Errno (\d+)\] ([^:'\n]+)(?:: '([^'\n]+)')?", text)
    if found:
        code, reason, filename = int(found.group(1)), found.group(2).strip(), found.group(3)
        return from_os_error(OSError(code, reason, filename or str(workdir / "release")), workdir)
    for message, code in SQLITE.items():
        if message in text.lower():
            return from_os_error(OSError(code, message, str(workdir / "gradebook.db")), workdir)
    return None


def gradebook_url(workdir: Path, db: str | None) -> str:
    """The gradebook's URL as the command resolved it (for the message of a fault that does not carry it)."""
    from autograder.reporting import gradebook as gradebook_db

    try:
        return gradebook_db.resolve_url(workdir, db)
    except Exception:
        return db or gradebook_db.default_url(workdir)


def from_db_error(reason: str, url: str, workdir: Path) -> Fault | None:
    """The Fault for a database error (`reason`, the driver's message): SQLite's file full, read-only or gone; a
    database server that cannot be reached or was lost. None for another SQLite error (a bug)."""
    from sqlalchemy.engine import make_url

    from autograder.reporting import gradebook as gradebook_db

    reason = one_line(reason)
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return unreachable(gradebook_db.describe(url), reason)
    if not lock.still_held(workdir):
        return vanished(workdir)
    code = next((c for message, c in SQLITE.items() if message in reason.lower()), None)
    if code is None and "unable to open database file" in reason.lower():
        code = errno.EACCES
    database = Path(parsed.database or workdir / "gradebook.db")
    return from_os_error(OSError(code, reason, str(database)), workdir) if code is not None else None


def unreachable(where: str, reason: str) -> Fault:
    return Fault(f"cannot reach the gradebook database {where} ({one_line(reason)}): start the database, or correct --db (or "
                 "c.CourseDirectory.db_url in the working directory's nbgrader_config.py), and run the same command again; "
                 "results already saved in the working directory are kept and recorded then")


@contextlib.contextmanager
def guard(workdir: Path, db: str | None = None):
    """Turn a fault of the working directory or the gradebook, raised anywhere inside, into a Fault."""
    from sqlalchemy.exc import InterfaceError, OperationalError

    from autograder.authoring.release import BuildError

    try:
        yield
    except OSError as exc:
        fault = from_os_error(exc, workdir)
        if fault is None:
            raise
        raise fault from None
    except (OperationalError, InterfaceError) as exc:  # SQLite's file, or the database server, failed
        fault = from_db_error(str(exc.orig or exc), gradebook_url(workdir, db), workdir)
        if fault is None:
            raise
        raise fault from None
    except BuildError as exc:
        fault = from_build_error(str(exc), workdir)
        if fault is None:
            raise
        raise fault from None

"""Where the course's gradebook lives: any SQLAlchemy URL nbgrader accepts (`--db URL`).

The default is the embedded SQLite file `<workdir>/gradebook.db`. For a large course, one PostgreSQL
database holds the gradebook (`postgresql+psycopg://USER@HOST:5432/DATABASE`; the password from
`~/.pgpass` or `PGPASSWORD`, or in the URL): nbgrader's FAQ advises against SQLite with several graders.

Which URL a command uses, first that applies:
1. `--db URL` on the command line;
2. `c.CourseDirectory.db_url` in the working directory's `nbgrader_config.py`: every command writes the URL it
   used there, so a later command (a resumed run, `report`, `formgrader`) and nbgrader's own (`nbgrader
   export`, formgrader) use the same gradebook; an instructor may also set it there by hand;
3. `sqlite:///<workdir>/gradebook.db`.

One writer: only the coordinating process (`python -m autograder grade`) writes to the gradebook, never
the grading workers, and it records each notebook in one transaction (`transaction`). Recording is
idempotent (nbgrader's rows are unique per student, assignment, notebook and cell, and are updated in
place), so a re-run or a resumed run neither duplicates nor loses a grade.
"""

import contextlib
from pathlib import Path

DEFAULT_FILE = "gradebook.db"


class GradebookError(ValueError):
    """The gradebook URL is wrong or the database cannot be reached: the message says which and how to fix it."""


class GradebookUnreachable(GradebookError):
    """The URL is right but the database cannot be reached (no server, refused, lost): a fault, not a usage error.
    args: (the URL without its password, the driver's reason on one line)."""

    def __str__(self):
        return f"cannot reach the gradebook database {self.args[0]}: {self.args[1]}"


def _reason(exc) -> str:
    """A driver's message on one line (psycopg's spans lines and SQLAlchemy adds a link to its docs)."""
    text = str(getattr(exc, "orig", None) or exc)
    return " ".join(text.split("(Background on this error at:")[0].split())[:300]


def default_url(workdir: Path) -> str:
    return f"sqlite:///{Path(workdir).resolve() / DEFAULT_FILE}"


def _configured_url(workdir: Path) -> str | None:
    """c.CourseDirectory.db_url from <workdir>/nbgrader_config.py, when it sets one."""
    path = Path(workdir) / "nbgrader_config.py"
    if not path.exists():
        return None
    from traitlets.config.loader import PyFileConfigLoader

    try:
        config = PyFileConfigLoader(path.name, str(path.parent)).load_config()
    except Exception as exc:  # the instructor's own file: say what is wrong with it
        raise GradebookError(f"{path} cannot be read ({type(exc).__name__}: {exc})") from None
    url = config.get("CourseDirectory", {}).get("db_url")
    return url if isinstance(url, str) and url else None


def resolve_url(workdir: Path, db: str | None = None) -> str:
    """The gradebook URL for this working directory (see the module's docstring for the order)."""
    url = db or _configured_url(workdir) or default_url(workdir)
    check_url(url)
    return url


def check_url(url: str):
    """Raise GradebookError for a URL SQLAlchemy cannot parse or whose driver is not installed."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        parsed = make_url(url)
    except ArgumentError:
        raise GradebookError(f"--db {url!r} is not a database URL (e.g. postgresql+psycopg://grader@dbhost:5432/course, "
                             "or sqlite:////path/to/gradebook.db)") from None
    try:
        dialect = parsed.get_dialect()
        if hasattr(dialect, "import_dbapi"):
            dialect.import_dbapi()
    except (NoSuchModuleError, ImportError) as exc:
        raise GradebookError(f"--db {describe(url)}: no database driver for {parsed.drivername!r} ({exc}); "
                             "PostgreSQL is postgresql+psycopg://... (psycopg 3, in requirements.txt)") from None


def describe(url: str) -> str:
    """The URL as it may be printed or written to a report: without its password."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unreadable database URL>"


def is_default(url: str, workdir: Path) -> bool:
    return url == default_url(workdir)


def exists(url: str) -> bool:
    """Whether the gradebook holds nbgrader's tables (a SQLite file that exists; a database with them)."""
    from sqlalchemy import create_engine, inspect
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return bool(parsed.database) and parsed.database != ":memory:" and Path(parsed.database).exists()
    engine = create_engine(url)
    try:
        return "assignment" in inspect(engine).get_table_names()
    except Exception as exc:
        raise GradebookUnreachable(describe(url), _reason(exc)) from None
    finally:
        engine.dispose()


def connect(url: str):
    """nbgrader's Gradebook on `url` (tables created on first use); GradebookError when it cannot be reached."""
    from nbgrader.api import Gradebook
    from sqlalchemy.exc import OperationalError

    try:
        return Gradebook(url)
    except OperationalError as exc:
        raise GradebookUnreachable(describe(url), _reason(exc)) from None


@contextlib.contextmanager
def transaction(gradebook):
    """Everything recorded inside is committed once at the end, or not at all.

    nbgrader's API commits after each call (student, submission, ...); inside this block those commits only
    flush, so one notebook's grades land in the gradebook together: a grader killed in the middle leaves the
    notebook as it was, and the resumed run records it whole."""
    session = gradebook.db
    session.commit = session.flush  # an instance attribute over scoped_session's proxy method
    try:
        yield gradebook
    except BaseException:
        del session.commit
        session.rollback()
        raise
    else:
        del session.commit
        session.commit()

"""The records of a grading run, at the bottom of the package: no torch, no nbgrader, no other autograder module.

`Result` (one graded notebook, with a `CellScore` per graded cell), `Skipped` (an entry of the submissions folder
that could not be graded), `Settings` (what every worker needs for the whole run) and `atomic_write`, the one way
results, feedback and reports are written (a reader never sees half a file).
"""

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class CellScore:
    grade_id: str
    score: float
    max_score: float
    message: str = ""


@dataclass
class Result:
    student: str
    chapter: str
    status: str  # "graded", or "invalid" (the file is not a gradable notebook)
    score: float = 0.0
    max_score: float = 0.0
    cells: list = field(default_factory=list)
    notes: list = field(default_factory=list)  # problems with the run (time limits, crashes, cells skipped)
    error: str = ""
    sha256: str = ""
    seed: int = 0
    device: str = ""
    sandbox: str = ""
    seconds: float = 0.0
    start: str = ""  # how its sandbox started: "warm" (forked from the worker's template) or "cold: <why>"

    @property
    def first_problem(self) -> str:
        """One line for the table: what went wrong first. When a time limit or a crash stopped part of the
        notebook, that cause comes first (the errors that follow from it, NameErrors, say less)."""
        if self.error:
            return self.error
        lost = [c for c in self.cells if c.score < c.max_score]
        stopped = [n for n in self.notes if " was stopped: " in n]
        stopped += [line for c in lost for line in c.message.splitlines()[:1] if line.startswith("not run: the notebook stopped")]
        if lost:
            lines = lost[0].message.splitlines() or ["no points"]
            likely = [line for line in lines if line.startswith("Likely mistake")]
            first = f"{(likely or lines)[0]} [{lost[0].grade_id}]"
            return f"{stopped[0]}; then: {first}" if stopped and not first.startswith(stopped[0]) else first
        return self.notes[0] if self.notes else ""

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "Result":
        data = dict(data)
        data["cells"] = [CellScore(**c) for c in data.get("cells", [])]
        return cls(**data)


@dataclass
class Settings:
    """What every worker needs to grade: the same for the whole run."""

    workdir: str
    seed: int
    device: str
    sandbox_mode: str
    limits: object  # autograder.grading.sandbox.Limits


@dataclass
class Skipped:
    student: str  # printable: escaped where the folder name cannot be shown as it is
    chapter: str  # "" when it is not known
    status: str  # one of STATUSES
    message: str
    path: str = ""

    def to_json(self) -> dict:
        return asdict(self)


class atomic_open:
    """Write a file under a temporary name beside it and move it into place: a reader never sees half a file, and
    a failed write (a full disk, a read-only or vanished folder) leaves the old file as it was and no temporary
    file behind. The OSError raised names the file being written (a failed write() or close() names none)."""

    def __init__(self, path: Path, mode: str = "w"):
        self.path = Path(path)
        self.mode = mode
        self.tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")

    def __enter__(self):
        try:
            self.f = self.tmp.open(self.mode, **({} if "b" in self.mode else {"newline": "", "encoding": "utf-8"}))
        except OSError as exc:
            raise _naming(exc, self.path) from None
        return self.f

    def __exit__(self, exc_type, exc, tb):
        failure = exc
        try:
            self.f.close()  # flushes: a full disk may only show here
            if failure is None:
                os.replace(self.tmp, self.path)
                return False
        except OSError as error:
            failure = failure or error
        try:
            self.tmp.unlink(missing_ok=True)
        except OSError:
            pass  # a folder that vanished took the temporary file with it
        if failure is exc and not (isinstance(exc, OSError) and not exc.filename):
            return False  # the block's own exception goes on as it is
        raise _naming(failure, self.path) from None


def _naming(exc: OSError, path: Path) -> OSError:
    """The same error, naming the file that was being written (not its temporary name)."""
    return OSError(exc.errno, exc.strerror or str(exc), str(path))


def result_path(workdir: Path, student: str, chapter: str) -> Path:
    """Where a notebook's saved result lives in a grading working directory (reports.save_result writes it)."""
    return Path(workdir) / "results" / student / f"{chapter}.json"


def atomic_write(path: Path, text: str):
    with atomic_open(path) as f:
        f.write(text)


def atomic_write_bytes(path: Path, data: bytes):
    with atomic_open(path, "wb") as f:
        f.write(data)

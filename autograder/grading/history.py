"""Every version of a notebook a student handed in, kept: the submission history.

A learning platform's export holds only the latest version of each notebook; a resubmission overwrites the
folder. The grader therefore keeps what it saw, per student and chapter, in the working directory:

    history/<student>/<chapter>/versions.json   one entry per distinct content (sha256), oldest first
    history/<student>/<chapter>/<sha256[:16]>.ipynb   a copy of that version (up to COPY_LIMIT bytes)

An entry records when the version was first seen by a run (`received`), the submission time it came with
(`submitted`, from timestamp.txt or the file's time) and what grading it gave (status, score). Three rules
follow from it (applied by `autograder.grading.grade`):

- identical content keeps the submission time of its first submission: re-exporting a folder, touching a file
  or a new timestamp.txt never makes an unchanged notebook late;
- a resubmission that cannot be graded (invalid, refused) does not replace a graded earlier version: the earlier
  version's result stands, `submitted/` shows that version again, and every run says "resubmitted, invalid; the
  earlier version scored 13/13 and stands" until the student hands in something gradable or the instructor
  passes --take-latest;
- every run lists what changed since the last one (new, regraded with the score before and after, held).
"""

import json
from datetime import datetime, timezone
from pathlib import Path

from autograder.results import atomic_write, atomic_write_bytes

HISTORY_DIR = "history"
VERSIONS_FILE = "versions.json"
COPY_LIMIT = 20 * 2**20  # as the size limit of a notebook: a larger file is recorded without a copy


def folder(workdir: Path, student: str, chapter: str) -> Path:
    return Path(workdir) / HISTORY_DIR / student / chapter


def versions(workdir: Path, student: str, chapter: str) -> list:
    """The versions seen so far, oldest first ([] when none or unreadable)."""
    try:
        data = json.loads((folder(workdir, student, chapter) / VERSIONS_FILE).read_text(encoding="utf-8"))
        return data if isinstance(data, list) else []
    except (OSError, ValueError):
        return []


def _save(workdir: Path, student: str, chapter: str, entries: list):
    path = folder(workdir, student, chapter) / VERSIONS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(entries, indent=1, ensure_ascii=False))


def find(entries: list, sha256: str) -> dict | None:
    return next((e for e in entries if e.get("sha256") == sha256), None)


def copy_path(workdir: Path, student: str, chapter: str, sha256: str) -> Path:
    return folder(workdir, student, chapter) / f"{sha256[:16]}.ipynb"


def receive(workdir: Path, sub, sha256: str) -> dict:
    """Record the submission's content as a version (once per content) and return its entry. The first
    submission time of a content is kept; `sub.timestamp` is set back to it, with a note, when a later copy of the
    same bytes came with a later time."""
    entries = versions(workdir, sub.student, sub.chapter)
    entry = find(entries, sha256) if sha256 else None
    submitted = sub.timestamp.isoformat() if sub.timestamp else None
    if entry is None:
        entry = {"sha256": sha256, "received": datetime.now(timezone.utc).replace(tzinfo=None).isoformat(timespec="seconds"),
                 "submitted": submitted, "submitted_from": sub.timestamp_source, "path": str(sub.path), "copy": ""}
        if sha256:
            entry["copy"] = _keep_copy(workdir, sub, sha256)
        entries.append(entry)
        _save(workdir, sub.student, sub.chapter, entries)
    elif entry.get("submitted") and submitted and submitted > entry["submitted"]:
        first = datetime.fromisoformat(entry["submitted"])
        sub.notes.append(f"the same content as the version first submitted at {first:%Y-%m-%d %H:%M:%S} UTC "
                         f"(now dated {sub.timestamp:%Y-%m-%d %H:%M:%S}): the first submission's time counts")
        sub.timestamp, sub.timestamp_source = first, entry.get("submitted_from") or sub.timestamp_source
    elif entry.get("submitted") is None and submitted:
        entry["submitted"], entry["submitted_from"] = submitted, sub.timestamp_source
        _save(workdir, sub.student, sub.chapter, entries)
    return entry


def _keep_copy(workdir: Path, sub, sha256: str) -> str:
    """A copy of a regular file (never a link), relative to the working directory; "" when none was kept."""
    path = Path(sub.path)
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > COPY_LIMIT:
            return ""
        data = path.read_bytes()
    except OSError:
        return ""
    target = copy_path(workdir, sub.student, sub.chapter, sha256)
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(target, data)
    return target.relative_to(workdir).as_posix()


def mark(workdir: Path, student: str, chapter: str, sha256: str, **fields):
    """Store what grading a version gave (status, score, max_score, held, seed, device, release)."""
    entries = versions(workdir, student, chapter)
    entry = find(entries, sha256)
    if entry is None or all(entry.get(k) == v for k, v in fields.items()):
        return
    entry.update(fields)
    _save(workdir, student, chapter, entries)


def held_version(workdir: Path, student: str, chapter: str, sha256: str, seed: int, device: str, release: str) -> dict | None:
    """The entry of a resubmission that was held back (not gradable, an earlier graded version stands) under the
    same seed, device and course notebook: it need not be run again."""
    entry = find(versions(workdir, student, chapter), sha256)
    if entry and entry.get("held") and (entry.get("seed"), entry.get("device"), entry.get("release")) == (seed, device, release):
        return entry
    return None


def restore_submitted(workdir: Path, student: str, chapter: str, sha256: str, target: Path) -> bool:
    """Put the kept copy of a version back at `target` (submitted/...), so that formgrader shows the version whose
    result stands. False when no copy was kept."""
    entry = find(versions(workdir, student, chapter), sha256)
    source = Path(workdir) / entry["copy"] if entry and entry.get("copy") else None
    if source is None or not source.is_file():
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(target, source.read_bytes())
    return True

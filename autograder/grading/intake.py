"""Find the submissions in a folder, and account for everything else in it.

The layout is <folder>/<student>/<chapter-id>/exercises.ipynb (nbgrader's own `submitted/` folder has it).
Real folders are messier; every entry ends up either as a `Submission` (graded, perhaps with a note on
where it was found) or as a `Skipped` entry with a status and a message for the instructor:

- a student id is any folder name that is one safe path component: letters of any script, digits, spaces
  and punctuation; control characters, bidirectional overrides, line separators and names that are not
  valid UTF-8 are refused (status `refused`), as are symbolic links (never followed);
- in a chapter folder, `exercises.ipynb` is graded; a notebook under another name (`Exercises (1).ipynb`)
  is graded with a note when it is the only one; several candidates are `ambiguous` (nothing graded);
- a notebook directly in the student's folder is matched to its chapter by its cells (nbgrader grade ids)
  and graded with a note; a folder that is not a chapter is `unknown-chapter`, with "did you mean ...?";
- an empty folder, or a chapter folder without a notebook, is `missing`; a file where a student's folder
  was expected is `stray`; other files in a student's folder are noted on that student's submissions.

Submission times: nbgrader's `timestamp.txt` in the chapter folder when present, else the notebook file's
modification time; which one was used is recorded with the time.
"""

import difflib
import json
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from autograder import registry
from autograder.results import Skipped

MAX_PEEK_BYTES = 20 * 2**20  # notebooks outside a chapter folder are read to find their chapter (as the worker's limit)
# Never valid in an id: they hide or reorder what the instructor reads (terminal, CSV, HTML).
_BIDI = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C)}
STATUSES = {
    "missing": "no notebook to grade",
    "ambiguous": "several notebooks, none graded",
    "unknown-chapter": "not in a chapter folder",
    "refused": "unsafe name or symbolic link",
    "stray": "a file where a student's folder was expected",
}


@dataclass
class Submission:
    student: str
    chapter: str
    path: Path
    notes: list = field(default_factory=list)
    timestamp: datetime | None = None  # naive UTC, as nbgrader stores it
    timestamp_source: str = ""  # "timestamp.txt" or "file time"

    def intake(self) -> dict:
        """What the reports need to know about where and when it was found (saved with its result)."""
        return {"notes": list(self.notes), "path": str(self.path),
                "timestamp": self.timestamp.isoformat() if self.timestamp else None, "timestamp_source": self.timestamp_source}


def printable(name: str) -> str:
    """The name with anything unsafe to show (control characters, bidi overrides, undecodable bytes) escaped."""
    out = []
    for ch in name:
        if 0xDC80 <= ord(ch) <= 0xDCFF:  # a byte that is not UTF-8 (Python's surrogateescape)
            out.append(f"\\x{ord(ch) - 0xDC00:02x}")
        elif _unsafe(ch):
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 256 else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def _unsafe(ch: str) -> bool:
    return ch in _BIDI or unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp", "Co", "Cn")


def id_problem(name: str) -> str | None:
    """Why a folder name cannot be a student id, or None when it can."""
    if any(0xDC80 <= ord(ch) <= 0xDCFF for ch in name):
        return "the folder name is not valid UTF-8"
    if name in (".", "..") or "/" in name or "\\" in name:
        return "the folder name is not a single path component"
    bad = sorted({printable(ch) for ch in name if _unsafe(ch)})
    if bad:
        return f"the folder name contains control or formatting characters ({', '.join(bad)})"
    if name != name.strip():
        return "the folder name starts or ends with a space"
    if len(name.encode("utf-8")) > 128:
        return "the folder name is longer than 128 bytes"
    if name in registry.CHAPTER_IDS:
        return "this is a chapter id, not a student: pass the folder that holds the students' folders"
    return None


def chapter_grade_ids() -> dict:
    """{chapter: its graded and solution cells' grade ids}, from the student notebooks in chapters/."""
    ids = {}
    for chapter in registry.graded_chapters():
        try:
            nb = json.loads(registry.student_notebook(chapter).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        ids[chapter] = {gid for gid in (_grade_id(c) for c in nb.get("cells", [])) if gid}
    return ids


def _grade_id(cell):
    meta = cell.get("metadata") if isinstance(cell, dict) else None
    nbg = meta.get("nbgrader") if isinstance(meta, dict) else None
    gid = nbg.get("grade_id") if isinstance(nbg, dict) else None
    return gid if isinstance(gid, str) else None


def identify_chapter(path: Path, known: dict) -> str | None:
    """The chapter whose cells the notebook has (most grade ids in common), or None if it cannot be told."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_PEEK_BYTES:
            return None
        cells = json.loads(path.read_bytes().decode("utf-8")).get("cells", [])
        ids = {gid for gid in (_grade_id(c) for c in cells if isinstance(c, dict)) if gid}
    except Exception:  # anything unreadable: not identified (the message says so)
        return None
    overlap = sorted(((len(ids & gids), chapter) for chapter, gids in known.items()), reverse=True)
    if not overlap or overlap[0][0] == 0 or (len(overlap) > 1 and overlap[1][0] == overlap[0][0]):
        return None
    return overlap[0][1]


def submission_time(chapter_dir: Path, notebook: Path):
    """(naive UTC datetime or None, source, note): nbgrader's timestamp.txt, else the file's modification time."""
    from nbgrader.utils import parse_utc

    stamp = chapter_dir / "timestamp.txt"
    note = ""
    if stamp.is_file() and not stamp.is_symlink():
        try:
            text = stamp.read_bytes()[:200].decode("utf-8").strip()
            if text:
                return parse_utc(text), "timestamp.txt", ""
            note = "timestamp.txt is empty; the notebook file's time was used"
        except (ValueError, OverflowError, UnicodeDecodeError) as exc:
            note = f"timestamp.txt could not be read ({type(exc).__name__}); the notebook file's time was used"
    try:
        mtime = notebook.lstat().st_mtime
    except OSError:
        return None, "", note
    return datetime.fromtimestamp(int(mtime), timezone.utc).replace(tzinfo=None), "file time", note


def _visible(folder: Path):
    """Entries of a folder, hidden ones (.DS_Store, .ipynb_checkpoints) left out, sorted."""
    return sorted((p for p in folder.iterdir() if not p.name.startswith(".") and p.name != "__MACOSX"), key=lambda p: p.name)


def _is_notebook(path: Path) -> bool:
    return path.suffix.lower() == ".ipynb" and (path.is_file() or path.is_symlink())


def discover(folder: Path, exclude: Path | None = None, chapters=None):
    """(submissions, skipped, ignored): what to grade, what cannot be graded (with why), and what was left
    out on purpose (the working directory when it lies inside the folder)."""
    chapters = list(chapters or registry.graded_chapters())
    known = {c: ids for c, ids in chapter_grade_ids().items() if c in chapters}
    subs, skipped, ignored, seen_ids = [], [], [], {}
    hidden = sorted(printable(p.name) for p in folder.iterdir() if p.name.startswith(".") or p.name == "__MACOSX")
    if hidden:
        ignored.append(f"hidden: {', '.join(hidden[:10])}{', ...' if len(hidden) > 10 else ''}")
    for entry in _visible(folder):
        name = printable(entry.name)
        rel = name
        if exclude is not None and entry.resolve() == exclude:
            ignored.append(f"{rel}/ (the working directory)")
            continue
        if entry.is_symlink():
            skipped.append(Skipped(name, "", "refused", "a symbolic link, not a folder (links are not followed)", rel))
            continue
        if not entry.is_dir():
            hint = f"; if it is a submission, put it in <student>/<chapter-id>/{registry.NOTEBOOK}.ipynb" if entry.suffix.lower() == ".ipynb" else ""
            skipped.append(Skipped(name, "", "stray", f"a file where a student's folder was expected{hint}", rel))
            continue
        problem = id_problem(entry.name)
        student = unicodedata.normalize("NFC", entry.name) if not problem else name
        if not problem and student in seen_ids:
            problem = f"the same student id as the folder {seen_ids[student]!r} (the names differ only in their Unicode form)"
        if problem:
            skipped.append(Skipped(name, "", "refused", f"not a usable student id: {problem}", rel))
            continue
        seen_ids[student] = entry.name
        s_subs, s_skipped = _student(entry, student, chapters, known)
        subs += s_subs
        skipped += s_skipped
    return subs, skipped, ignored


def _student(folder: Path, student: str, chapters, known):
    subs, skipped, stray, loose = [], [], [], []
    children = _visible(folder)
    if not children:
        return [], [Skipped(student, "", "missing", "the student's folder is empty", f"{student}/")]
    found = {}
    for child in children:
        rel = f"{student}/{printable(child.name)}"
        if child.is_symlink():
            chapter = child.name if child.name in chapters else ""
            skipped.append(Skipped(student, chapter, "refused", f"{rel} is a symbolic link (links are not followed)", rel))
        elif child.is_dir() and child.name in chapters:
            found[child.name] = child
        elif child.is_dir():
            close = difflib.get_close_matches(child.name, chapters, n=1, cutoff=0.5)
            close = close or [c for c in chapters if c.split("-")[0] == child.name.split("-")[0] and child.name[:2].isdigit()][:1]
            nested = not close and any(p.is_dir() and p.name in chapters for p in _visible(child))
            hint = (f"did you mean {close[0]}?" if close else
                    f"it holds chapter folders itself: is {student}/ a folder of submissions one level too high?" if nested else
                    f"the chapters with exercises are {', '.join(chapters)}")
            skipped.append(Skipped(student, close[0] if close else "", "unknown-chapter",
                                   f"{rel}/ is not a chapter with exercises: {hint}", rel + "/"))
        elif _is_notebook(child):
            loose.append(child)
        else:
            stray.append(printable(child.name))
    for child in loose:
        rel = f"{student}/{printable(child.name)}"
        chapter = identify_chapter(child, known)
        if chapter is None:
            skipped.append(Skipped(student, "", "unknown-chapter",
                                   f"{rel} is not in a chapter folder and its cells match no chapter: put it in {student}/<chapter-id>/", rel))
        elif chapter in found or any(s.chapter == chapter for s in subs):
            stray.append(f"{printable(child.name)} (a {chapter} notebook outside its chapter folder)")
        else:
            when, source, note = submission_time(folder, child)
            notes = [f"graded {rel}: it is not in a chapter folder, and its cells are those of {chapter}"] + ([note] if note else [])
            subs.append(Submission(student, chapter, child, notes, when, source))
    for chapter, chapter_dir in found.items():
        rel = f"{student}/{chapter}"
        notebooks = [p for p in _visible(chapter_dir) if _is_notebook(p)]
        names = [p.name for p in notebooks]
        if not notebooks:
            others = [printable(p.name) for p in _visible(chapter_dir) if p.name != "timestamp.txt"]
            what = f" (it holds {', '.join(others[:5])}{', ...' if len(others) > 5 else ''})" if others else ""
            skipped.append(Skipped(student, chapter, "missing", f"no notebook in {rel}/{what}", rel + "/"))
            continue
        if len(notebooks) > 1:
            listed = ", ".join(repr(printable(n)) for n in names)
            skipped.append(Skipped(student, chapter, "ambiguous",
                                   f"{rel}/ holds several notebooks ({listed}): none was graded; keep only the one to grade", rel + "/"))
            continue
        notebook = notebooks[0]
        notes = []
        if notebook.name != f"{registry.NOTEBOOK}.ipynb":
            notes.append(f"graded {rel}/{printable(notebook.name)}, the only notebook in the folder (expected {registry.NOTEBOOK}.ipynb)")
        when, source, note = submission_time(chapter_dir, notebook)
        notes += [note] if note else []
        subs.append(Submission(student, chapter, notebook, notes, when, source))
    if stray:
        note = f"ignored in {student}/: {', '.join(stray[:5])}{', ...' if len(stray) > 5 else ''}"
        for sub in subs:
            sub.notes.append(note)
        for skip in skipped:
            skip.message += f" ({note})"
        if not subs and not skipped:
            skipped.append(Skipped(student, "", "missing", f"no chapter folder in {student}/ ({note})", f"{student}/"))
    elif not subs and not skipped:
        skipped.append(Skipped(student, "", "missing", f"nothing to grade in {student}/", f"{student}/"))
    return sorted(subs, key=lambda s: s.chapter), skipped

"""Find the submissions in a folder, and account for everything else in it.

The layout is <folder>/<student>/<chapter-id>/exercises.ipynb (nbgrader's own `submitted/` folder has it).
Real folders are messier; every entry ends up either as a `Submission` (graded, perhaps with a note on
where it was found) or as a `Skipped` entry with a status and a message for the instructor:

- a student id is any folder name that is one safe path component: letters of any script, digits, spaces
  and punctuation; control characters, bidirectional overrides, line separators and names that are not
  valid UTF-8 are refused (status `refused`), as are symbolic links (never followed);
- in a chapter folder, `exercises.ipynb` is graded; a notebook under another name (`Exercises (1).ipynb`)
  is graded with a note when it is the only one; several candidates are `ambiguous` (nothing graded);
- a notebook is graded as the chapter its cells belong to (its nbgrader grade ids, and the exercises'
  names it defines, counting only those of one chapter: `imports` or `check_helpers` say nothing), with a
  note when that is not the folder it was in. A notebook leaves its chapter folder only when another chapter
  clearly wins (at least MOVE_MIN of its cells, more than twice the folder's); the folder's chapter is then
  `missing`. A readable notebook with nothing of any chapter is `unrecognised` ("download exercises.ipynb
  again and paste your code into it"); one the grader cannot read stays its folder's (graded `invalid`);
- a notebook directly in the student's folder is graded as its chapter, with a note; a folder that is not
  a chapter is `unknown-chapter`, with "did you mean ...?";
- one notebook per chapter and student: identical copies (a folder and an archive of the same work) are
  graded once, with a note; different notebooks claiming one chapter are `ambiguous`, both listed, none graded;
- archives (.zip, .tar, .tar.gz/.tgz, .tar.bz2, .tar.xz) where a student's folder was expected (alice.zip
  is alice's) or inside it (alice/submission.zip, alice/02-qkv-attention.zip) are unpacked into the working
  directory (<workdir>/unpacked/, once per content; a changed archive replaces the older copy) and graded
  with a note "unpacked from ...". An archive with absolute or `..` paths, links or special files, more than
  MAX_ARCHIVE_MEMBERS members or MAX_UNPACKED_BYTES bytes, an archive inside an archive, or a corrupt one is
  not unpacked: status `archive`, with the reason and the command to unpack it by hand;
- an empty folder, or a chapter folder without a notebook, is `missing`; a file where a student's folder
  was expected is `stray`; other files in a student's folder are noted on that student's submissions;
  hidden entries (.DS_Store, .ipynb_checkpoints) and what an OS or tool leaves (__MACOSX/, __pycache__/,
  Thumbs.db) are left out, in archives too.

Submission times: nbgrader's `timestamp.txt` in the chapter folder when present, else the notebook file's
modification time (for an archive, the archive's); which one was used is recorded with the time.
"""

import difflib
import errno
import hashlib
import json
import lzma
import os
import re
import shlex
import shutil
import stat
import tarfile
import unicodedata
import zipfile
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from autograder import registry
from autograder.results import Skipped

MOVE_MIN = 3  # a notebook leaves its chapter folder only with at least this many of another chapter's own cells
ARCHIVE_SUFFIXES = (".tar.gz", ".tar.bz2", ".tar.xz", ".zip", ".tar", ".tgz", ".tbz2", ".txz")
MAX_ARCHIVE_BYTES = 256 * 2**20  # an archive larger than this is not read
MAX_ARCHIVE_MEMBERS = 1000  # an archive with more members is not unpacked
MAX_UNPACKED_BYTES = 512 * 2**20  # nor one that unpacks to more (declared sizes, and bytes counted while writing)
# Never valid in an id: they hide or reorder what the instructor reads (terminal, CSV, HTML).
_BIDI = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C)}
STATUSES = {
    "missing": "no notebook to grade",
    "ambiguous": "several notebooks for one chapter, none graded",
    "unknown-chapter": "not in a chapter folder",
    "unrecognised": "a notebook whose cells are those of no chapter",
    "archive": "an archive that was not unpacked (unsafe, too large or corrupt)",
    "refused": "unsafe name or symbolic link",
    "stray": "a file where a student's folder was expected",
    "gone": "graded earlier, no longer in the folder",
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
    return sorted((p for p in folder.iterdir() if not _hidden(p.name)), key=lambda p: p.name)


JUNK = ("__MACOSX", "__pycache__", "Thumbs.db", "desktop.ini")  # made by an OS or a tool, never by a student


def _hidden(name: str) -> bool:
    return name.startswith(".") or name in JUNK


def _is_notebook(path: Path) -> bool:
    return path.suffix.lower() == ".ipynb" and (path.is_file() or path.is_symlink())


# --- Which chapter a notebook is --------------------------------------------------------------------------


def _distinctive(known: dict) -> dict:
    """{chapter: the ids that only this chapter has}: generic ids (`imports`, `check_helpers`, a helper cell two
    chapters share) say nothing about which chapter a notebook is."""
    counts = {}
    for ids in known.values():
        for gid in ids:
            counts[gid] = counts.get(gid, 0) + 1
    return {chapter: {gid for gid in ids if counts[gid] == 1} for chapter, ids in known.items()}


_DEFINED = re.compile(r"^(?:(?:async\s+)?def|class)\s+([A-Za-z_]\w*)|^([A-Za-z_]\w*)\s*(?::[^=\n]*)?=(?!=)", re.MULTILINE)


def read_notebook(path: Path):
    """The notebook as the grader will read it (nbformat 3 converted, outputs too large removed), or None when the
    grader will refuse it (not JSON, not a notebook, a link...): such a notebook is graded `invalid`, with the reason."""
    from autograder.grading.submission import read_submission

    try:
        return read_submission(path)[0]
    except (ValueError, OSError, RecursionError):
        return None


def chapter_evidence(nb: dict, known: dict) -> dict:
    """{chapter: how many of its own cells (nbgrader grade ids) and exercise names (functions, classes, variables
    defined in the code: a notebook without nbgrader metadata) the notebook has}, for chapters with any."""
    ids, names = set(), set()
    for cell in nb.get("cells", []):
        if not isinstance(cell, dict):
            continue
        gid = _grade_id(cell)
        if gid:
            ids.add(gid)
        if cell.get("cell_type") == "code":
            src = cell.get("source", "")
            src = "".join(s for s in src if isinstance(s, str)) if isinstance(src, list) else src if isinstance(src, str) else ""
            names.update(a or b for a, b in _DEFINED.findall(src))
    found = ids | names
    evidence = {chapter: len(found & own) for chapter, own in _distinctive(known).items()}
    return {chapter: n for chapter, n in evidence.items() if n}


def _best(evidence: dict):
    """(chapter, count) with the most evidence, or (None, 0) when there is none or a tie."""
    ranked = sorted(evidence.items(), key=lambda kv: -kv[1])
    if not ranked or (len(ranked) > 1 and ranked[1][1] == ranked[0][1]):
        return None, 0
    return ranked[0]


def identify_chapter(path: Path, known: dict) -> str | None:
    """The chapter whose cells the notebook has (most of a chapter's own grade ids and names), or None if it
    cannot be told (unreadable, none, or a tie)."""
    nb = read_notebook(path)
    return _best(chapter_evidence(nb, known))[0] if nb is not None else None


def moved_to(folder_chapter: str, evidence: dict) -> str | None:
    """The chapter a notebook found in `folder_chapter`'s folder really is, or None to grade it as the folder's.
    The folder's chapter must lose clearly: another chapter has at least MOVE_MIN of its own cells or names and
    more than twice as many as the folder's (a cell pasted from another chapter moves nothing)."""
    best, n = _best({c: k for c, k in evidence.items() if c != folder_chapter})
    if best and n >= MOVE_MIN and n > 2 * evidence.get(folder_chapter, 0):
        return best
    return None


# --- Archives ----------------------------------------------------------------------------------------------


_WORKDIR_FAULTS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}


class ArchiveError(Exception):
    """Why an archive was not unpacked (unsafe, too large, corrupt)."""


def archive_suffix(name: str) -> str:
    """".zip", ".tar.gz", ... when the file name is one of an archive, else ""."""
    lower = name.lower()
    return next((s for s in ARCHIVE_SUFFIXES if lower.endswith(s) and len(lower) > len(s)), "")


def unpack_command(archive: Path) -> str:
    """The command that unpacks it by hand, next to it, into a folder named like it."""
    target = archive.with_name(archive.name[: -len(archive_suffix(archive.name))])
    if archive_suffix(archive.name) == ".zip":
        return f"unzip -d {shlex.quote(str(target))} {shlex.quote(str(archive))}"
    return f"mkdir -p {shlex.quote(str(target))} && tar -xf {shlex.quote(str(archive))} -C {shlex.quote(str(target))}"


def _member_parts(name: str) -> list:
    """The path of an archive member as components; ArchiveError when it is absolute, leads out (..) or has
    characters that are unsafe in a name."""
    shown = printable(name)
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        raise ArchiveError(f"the member {shown!r} has an absolute path")
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ArchiveError(f"the member {shown!r} leads outside the archive (..)")
    if any(_unsafe(ch) for ch in name):
        raise ArchiveError(f"the member {shown!r} has control or formatting characters in its name")
    return parts


def _zip_members(path: Path):
    """(name, is_dir, declared size, opener) of each member; ArchiveError for links, special files, encryption."""
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            mode = info.external_attr >> 16  # Unix permissions and file type, when made on Unix
            if info.create_system == 3 and stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
                kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file (a device, pipe or socket)"
                raise ArchiveError(f"the member {printable(info.filename)!r} is {kind}")
            if info.flag_bits & 0x1:
                raise ArchiveError(f"the member {printable(info.filename)!r} is encrypted")
            yield info.filename, info.is_dir(), info.file_size, lambda info=info: zf.open(info)


def _tar_members(path: Path):
    with tarfile.open(path) as tf:
        for member in tf:
            if member.issym() or member.islnk():
                raise ArchiveError(f"the member {printable(member.name)!r} is a {'symbolic' if member.issym() else 'hard'} link")
            if not (member.isfile() or member.isdir()):
                raise ArchiveError(f"the member {printable(member.name)!r} is not a regular file (a device, pipe or socket)")
            yield member.name, member.isdir(), member.size, lambda member=member: tf.extractfile(member)


def _extract(archive: Path, dest: Path):
    """Unpack into the fresh folder `dest`, checking every member before writing it: no absolute or `..` paths,
    no links or special files, at most MAX_ARCHIVE_MEMBERS members and MAX_UNPACKED_BYTES bytes (declared, and
    counted while writing). Hidden entries and __MACOSX/ are left out. ArchiveError on the first problem."""
    members = _zip_members(archive) if archive_suffix(archive.name) == ".zip" else _tar_members(archive)
    count = declared = written = 0
    for name, is_dir, size, opener in members:
        count += 1
        declared += max(size, 0)
        if count > MAX_ARCHIVE_MEMBERS:
            raise ArchiveError(f"it has more than {MAX_ARCHIVE_MEMBERS} members")
        if declared > MAX_UNPACKED_BYTES:
            raise ArchiveError(f"it would unpack to more than {MAX_UNPACKED_BYTES // 2**20} MiB")
        parts = _member_parts(name)
        if not parts or any(_hidden(p) for p in parts):
            continue
        target = dest.joinpath(*parts)
        if is_dir:
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "wb") as out, opener() as source:
            while chunk := source.read(2**20):
                written += len(chunk)
                if written > MAX_UNPACKED_BYTES:
                    raise ArchiveError(f"it unpacks to more than {MAX_UNPACKED_BYTES // 2**20} MiB")
                out.write(chunk)


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(2**20):
            digest.update(chunk)
    return digest.hexdigest()


def unpack(archive: Path, into: Path) -> Path:
    """The folder holding the archive's contents: <into>/<archive name>.<hash of its bytes>. Unpacked once per
    content (a later run reuses it; a changed archive is unpacked afresh and the older copy removed, so nothing
    stale remains); unpacked into a temporary folder first, so a folder under the final name is always complete.
    Its files get the archive's modification time (the time of the submission). ArchiveError when it is not safe."""
    if archive.stat().st_size > MAX_ARCHIVE_BYTES:
        raise ArchiveError(f"the archive is larger than {MAX_ARCHIVE_BYTES // 2**20} MiB")
    digest = _file_sha256(archive)[:16]
    dest = into / f"{archive.name}.{digest}"
    into.mkdir(parents=True, exist_ok=True)
    for old in into.iterdir():
        if old != dest and re.fullmatch(re.escape(archive.name) + r"\.[0-9a-f]{16}", old.name):
            shutil.rmtree(old, ignore_errors=True)
    if not dest.is_dir():
        tmp = into / f".{archive.name}.{os.getpid()}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            _extract(archive, tmp)
        except ArchiveError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        except (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, OSError,
                NotImplementedError, RuntimeError, ValueError) as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(exc, OSError) and exc.errno in _WORKDIR_FAULTS:
                raise  # the working directory's fault (full, read-only), not the archive's
            raise ArchiveError(f"it could not be unpacked ({type(exc).__name__}: {printable(str(exc))[:120]})") from None
        os.replace(tmp, dest)
    mtime = archive.stat().st_mtime
    for path in dest.rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.utime(path, (mtime, mtime))
    return dest


def _archive_root(dest: Path) -> Path:
    """Where the student's entries are in an unpacked archive: below the one folder it may hold (alice.zip
    holding alice/ or submission/alice/), but never inside a chapter folder."""
    root = dest
    for _ in range(3):
        entries = _visible(root)
        if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink() and entries[0].name not in registry.CHAPTER_IDS:
            root = entries[0]
        else:
            break
    return root


# --- The folder, student by student ------------------------------------------------------------------------


def discover(folder: Path, exclude: Path | None = None, chapters=None, unpack_into: Path | None = None):
    """(submissions, skipped, ignored): what to grade, what cannot be graded (with why), and what was left
    out on purpose (the working directory when it lies inside the folder). Archives are unpacked under
    `unpack_into` (without it, they are listed with status `archive` and the command to unpack them)."""
    chapters = list(chapters or registry.graded_chapters())
    known = {c: ids for c, ids in chapter_grade_ids().items() if c in chapters}
    subs, skipped, ignored, seen_ids = [], [], [], {}
    hidden = sorted(printable(p.name) for p in folder.iterdir() if _hidden(p.name))
    if hidden:
        ignored.append(f"hidden: {', '.join(hidden[:10])}{', ...' if len(hidden) > 10 else ''}")
    students = {}  # student id -> [(folder or archive, its name as shown)]
    for entry in _visible(folder):
        name = printable(entry.name)
        if exclude is not None and entry.resolve() == exclude:
            ignored.append(f"{name}/ (the working directory)")
            continue
        if entry.is_symlink():
            skipped.append(Skipped(name, "", "refused", "a symbolic link, not a folder (links are not followed)", name))
            continue
        suffix = archive_suffix(entry.name) if entry.is_file() else ""
        if not entry.is_dir() and not suffix:
            hint = f"; if it is a submission, put it in <student>/<chapter-id>/{registry.NOTEBOOK}.ipynb" if entry.suffix.lower() == ".ipynb" else ""
            skipped.append(Skipped(name, "", "stray", f"a file where a student's folder was expected{hint}", name))
            continue
        raw_id = entry.name[: -len(suffix)] if suffix else entry.name  # alice.zip is alice's
        problem = id_problem(raw_id)
        student = unicodedata.normalize("NFC", raw_id) if not problem else printable(raw_id)
        if not problem and entry.is_dir() and student in seen_ids:
            problem = f"the same student id as the folder {seen_ids[student]!r} (the names differ only in their Unicode form)"
        if problem:
            what = "archive name" if suffix else "folder name"
            skipped.append(Skipped(student, "", "refused", f"not a usable student id: {problem.replace('folder name', what)}", name))
            continue
        if entry.is_dir():
            seen_ids[student] = entry.name
        students.setdefault(student, []).append(entry)  # a folder and an archive of one student are both hers
    for student, entries in students.items():
        s_subs, s_skipped = _Student(folder, student, chapters, known, unpack_into).account(entries)
        subs += s_subs
        skipped += s_skipped
    return subs, skipped, ignored


@dataclass
class _Claim:
    """A notebook that would be graded as `chapter` for the student."""

    chapter: str
    path: Path
    rel: str  # where it was found, as the instructor names it
    notes: list
    time_dir: Path  # the folder whose timestamp.txt gives its time
    rank: int  # 0 in its own chapter folder, 1 elsewhere (the first of identical copies is graded)


class _Student:
    """Everything of one student: their folder and archives, the notebooks found in them, one per chapter."""

    def __init__(self, top: Path, student: str, chapters, known, unpack_into):
        self.top, self.student, self.chapters, self.known, self.unpack_into = top, student, chapters, known, unpack_into
        self.claims, self.skipped, self.stray, self.emptied = [], [], [], {}

    def account(self, entries):
        for entry in entries:
            if entry.is_dir():
                self.place(entry, f"{printable(entry.name)}/", entry.name, origin="")
            else:
                self.archive(entry, printable(entry.name), (), chapter_stem="")
        subs = self.resolve()
        if self.stray:
            note = f"ignored in {'; '.join(self.stray)}"
            for sub in subs:
                sub.notes.append(note)
            for skip in self.skipped:
                skip.message += f" ({note})"
            if not subs and not self.skipped:
                self.skip("", "missing", f"no chapter folder in {self.student}/ ({note})", f"{self.student}/")
        elif not subs and not self.skipped:
            self.skip("", "missing", f"nothing to grade in {self.student}/", f"{self.student}/")
        return sorted(subs, key=lambda s: s.chapter), self.skipped

    def skip(self, chapter, status, message, rel):
        self.skipped.append(Skipped(self.student, chapter, status, message, rel))

    def place(self, folder: Path, rel: str, label: str, origin: str):
        """The entries of the student's folder (or of an unpacked archive's root): rel names the folder."""
        children = _visible(folder)
        if not children:
            self.skip("", "missing", f"{origin} holds nothing to grade" if origin else "the student's folder is empty", rel)
            return
        strays = []
        for child in children:
            crel = f"{rel}{printable(child.name)}"
            if child.is_symlink():
                chapter = child.name if child.name in self.chapters else ""
                self.skip(chapter, "refused", f"{crel} is a symbolic link (links are not followed)", crel)
            elif child.is_dir() and child.name in self.chapters:
                self.chapter_folder(child, child.name, crel + "/", origin)
            elif child.is_dir():
                self.unknown_folder(child, crel)
            elif _is_notebook(child):
                self.loose(child, crel, folder, origin)
            elif archive_suffix(child.name):
                if origin:
                    self.skip("", "archive", f"{crel} is an archive inside {origin}, not unpacked again: unpack it yourself "
                              f"({unpack_command(child)}) and grade again", crel)
                else:
                    stem = child.name[: -len(archive_suffix(child.name))]
                    self.archive(child, crel, (label,), chapter_stem=stem if stem in self.chapters else "")
            else:
                strays.append(printable(child.name))
        if strays:
            shown = ", ".join(strays[:5]) + (", ..." if len(strays) > 5 else "")
            self.stray.append(f"{rel[:-1] if rel.endswith(':') else rel}: {shown}")

    def archive(self, archive: Path, rel: str, parents: tuple, chapter_stem: str):
        """Unpack a student's archive (alice.zip, alice/submission.zip, alice/02-qkv-attention.zip) and take its
        entries as the student's, each graded with a note; or give it status `archive` with the reason."""
        chapter = chapter_stem
        if self.unpack_into is None:
            self.skip(chapter, "archive", f"{rel} is an archive: unpack it ({unpack_command(archive)}) and grade again", rel)
            return
        name_problem = id_problem(archive.name) if parents else None  # its name becomes a folder's in the working directory
        if name_problem:
            self.skip(chapter, "refused", f"{rel}: an archive with an unusable name: {name_problem.replace('folder name', 'name')}", rel)
            return
        try:
            root = _archive_root(unpack(archive, self.unpack_into.joinpath(*parents)))
        except ArchiveError as exc:
            self.skip(chapter, "archive", f"{rel} was not unpacked: {exc}; check it, unpack it yourself if it is safe "
                      f"({unpack_command(archive)}) and grade again", rel)
            return
        origin = rel
        if chapter_stem and not any(p.is_dir() and p.name in self.chapters for p in _visible(root)):
            self.chapter_folder(root, chapter_stem, f"{rel}:", origin)  # alice/02-qkv-attention.zip holding the notebook itself
        else:
            self.place(root, f"{rel}:", archive.name, origin)

    def unknown_folder(self, child: Path, crel: str):
        chapters = self.chapters
        close = difflib.get_close_matches(child.name, chapters, n=1, cutoff=0.5)
        close = close or [c for c in chapters if c.split("-")[0] == child.name.split("-")[0] and child.name[:2].isdigit()][:1]
        nested = not close and any(p.is_dir() and p.name in chapters for p in _visible(child))
        hint = (f"did you mean {close[0]}?" if close else
                f"it holds chapter folders itself: is {self.student}/ a folder of submissions one level too high?" if nested else
                f"the chapters with exercises are {', '.join(chapters)}")
        self.skip(close[0] if close else "", "unknown-chapter", f"{crel}/ is not a chapter with exercises: {hint}", crel + "/")

    def chapter_folder(self, folder: Path, chapter: str, rel: str, origin: str):
        """A chapter folder: its one notebook is graded as the chapter its cells belong to (the folder's, unless
        another chapter's cells clearly win); none is `missing`, several are `ambiguous`."""
        notebooks = [p for p in _visible(folder) if _is_notebook(p)]
        if not notebooks:
            others = [printable(p.name) for p in _visible(folder) if p.name != "timestamp.txt"]
            what = f" (it holds {', '.join(others[:5])}{', ...' if len(others) > 5 else ''})" if others else ""
            self.skip(chapter, "missing", f"no notebook in {rel}{what}", rel)
            return
        if len(notebooks) > 1:
            listed = ", ".join(repr(printable(p.name)) for p in notebooks)
            self.skip(chapter, "ambiguous", f"{rel} holds several notebooks ({listed}): none was graded; keep only the one to grade", rel)
            return
        notebook = notebooks[0]
        nrel = f"{rel}{printable(notebook.name)}"
        notes = [f"unpacked from {origin}"] if origin else []
        if notebook.name != f"{registry.NOTEBOOK}.ipynb":
            notes.append(f"graded {nrel}, the only notebook in the folder (expected {registry.NOTEBOOK}.ipynb)")
        nb = read_notebook(notebook)
        if nb is None:  # the grader refuses it, with the reason (status invalid)
            self.claims.append(_Claim(chapter, notebook, nrel, notes, folder, 0))
            return
        evidence = chapter_evidence(nb, self.known)
        other = moved_to(chapter, evidence)
        if other:
            self.emptied[chapter] = (rel, f"{rel} holds no {chapter} notebook: its {printable(notebook.name)} is one of {other} "
                                          f"(graded as {other})")
            notes.insert(0, f"found in {rel}, its cells are those of {other}: graded as {other}")
            self.claims.append(_Claim(other, notebook, nrel, notes, folder, 1))
        elif evidence.get(chapter, 0):
            self.claims.append(_Claim(chapter, notebook, nrel, notes, folder, 0))
        else:
            near = f", and too few of {', '.join(sorted(evidence))}'s to be graded as that" if evidence else " (nor of any other chapter)"
            self.skip(chapter, "unrecognised", f"{nrel} has none of the cells or functions of {chapter}{near}: download the "
                      f"chapter's {registry.NOTEBOOK}.ipynb again and paste your code into it", nrel)

    def loose(self, notebook: Path, rel: str, folder: Path, origin: str):
        """A notebook outside any chapter folder: graded as the chapter its cells belong to."""
        nb = read_notebook(notebook)
        evidence = chapter_evidence(nb, self.known) if nb is not None else {}
        chapter, _ = _best(evidence)
        if nb is None or (evidence and chapter is None):
            why = "it cannot be read as a notebook" if nb is None else f"its cells match several chapters equally ({', '.join(sorted(evidence))})"
            self.skip("", "unknown-chapter", f"{rel} is not in a chapter folder and {why}: put it in {self.student}/<chapter-id>/", rel)
        elif chapter is None:
            self.skip("", "unrecognised", f"{rel} is not in a chapter folder and has none of the cells or functions of any "
                      f"chapter: download the chapter's {registry.NOTEBOOK}.ipynb again, paste your code into it and put it "
                      f"in {self.student}/<chapter-id>/", rel)
        else:
            notes = ([f"unpacked from {origin}"] if origin else []) + [f"graded {rel}: it is not in a chapter folder, and its cells are those of {chapter}"]
            self.claims.append(_Claim(chapter, notebook, rel, notes, folder, 1))

    def resolve(self) -> list:
        """One notebook per chapter: identical copies count once (the one in its own chapter folder is graded, with
        a note); different notebooks claiming one chapter are `ambiguous`, none graded. A chapter folder whose
        notebook was another chapter's is `missing`, unless another notebook is that chapter's."""
        by_chapter = {}
        for claim in self.claims:
            by_chapter.setdefault(claim.chapter, []).append(claim)
        subs = []
        for chapter, claims in sorted(by_chapter.items()):
            claims.sort(key=lambda c: c.rank)
            if len({_content(c.path) for c in claims}) > 1:
                listed = ", ".join(c.rel for c in claims)
                self.skip(chapter, "ambiguous", f"several notebooks are {self.student}'s {chapter} ({listed}): none was graded; "
                          "keep only the one to grade", claims[0].rel)
                continue
            first = claims[0]
            notes = list(first.notes) + ([f"the same notebook is also at {', '.join(c.rel for c in claims[1:])}"] if len(claims) > 1 else [])
            when, source, note = submission_time(first.time_dir, first.path)
            subs.append(Submission(self.student, chapter, first.path, notes + ([note] if note else []), when, source))
        for chapter, (rel, message) in self.emptied.items():
            if chapter not in by_chapter:
                self.skip(chapter, "missing", message, rel)
        return subs


def _content(path: Path) -> str:
    try:
        return "" if path.is_symlink() else _file_sha256(path)
    except OSError:
        return f"unreadable:{path}"

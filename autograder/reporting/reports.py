"""The reports, rebuilt on every run from the whole working directory, never from the last batch alone.

The working directory's state: `results/<student>/<chapter>.json` (one per graded notebook: the grader's
verdicts and where and when the notebook was found), `skipped.json` (what could not be graded, and why),
and nbgrader's gradebook (scores as recorded, manual scores and comments given in formgrader, due dates,
extensions, timestamps, late penalties, names and emails from `nbgrader db student import`).

From it: the table on screen, `summary.csv` (a row per notebook and per graded cell, and a row per skipped
entry), `scores/<chapter>.csv` (a row per student, a column per exercise), `grades.csv` (nbgrader's export
columns), the feedback's scores, and `last_run.json`. A manual score replaces the automatic one everywhere.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from nbgrader.plugins import ExportPlugin

from autograder import registry
from autograder.reporting.feedback import refresh_feedback
from autograder.results import CellScore, Result, Skipped, atomic_open, atomic_write, result_path

SKIPPED_FILE = "skipped.json"
GRADED_STATUSES = ("graded",)


# --- The working directory's state ---------------------------------------------------------------------


def save_result(workdir: Path, result: Result, input_sha256: str, release: str, intake: dict):
    path = result_path(workdir, result.student, result.chapter)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps({"release": release, "input_sha256": input_sha256, "intake": intake, "result": result.to_json()}, indent=1))


def update_intake(workdir: Path, student: str, chapter: str, intake: dict):
    """Where and when a notebook was found changes without a regrade (a new timestamp.txt, a note)."""
    path = result_path(workdir, student, chapter)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if data.get("intake") != intake:
        data["intake"] = intake
        atomic_write(path, json.dumps(data, indent=1))


def load_saved(workdir: Path, student: str, chapter: str):
    """The saved record of one notebook ({release, input_sha256, intake, result: Result}), or None."""

    try:
        data = json.loads(result_path(workdir, student, chapter).read_text(encoding="utf-8"))
        data["result"] = Result.from_json(data["result"])
        return data
    except (OSError, ValueError, KeyError, TypeError):
        return None


def load_records(workdir: Path) -> dict:
    """{(student, chapter): saved record (load_saved's dict)} for every saved result in the working directory."""
    found = {}
    root = Path(workdir) / "results"
    if not root.is_dir():
        return found
    for path in sorted(root.glob("*/*.json")):
        data = load_saved(workdir, path.parent.name, path.stem)
        if data is not None:
            r = data["result"]
            found[(r.student, r.chapter)] = data
    return found


def load_results(workdir: Path) -> dict:
    """{(student, chapter): (Result, intake)} for every saved result in the working directory."""
    return {key: (data["result"], data.get("intake") or {}) for key, data in load_records(workdir).items()}


def load_skipped(workdir: Path) -> list:
    try:
        return [Skipped(**entry) for entry in json.loads((Path(workdir) / SKIPPED_FILE).read_text(encoding="utf-8"))]
    except (OSError, ValueError, TypeError):
        return []


def save_skipped(workdir: Path, entries):
    atomic_write(Path(workdir) / SKIPPED_FILE, json.dumps([s.to_json() for s in entries], indent=1, ensure_ascii=False))


# --- The gradebook ---------------------------------------------------------------------------------------


def record_results(gradebook, results, snapshot=None) -> list:
    """Automatic scores into the gradebook (idempotent). Manual scores are never touched; a cell is flagged
    as needing manual grading only when its automatic score changed under a manual one (for review).
    With `snapshot` (gradebook_snapshot), notebooks already recorded as they are are left alone.
    Returns the review notes."""
    from nbgrader.api import MissingEntry

    reviews = []
    for r in results:
        if r.status == "error":
            continue
        known = (snapshot or {}).get("submissions", {}).get((r.student, r.chapter))
        if known and all(known["grades"].get(c.grade_id, (None,))[0] == c.score and
                         (known["grades"][c.grade_id][1] is not None or not known["grades"][c.grade_id][3]) for c in r.cells):
            continue
        gradebook.update_or_create_student(r.student)
        try:
            gradebook.find_submission(r.chapter, r.student)
        except MissingEntry:
            gradebook.add_submission(r.chapter, r.student)
        for cell in r.cells:
            try:
                grade = gradebook.find_grade(cell.grade_id, registry.NOTEBOOK, r.chapter, r.student)
            except MissingEntry:  # a result from before the chapter's checks changed: regrade it to record it
                reviews.append(f"{r.student}/{r.chapter}: {cell.grade_id} is no longer a graded cell of the chapter; "
                               "regrade this notebook (--only) to record it")
                continue
            before = grade.auto_score
            grade.auto_score = cell.score
            if grade.manual_score is None:
                grade.needs_manual_grade = False
            elif before is not None and before != cell.score:
                grade.needs_manual_grade = True
                reviews.append(f"{r.student}/{r.chapter}: {cell.grade_id} has a manual score ({grade.manual_score:g}) and its "
                               f"automatic score changed from {before:g} to {cell.score:g}: flagged for review in formgrader")
        gradebook.db.commit()
    return reviews


def add_students(gradebook, students):
    """Students seen in the folder but with nothing graded still belong in the gradebook (and grades.csv)."""
    for student in students:
        gradebook.update_or_create_student(student)
    gradebook.db.commit()


def gradebook_snapshot(gradebook) -> dict:
    """Everything the reports need from the gradebook, in a few queries."""
    from nbgrader.api import Assignment, Comment, Grade, Student, SubmittedAssignment, SubmittedNotebook
    from sqlalchemy.orm import selectinload

    students = {s.id: {"first_name": s.first_name or "", "last_name": s.last_name or "", "email": s.email or ""}
                for s in gradebook.db.query(Student).all()}
    assignments = {a.name: {"due": a.duedate, "max_score": a.max_score} for a in gradebook.db.query(Assignment).all()}
    notebooks = selectinload(SubmittedAssignment.notebooks)
    query = gradebook.db.query(SubmittedAssignment).options(
        selectinload(SubmittedAssignment.assignment),
        notebooks.selectinload(SubmittedNotebook.grades).selectinload(Grade.cell),
        notebooks.selectinload(SubmittedNotebook.comments).selectinload(Comment.cell),
    )
    submissions = {}
    for sub in query.all():
        grades, comments, penalty = {}, [], 0.0
        for nb in sub.notebooks:
            penalty += nb.late_submission_penalty or 0.0
            for g in nb.grades:
                grades[g.cell.name] = (g.auto_score, g.manual_score, g.extra_credit, g.needs_manual_grade)
            comments += [(c.cell.name, c.manual_comment) for c in nb.comments if c.manual_comment]
        due = sub.assignment.duedate
        submissions[(sub.student_id, sub.assignment.name)] = {
            "timestamp": sub.timestamp, "due": (due + sub.extension) if due is not None and sub.extension else due,
            "seconds_late": sub.total_seconds_late if due is not None else 0.0, "penalty": penalty,
            "grades": grades, "comments": comments,
        }
    return {"students": students, "assignments": assignments, "submissions": submissions}


class CsvExport(ExportPlugin):
    """nbgrader's CSV export (same columns as its CsvExportPlugin), written as proper CSV (ids and names may
    hold commas or quotes) and sorted by assignment and student. `nbgrader export` in the working directory
    uses it too (nbgrader_config.py names it)."""

    def export(self, gradebook):
        from nbgrader.api import MissingEntry

        keys = ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email",
                "raw_score", "late_submission_penalty", "score", "max_score", "status"]
        # A 0 that is not a real score says so: the status of the notebook's last result (graded, invalid, error,
        # ...), of a skipped entry of the folder (zipped, misplaced, ...), or "not submitted". Read from the working
        # directory this export is written into (also under `nbgrader export` there).
        workdir = Path(self.to).resolve().parent if self.to else Path.cwd()
        skipped = load_skipped(workdir)
        statuses = {(s.student, s.chapter): s.status for s in skipped if s.chapter}
        whole = {}  # an entry of the whole student (alice.zip not unpacked, an empty folder): for each chapter
        for s in skipped:
            if not s.chapter:
                whole.setdefault(s.student, s.status)
        statuses.update({key: result.status for key, (result, _) in load_results(workdir).items()})
        statuses.update({(s.student, s.chapter): s.status for s in skipped if s.status == "gone"})  # a score kept, said so
        rows = []
        for assignment in gradebook.assignments:
            if self.assignment and assignment.name not in self.assignment:
                continue
            for student in gradebook.students:
                if self.student and student.id not in self.student:
                    continue
                row = {"assignment": assignment.name, "duedate": assignment.duedate, "student_id": student.id,
                       "last_name": student.last_name, "first_name": student.first_name, "email": student.email,
                       "max_score": assignment.max_score}
                try:
                    submission = gradebook.find_submission(assignment.name, student.id)
                except MissingEntry:
                    row.update(timestamp="", raw_score=0.0, late_submission_penalty=0.0, score=0.0,
                               status=statuses.get((student.id, assignment.name), whole.get(student.id, "not submitted")))
                else:
                    row["status"] = statuses.get((student.id, assignment.name), "graded")
                    penalty = submission.late_submission_penalty or 0.0
                    row.update(timestamp=submission.timestamp, raw_score=submission.score, late_submission_penalty=penalty,
                               score=max(0.0, submission.score - penalty))
                rows.append({k: "" if row[k] is None else str(row[k]) for k in keys})
        rows.sort(key=lambda r: (r["assignment"], _sort_key(r["student_id"])))
        with atomic_open(Path(self.to or "grades.csv")) as f:  # a failed write leaves the old grades.csv whole
            writer = csv.DictWriter(f, fieldnames=keys)
            writer.writeheader()
            writer.writerows(rows)


# --- Rows: one per notebook or skipped entry -------------------------------------------------------------


@dataclass
class Row:
    student: str
    chapter: str
    status: str
    message: str = ""  # skipped entries: why; notebooks: the error, if any
    result: Result | None = None
    final: Result | None = None  # the result with the gradebook's final cell scores (manual grades)
    auto: dict = field(default_factory=dict)  # grade id -> automatic score
    manual: dict = field(default_factory=dict)  # grade id -> manual score (+ extra credit), only where given
    comments: list = field(default_factory=list)
    notes: list = field(default_factory=list)  # where the notebook was found, and the grader's run notes
    raw_score: float = 0.0
    penalty: float = 0.0
    submitted: datetime | None = None
    source: str = ""
    due: datetime | None = None
    seconds_late: float = 0.0

    @property
    def graded(self) -> bool:
        return self.result is not None and self.status != "error"

    @property
    def score(self) -> float:
        return max(0.0, self.raw_score - self.penalty)

    @property
    def max_score(self) -> float:
        return self.result.max_score if self.result else 0.0

    @property
    def late_by(self) -> str:
        return human_duration(self.seconds_late) if self.seconds_late > 0 else ""

    def problem(self) -> str:
        """The table's last column: lateness, manual grading, then the first problem."""
        parts = []
        if self.seconds_late > 0:
            parts.append(f"late by {self.late_by}" + (f", penalty {self.penalty:g}" if self.penalty else ""))
        if self.manual:
            parts.append(f"manual grade: {', '.join(self.manual)}")
        if self.result is None:
            parts.append(self.message)
        else:
            if self.message and self.status != self.result.status:
                parts.append(self.message)
            first = self.final.first_problem if self.final else self.result.first_problem
            parts.append(first or (self.notes[0] if self.notes else ""))
        return "; ".join(p for p in parts if p)


def build_rows(results: dict, skipped, snapshot: dict, unsaved=()) -> list:
    """Rows for every saved result (joined with the gradebook), every result of this run that could not be
    saved (grader errors), and every skipped entry; sorted by student and chapter."""
    rows = {}
    for (student, chapter), (result, intake) in results.items():
        rows[(student, chapter)] = _result_row(result, intake, snapshot)
    for result, intake in unsaved:
        rows[(result.student, result.chapter)] = _result_row(result, intake, snapshot)
    extra = []
    for entry in skipped:
        row = rows.get((entry.student, entry.chapter)) if entry.chapter else None
        if row is not None:  # found again but not gradable now: the status says so, the earlier scores stay
            row.status = entry.status
            row.message = f"{entry.message} (the scores shown are from an earlier run)"
        else:
            extra.append(Row(entry.student, entry.chapter, entry.status, entry.message))
    return sorted([*rows.values(), *extra], key=lambda r: (_sort_key(r.student), r.chapter, r.status))


def _result_row(result: Result, intake: dict, snapshot: dict) -> Row:

    row = Row(result.student, result.chapter, result.status, result.error, result=result)
    row.notes = list(intake.get("notes", []))
    if intake.get("timestamp"):
        row.submitted, row.source = datetime.fromisoformat(intake["timestamp"]), intake.get("timestamp_source", "")
    book = snapshot["submissions"].get((result.student, result.chapter))
    cells = []
    for c in result.cells:
        row.auto[c.grade_id] = c.score
        score = c.score
        if book and c.grade_id in book["grades"]:
            auto, manual, extra, _ = book["grades"][c.grade_id]
            if manual is not None:
                score = manual + (extra or 0.0)
                row.manual[c.grade_id] = score
            elif extra:
                score = c.score + extra
                row.manual[c.grade_id] = score
        cells.append(CellScore(c.grade_id, score, c.max_score, c.message))
    row.final = replace(result, cells=cells, score=sum(c.score for c in cells))
    row.raw_score = row.final.score
    if book:
        row.comments = book["comments"]
        row.penalty = book["penalty"]
        row.due = book["due"]
        row.seconds_late = book["seconds_late"]
        row.submitted = book["timestamp"] or row.submitted
    return row


# --- Writing them ----------------------------------------------------------------------------------------

SUMMARY_COLUMNS = ["student", "chapter", "status", "cell", "score", "max_score", "message", "auto_score", "manual_score",
                   "late_penalty", "submitted_utc", "submitted_from", "due_utc", "late_by", "seed"]


def write_summary_csv(path: Path, rows):
    """A row per notebook (cell ""), then a row per graded cell; a row per skipped entry."""
    with atomic_open(path) as f:
        writer = csv.writer(f)
        writer.writerow(SUMMARY_COLUMNS)
        for row in rows:
            if row.result is None:
                writer.writerow([row.student, row.chapter, row.status, "", "", "", row.message] + [""] * 8)
                continue
            messages = [m for m in [row.message if row.status != row.result.status else row.result.error] if m] + row.notes + row.result.notes
            if row.manual:
                messages.append(f"manual grade: {', '.join(row.manual)}")
            writer.writerow([row.student, row.chapter, row.status, "", _n(row.score), _n(row.max_score), "; ".join(messages),
                             _n(sum(row.auto.values())), _n(sum(row.manual.values())) if row.manual else "", _n(row.penalty) if row.penalty else "",
                             _iso(row.submitted), row.source, _iso(row.due), row.late_by, row.result.seed])
            for cell in row.final.cells:
                writer.writerow([row.student, row.chapter, row.status, cell.grade_id, _n(cell.score), _n(cell.max_score), cell.message,
                                 _n(row.auto[cell.grade_id]), _n(row.manual[cell.grade_id]) if cell.grade_id in row.manual else ""] + [""] * 6)


def write_chapter_csvs(folder: Path, rows, snapshot: dict) -> list:
    """scores/<chapter>.csv: a row per student (the roster's too, as "not submitted"), a column per exercise."""
    folder.mkdir(parents=True, exist_ok=True)
    chapters = sorted({r.chapter for r in rows if r.chapter} | {a for a in snapshot["assignments"] if a in registry.CHAPTER_IDS})
    students = {r.student for r in rows} | set(snapshot["students"])
    written = []
    for chapter in chapters:
        mine = {r.student: r for r in rows if r.chapter == chapter}
        general = {}
        for r in rows:
            if not r.chapter and r.student not in mine:
                general.setdefault(r.student, r)
        exercises = next((list(r.auto) for r in mine.values() if r.result and r.result.cells), [])
        max_score = snapshot["assignments"].get(chapter, {}).get("max_score") or next((r.max_score for r in mine.values() if r.result), "")
        path = folder / f"{chapter}.csv"
        with atomic_open(path) as f:
            writer = csv.writer(f)
            writer.writerow(["student_id", "last_name", "first_name", "email", "status", *exercises, "raw_score", "late_penalty", "score",
                             "max_score", "submitted_utc", "submitted_from", "due_utc", "late_by", "seed", "manual", "problem"])
            for student in sorted(students, key=_sort_key):
                who = snapshot["students"].get(student, {})
                names = [student, who.get("last_name", ""), who.get("first_name", ""), who.get("email", "")]
                row = mine.get(student) or general.get(student)
                if row is None:
                    writer.writerow(names + ["not submitted"] + [""] * len(exercises) + ["", "", "", _n(max_score)] + [""] * 7)
                elif row.result is None:
                    writer.writerow(names + [row.status] + [""] * len(exercises) + ["", "", "", _n(max_score)] + [""] * 6 + [row.message])
                else:
                    cells = {c.grade_id: c.score for c in row.final.cells}
                    writer.writerow(names + [row.status] + [_n(cells[e]) if e in cells else "" for e in exercises] +
                                    [_n(row.raw_score), _n(row.penalty), _n(row.score), _n(row.max_score), _iso(row.submitted), row.source,
                                     _iso(row.due), row.late_by, row.result.seed, " ".join(row.manual), row.problem()])
        written.append(path)
    return written


def refresh_all_feedback(workdir: Path, rows) -> int:
    """The feedback files get the final scores (manual grades, late penalty) and the notes; returns how many changed."""

    changed = 0
    for row in rows:
        if row.result is None or row.status == "error":
            continue
        final = {"score": row.score, "raw_score": row.raw_score, "penalty": row.penalty, "late": row.late_by,
                 "submitted": _human(row.submitted) + (f" ({row.source})" if row.source else "") if row.submitted else "",
                 "due": _human(row.due) if row.due else "", "manual": list(row.manual), "comments": row.comments, "notes": row.notes}
        changed += refresh_feedback(workdir, row.result, final, row.manual)
    return changed


def write_grades_csv(workdir: Path, config, gradebook):
    CsvExport(config=config, to=str(Path(workdir) / "grades.csv")).export(gradebook)


def print_table(rows, out, width=90):
    lines = [("student", "chapter", "score", "status", "first problem")]
    for r in rows:
        problem = r.problem().replace("\n", " ")
        problem = problem if len(problem) <= width else problem[: width - 1] + "…"
        score = f"{r.score:g}/{r.max_score:g}" if r.graded else "-"
        lines.append((r.student, r.chapter or "-", score, r.status, problem))
    widths = [max(_width(line[i]) for line in lines) for i in range(4)]
    print(file=out)
    for i, line in enumerate(lines):
        print("  ".join(cell + " " * (w - _width(cell)) for cell, w in zip(line[:4], widths)) + "  " + line[4], file=out)
        if i == 0:
            print("  ".join("-" * w for w in widths) + "  " + "-" * 13, file=out)


def counts(rows) -> dict:
    out = {}
    for r in rows:
        out[r.status] = out.get(r.status, 0) + 1
    return dict(sorted(out.items()))


# --- Helpers ---------------------------------------------------------------------------------------------


def human_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{minutes} min" if minutes else f"{secs} s"


def _width(text: str) -> int:
    """Columns the text takes in a terminal: CJK characters take two."""
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def summary_line(rows) -> str:
    notebooks = sum(r.result is not None for r in rows)
    return (f"The reports hold {notebooks} notebook(s) and {len(rows) - notebooks} other entr(ies): "
            + ", ".join(f"{n} {status}" for status, n in counts(rows).items()) + ".")


def _sort_key(student: str):
    return (student.casefold(), student)


def _n(x) -> str:
    return "" if x in ("", None) else f"{x:g}"


def _iso(when) -> str:
    return when.isoformat(sep=" ", timespec="seconds") if when else ""


def _human(when) -> str:
    return when.strftime("%Y-%m-%d %H:%M UTC") if when else ""

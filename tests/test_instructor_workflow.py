"""The instructor's workflow, end to end, through the real CLI: a messy folder where every entry is
accounted for, regrading one student into an existing run, manual grades (nbgrader's API, then formgrader's
own web API) that survive a regrade, due dates with a late penalty, a roster import. Each test asserts what
the instructor sees: the table, summary.csv, scores/<chapter>.csv, grades.csv, the feedback, the exit status.

The checkers the workflow relies on (student ids, durations, the course configuration, the penalty plugin,
finding a notebook's chapter, the table's first problem) are tested on right and wrong input first.
"""

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timedelta, timezone

import nbformat
import pytest

from autograder.authoring import demo
from autograder.grading import intake
from autograder.config import CourseConfigError, load_course_settings, parse_duration
from autograder.reporting.latepenalty import PerDayPenalty
from autograder.results import CellScore, Result
from conftest import ROOT, course_env, run_python

CHAPTER = "02-qkv-attention"
FULL = 13.0


def write_nb(path, nb):
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def cli(*args, timeout=900):
    return run_python("-m", "autograder", *map(str, args), timeout=timeout)


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def table_lines(stdout):
    """{student: line} of the table printed at the end of a run."""
    lines, inside = {}, False
    for line in stdout.splitlines():
        if line.startswith("student "):
            inside = True
            continue
        if inside and not line.strip():
            break
        if inside and not line.startswith("---"):
            lines[line.split("  ")[0].strip()] = line
    return lines


def notebook_rows(workdir):
    """{(student, chapter): the notebook's (or skipped entry's) row of summary.csv}."""
    return {(r["student"], r["chapter"]): r for r in read_csv(workdir / "summary.csv") if r["cell"] == ""}


# --- The checkers, on right and wrong input --------------------------------------------------------------


@pytest.mark.parametrize("name", ["alice", "Zhang Wei", "张伟", "Lee, Ann", "o'brien", "José-María", "x.y_z"])
def test_any_safe_folder_name_is_a_student_id(name):
    assert intake.id_problem(name) is None


@pytest.mark.parametrize("name, why", [
    ("bad\x07name", "control"), ("tab\there", "control"), ("evil\u202eexe", "control"), ("line\u2028break", "control"),
    ("\udcffbytes", "UTF-8"), (" padded", "space"), ("..", "single path component"), ("x" * 129, "longer"),
    (CHAPTER, "chapter id"),
])
def test_unsafe_folder_names_are_refused_with_the_reason(name, why):
    problem = intake.id_problem(name)
    assert problem and why in problem
    assert all(ch.isprintable() for ch in intake.printable(name)), "a refused name is shown escaped"


def test_durations():
    assert parse_duration("2d") == timedelta(days=2)
    assert parse_duration("1d 12h") == timedelta(hours=36)
    assert parse_duration("90 minutes") == timedelta(minutes=90)
    for wrong in ("", "2", "two days", "2x", "2d junk", 48):
        with pytest.raises(ValueError):
            parse_duration(wrong)


def test_course_configuration_is_read_and_checked(tmp_path):
    good = tmp_path / "course.toml"
    good.write_text('timezone = "Europe/Berlin"\n[due]\n"02-qkv-attention" = "2025-03-01 23:59"\n'
                    '[extensions."*"]\nalice = "1d"\n[extensions."02-qkv-attention"]\nbob = "36h"\n'
                    '[late_penalty]\npercent_per_day = 5\n')
    settings = load_course_settings(good)
    assert settings.due == {CHAPTER: datetime(2025, 3, 1, 22, 59)}  # 23:59 in Berlin is 22:59 UTC in March
    assert settings.extension(CHAPTER, "alice") == timedelta(days=1) and settings.extension(CHAPTER, "bob") == timedelta(hours=36)
    assert settings.extension(CHAPTER, "carol") is None
    assert settings.penalty_plugin == "autograder.reporting.latepenalty.PerDayPenalty" and settings.penalty_options == {"percent_per_day": 5}
    assert load_course_settings(tmp_path / "absent.toml").due == {}, "no file: no due dates"
    wrong = {
        '[due]\n"02-qkv" = "2025-03-01 23:59"\n': "not a chapter id",
        '[due]\n"02-qkv-attention" = "the first of March"\n': "",
        '[extensions."02-qkv-attention"]\nalice = "soon"\n': "not a duration",
        '[late_penalty]\npercent_per_dya = 5\n': "has no option",
        '[late_penalty]\nplugin = "nowhere.Plugin"\n': "cannot be imported",
        '[late_penalty]\nplugin = "autograder.reporting.reports.CsvExport"\n': "not an nbgrader late-submission plugin",
        'due_dates = 1\n': "unknown setting",
        '[due\n': "",
    }
    for text, fragment in wrong.items():
        bad = tmp_path / "bad.toml"
        bad.write_text(text)
        with pytest.raises(CourseConfigError) as error:
            load_course_settings(bad)
        assert fragment in str(error.value), (text, str(error.value))


def test_per_day_penalty_plugin():
    plugin = PerDayPenalty(percent_per_day=10, grace_minutes=15, max_percent=30)
    assert plugin.late_submission_penalty("s", 10.0, 0) == 0
    assert plugin.late_submission_penalty("s", 10.0, 14 * 60) == 0, "inside the grace period"
    assert plugin.late_submission_penalty("s", 10.0, 16 * 60) == pytest.approx(1.0), "one started day"
    assert plugin.late_submission_penalty("s", 10.0, 86400 + 16 * 60) == pytest.approx(2.0), "two started days"
    assert plugin.late_submission_penalty("s", 10.0, 30 * 86400) == pytest.approx(3.0), "capped"


def test_a_notebook_outside_its_folder_is_matched_to_its_chapter_by_its_cells(tmp_path):
    known = intake.chapter_grade_ids()
    assert intake.identify_chapter(write_nb(tmp_path / "a.ipynb", demo.filled_submission(CHAPTER)), known) == CHAPTER
    stranger = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1", metadata={"nbgrader": {"grade_id": "mine"}})])
    assert intake.identify_chapter(write_nb(tmp_path / "b.ipynb", stranger), known) is None
    (tmp_path / "c.ipynb").write_text("{not json")
    assert intake.identify_chapter(tmp_path / "c.ipynb", known) is None


def test_discovery_explains_a_folder_one_level_too_high_and_twin_ids(tmp_path):
    ref = demo.filled_submission(CHAPTER)
    write_nb(tmp_path / "course" / "alice" / CHAPTER / "exercises.ipynb", ref)  # unpacked one level too deep
    write_nb(tmp_path / "course" / "bob" / "notes" / "x.ipynb", ref)
    write_nb(tmp_path / "Jos\u00e9" / CHAPTER / "exercises.ipynb", ref)  # the same name, composed and decomposed
    write_nb(tmp_path / "Jose\u0301" / CHAPTER / "exercises.ipynb", ref)
    (tmp_path / ".DS_Store").write_text("")
    subs, skipped, ignored = intake.discover(tmp_path)
    assert [(s.student, s.chapter) for s in subs] == [("José", CHAPTER)]
    by_path = {k.path: k for k in skipped}
    assert "one level too high" in by_path["course/alice/"].message and by_path["course/alice/"].status == "unknown-chapter"
    assert "chapters with exercises are" in by_path["course/bob/"].message, "a plain unknown folder gets no such hint"
    assert [k.status for k in skipped if "same student id" in k.message] == ["refused"]
    assert ignored == ["hidden: .DS_Store"]


def test_first_problem_names_the_time_limit_before_what_follows_from_it():
    lost = [CellScore("stable_softmax_hidden", 0.0, 3.0, "stable_softmax could not be checked: NameError: name 'stable_softmax' is not defined")]
    stopped = Result("s", CHAPTER, "graded", cells=lost, notes=["your cell 'stable_softmax' was stopped: a cell ran past the time limit (10 s)"])
    assert stopped.first_problem.startswith("your cell 'stable_softmax' was stopped: a cell ran past the time limit")
    plain = Result("s", CHAPTER, "graded", cells=lost)
    assert plain.first_problem.startswith("stable_softmax could not be checked: NameError")


# --- A messy folder: every entry accounted for -------------------------------------------------------------

MESSY_GRADED = {  # student: (score, a fragment of the notebook's note or first problem)
    "alice": (FULL, "ignored in alice/: notes.txt"),
    "Zhang Wei": (FULL, ""),
    "张伟": (8.0, "missing scale"),
    "Lee, Ann": (FULL, ""),
    "erin": (FULL, "Exercises (1).ipynb, the only notebook"),
    "kate": (FULL, "its cells are those of 02-qkv-attention"),
    # Its softmax cell hangs and is skipped: softmax and attention (which needs it) earn nothing; self-attention,
    # right when its attention is, is graded in a replay round with the reference's attention results.
    "slow": (FULL - 3 - 5, "was stopped: a cell ran past the time limit"),
}
MESSY_SKIPPED = {  # (student as shown, chapter): (status, fragment of the message)
    ("frank", CHAPTER): ("unknown-chapter", "did you mean 02-qkv-attention?"),
    ("henry", ""): ("missing", "folder is empty"),
    ("ivan", CHAPTER): ("missing", "no notebook in ivan/02-qkv-attention/"),
    ("jack", CHAPTER): ("ambiguous", "several notebooks"),
    ("notes.txt", ""): ("stray", "a file where a student's folder was expected"),
    ("bad\\x07name", ""): ("refused", "control or formatting characters"),
    ("\\xffbytes", ""): ("refused", "not valid UTF-8"),
    ("linked", ""): ("refused", "symbolic link"),
}


@pytest.fixture(scope="module")
def messy(tmp_path_factory):
    root = tmp_path_factory.mktemp("messy")
    subs = root / "submissions"
    ref, wrong = demo.filled_submission(CHAPTER), demo.filled_submission(CHAPTER, ["missing_scale"])
    for student in ("alice", "Zhang Wei", "Lee, Ann"):
        write_nb(subs / student / CHAPTER / "exercises.ipynb", ref)
    (subs / "alice" / "notes.txt").write_text("my notes")
    write_nb(subs / "张伟" / CHAPTER / "exercises.ipynb", wrong)
    write_nb(subs / "erin" / CHAPTER / "Exercises (1).ipynb", ref)  # a browser's renamed download
    write_nb(subs / "frank" / "02-qkv" / "exercises.ipynb", ref)  # a misspelt chapter
    write_nb(subs / "kate" / "exercises.ipynb", ref)  # no chapter folder
    (subs / "henry").mkdir()
    (subs / "ivan" / CHAPTER).mkdir(parents=True)
    write_nb(subs / "jack" / CHAPTER / "exercises.ipynb", ref)
    write_nb(subs / "jack" / CHAPTER / "exercises (1).ipynb", wrong)
    (subs / "notes.txt").write_text("stray")
    (subs / ".DS_Store").write_text("")
    os.makedirs(os.fsencode(subs) + b"/bad\x07name/" + CHAPTER.encode())
    os.makedirs(os.fsencode(subs) + b"/\xffbytes/" + CHAPTER.encode())
    (subs / "linked").symlink_to(subs / "alice")
    # A solution cell that never ends: the time limit stops it, and what depends on it fails.
    slow = demo.filled_submission(CHAPTER)
    cell = next(c for c in slow.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "stable_softmax")
    cell.source += "\nwhile True:\n    pass\n"
    write_nb(subs / "slow" / CHAPTER / "exercises.ipynb", slow)
    workdir = subs / "_grading"  # inside the folder (made beforehand, as an instructor may): it is not a student
    workdir.mkdir()
    result = cli("grade", subs, "--workdir", workdir, "--seed", 4, "--device", "cpu", "--cell-timeout", 10)
    return dict(workdir=workdir, result=result, rows=notebook_rows(workdir), table=table_lines(result.stdout))


def test_messy_folder_exits_1_and_accounts_for_every_entry(messy):
    result, rows = messy["result"], messy["rows"]
    assert result.returncode == 1, f"skipped entries make the exit status 1:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    expected = {(s, CHAPTER) for s in MESSY_GRADED} | set(MESSY_SKIPPED)
    assert set(rows) == expected, f"missing from summary.csv: {expected - set(rows)}; unexpected: {set(rows) - expected}"
    assert f"{len(MESSY_GRADED)} notebook(s) graded, 0 could not be graded, {len(MESSY_SKIPPED)} entr(ies) skipped" in result.stdout
    assert "ignored     _grading/ (the working directory)" in result.stdout and "ignored     hidden: .DS_Store" in result.stdout
    assert set(messy["table"]) == {s for s, _ in expected}, "every entry is a line of the table"


@pytest.mark.parametrize("student", list(MESSY_GRADED))
def test_messy_folder_grades_what_can_be_graded_with_a_note(messy, student):
    score, fragment = MESSY_GRADED[student]
    row = messy["rows"][(student, CHAPTER)]
    assert row["status"] == "graded" and float(row["score"]) == score, row
    assert fragment in row["message"] + messy["table"][student], (fragment, row["message"], messy["table"][student])


@pytest.mark.parametrize("key", list(MESSY_SKIPPED))
def test_messy_folder_gives_every_skipped_entry_its_status(messy, key):
    status, fragment = MESSY_SKIPPED[key]
    row = messy["rows"][key]
    assert row["status"] == status and fragment in row["message"], row
    assert f"[{status}]" in messy["result"].stdout and fragment in messy["table"][key[0]]
    skipped = json.loads((messy["workdir"] / "last_run.json").read_text())["this_run"]["skipped"]
    assert any(s["student"] == key[0] and s["status"] == status for s in skipped), "last_run.json lists it"


def test_messy_folder_time_limit_is_the_first_problem(messy):
    line = messy["table"]["slow"]
    assert "was stopped: a cell ran past the time limit (10 s)" in line, line
    assert line.split("graded", 1)[1].strip().startswith("your cell 'stable_softmax' was stopped"), "the cause comes before the NameErrors"


def test_messy_folder_per_student_report(messy):
    workdir = messy["workdir"]
    rows = read_csv(workdir / "scores" / f"{CHAPTER}.csv")
    ids = [r["student_id"] for r in rows]
    assert ids == sorted(ids, key=lambda s: (s.casefold(), s)), "rows sorted by student"
    by_id = {r["student_id"]: r for r in rows}
    assert set(by_id) == {s for s, _ in MESSY_GRADED.items()} | {s for s, _ in MESSY_SKIPPED}
    exercises = ["stable_softmax_hidden", "scaled_dot_product_attention_hidden", "self_attention_hidden", "dot_product_variance_hidden"]
    header = list(rows[0])
    assert all(e in header for e in exercises) and {"status", "score", "late_by", "seed", "submitted_from"} <= set(header)
    assert by_id["张伟"]["scaled_dot_product_attention_hidden"] == "0" and by_id["张伟"]["stable_softmax_hidden"] == "3"
    assert by_id["张伟"]["score"] == "8" and by_id["张伟"]["seed"] == "4" and by_id["张伟"]["submitted_from"] == "file time"
    assert by_id["jack"]["status"] == "ambiguous" and by_id["henry"]["status"] == "missing"
    grades = {r["student_id"]: r for r in read_csv(workdir / "grades.csv")}  # a comma in an id stays one field
    assert float(grades["Lee, Ann"]["score"]) == FULL and float(grades["张伟"]["score"]) == 8.0
    assert grades["henry"]["timestamp"] == "" and grades["alice"]["timestamp"], "timestamps are recorded"
    assert (workdir / "feedback" / "erin" / CHAPTER / "exercises.html").read_text().count("Exercises (1).ipynb") == 1
    assert (workdir / "submitted" / "erin" / CHAPTER / "exercises.ipynb").exists(), "formgrader finds it under nbgrader's name"


# --- Regrading one student into an existing run ---------------------------------------------------------


def test_regrading_one_student_keeps_everyone_else(tmp_path):
    workdir = tmp_path / "work"
    first = cli("grade", demo.DEMO_DIR, "--workdir", workdir, "--seed", 2, "--device", "cpu")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    results = {p.parent.name: p.stat().st_mtime_ns for p in (workdir / "results").glob("*/*.json")}
    assert sorted(results) == sorted(demo.DEMO_STUDENTS)

    # Carol resubmits a corrected notebook; only her folder is graded into the run's working directory.
    again = tmp_path / "carol-again"
    write_nb(again / "carol" / CHAPTER / "exercises.ipynb", demo.filled_submission(CHAPTER))
    one = cli("grade", again, "--workdir", workdir)
    assert one.returncode == 0, one.stdout[-2000:] + one.stderr[-2000:]
    rows = notebook_rows(workdir)
    assert {s for s, _ in rows} == set(demo.DEMO_STUDENTS), "summary.csv still holds everyone"
    assert float(rows[("carol", CHAPTER)]["score"]) == FULL and float(rows[("dave", CHAPTER)]["score"]) == 8.0
    assert set(table_lines(one.stdout)) == set(demo.DEMO_STUDENTS), "so does the table"
    assert {r["student_id"]: float(r["score"]) for r in read_csv(workdir / "grades.csv")} == {"alice": 13.0, "bob": 0.0, "carol": 13.0, "dave": 8.0}
    assert [r["student_id"] for r in read_csv(workdir / "scores" / f"{CHAPTER}.csv")] == sorted(demo.DEMO_STUDENTS)
    assert "13 / 13" in (workdir / "feedback" / "carol" / CHAPTER / "exercises.html").read_text()

    # --only regrades the named student from the full folder, even unchanged, and nobody else.
    only = cli("grade", demo.DEMO_DIR, "--workdir", workdir, "--only", "dave")
    assert only.returncode == 0, only.stdout[-2000:] + only.stderr[-2000:]
    assert "Regrading the 1 selected notebook(s)" in only.stdout
    now = {p.parent.name: p.stat().st_mtime_ns for p in (workdir / "results").glob("*/*.json")}
    assert now["dave"] != results["dave"] and now["alice"] == results["alice"] and now["bob"] == results["bob"]
    assert float(notebook_rows(workdir)[("carol", CHAPTER)]["score"]) == FULL, "carol's resubmission is kept"
    by_chapter = cli("grade", demo.DEMO_DIR, "--workdir", workdir, "--chapter", CHAPTER, "--only", "bob")
    assert by_chapter.returncode == 0 and "Regrading the 1 selected notebook(s)" in by_chapter.stdout, by_chapter.stdout[-2000:]
    later = {p.parent.name: p.stat().st_mtime_ns for p in (workdir / "results").glob("*/*.json")}
    assert later["bob"] != now["bob"] and later["dave"] == now["dave"] and later["alice"] == now["alice"]

    # Wrong input: a student who is not in the folder; no folder of submissions at all.
    unknown = cli("grade", demo.DEMO_DIR, "--workdir", workdir, "--only", "davd")
    assert unknown.returncode == 2 and "no such student" in unknown.stderr and "'dave'" in unknown.stderr
    (tmp_path / "empty" / "henry").mkdir(parents=True)
    empty = cli("grade", tmp_path / "empty", "--workdir", tmp_path / "other")
    assert empty.returncode == 2 and "no submissions found" in empty.stderr and "[missing]" in empty.stdout


# --- Manual grades ----------------------------------------------------------------------------------------


def _manual(workdir, student, cell, score, comment=None):
    """What formgrader does when a grader types a score (and a comment), through nbgrader's API."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{workdir / 'gradebook.db'}") as gradebook:
        grade = gradebook.find_grade(cell, "exercises", CHAPTER, student)
        grade.manual_score = score
        grade.needs_manual_grade = False
        if comment:
            gradebook.find_comment(cell.removesuffix("_hidden"), "exercises", CHAPTER, student).manual_comment = comment
        gradebook.db.commit()


def _flags(workdir):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{workdir / 'gradebook.db'}") as gradebook:
        return {(g.student.id, g.name): g.needs_manual_grade for s in gradebook.assignment_submissions(CHAPTER)
                for nb in s.notebooks for g in nb.grades}


def test_manual_grade_shows_everywhere_and_survives_a_regrade(tmp_path):
    subs, workdir = tmp_path / "subs", tmp_path / "work"
    write_nb(subs / "alice" / CHAPTER / "exercises.ipynb", demo.filled_submission(CHAPTER))
    carol = write_nb(subs / "carol" / CHAPTER / "exercises.ipynb", demo.filled_submission(CHAPTER, ["missing_scale"]))
    first = cli("grade", subs, "--workdir", workdir, "--seed", 3, "--device", "cpu")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert not any(_flags(workdir).values()), "autograded cells do not need manual grading"
    assert float(notebook_rows(workdir)[("carol", CHAPTER)]["score"]) == 8.0

    _manual(workdir, "carol", "scaled_dot_product_attention_hidden", 4.0, "Close: divide by sqrt(d_k).")
    rebuilt = cli("report", "--workdir", workdir)
    assert rebuilt.returncode == 0, rebuilt.stdout[-2000:] + rebuilt.stderr[-2000:]

    def seen_everywhere(stdout):
        assert " 12/13 " in table_lines(stdout)["carol"] and "manual grade" in table_lines(stdout)["carol"]
        row = notebook_rows(workdir)[("carol", CHAPTER)]
        assert float(row["score"]) == 12.0 and float(row["auto_score"]) == 8.0 and float(row["manual_score"]) == 4.0
        cell = next(r for r in read_csv(workdir / "summary.csv") if r["student"] == "carol" and r["cell"] == "scaled_dot_product_attention_hidden")
        assert float(cell["score"]) == 4.0 and float(cell["auto_score"]) == 0.0
        scores = {r["student_id"]: r for r in read_csv(workdir / "scores" / f"{CHAPTER}.csv")}
        assert scores["carol"]["score"] == "12" and scores["carol"]["manual"] == "scaled_dot_product_attention_hidden"
        assert {r["student_id"]: float(r["score"]) for r in read_csv(workdir / "grades.csv")} == {"alice": 13.0, "carol": 12.0}
        html = (workdir / "feedback" / "carol" / CHAPTER / "exercises.html").read_text()
        assert "Score: <b>12 / 13</b>" in html and "Graded by your instructor (the automatic check gave 0)" in html
        assert "Close: divide by sqrt(d_k)." in html

    seen_everywhere(rebuilt.stdout)
    regraded = cli("grade", subs, "--workdir", workdir, "--only", "carol")
    assert regraded.returncode == 0 and "Regrading the 1 selected" in regraded.stdout, regraded.stdout[-2000:]
    seen_everywhere(regraded.stdout)
    assert not any(_flags(workdir).values()), "the automatic score did not change: nothing to review"

    # Carol's notebook is corrected: the automatic score changes under the manual one. The manual score
    # still counts, and the cell is flagged for review in formgrader, with a line in the output.
    write_nb(carol, demo.filled_submission(CHAPTER))
    changed = cli("grade", subs, "--workdir", workdir)
    assert changed.returncode == 0, changed.stdout[-2000:]
    assert "review: carol/02-qkv-attention: scaled_dot_product_attention_hidden has a manual score (4)" in changed.stdout
    assert float(notebook_rows(workdir)[("carol", CHAPTER)]["score"]) == 12.0
    assert [k for k, flagged in _flags(workdir).items() if flagged] == [("carol", "scaled_dot_product_attention_hidden")]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_formgrader_command_serves_the_gradebook_and_rebuilds_the_reports(tmp_path):
    workdir = tmp_path / "work"
    graded = cli("grade", demo.DEMO_DIR, "--workdir", workdir, "--seed", 2, "--device", "cpu")
    assert graded.returncode == 0, graded.stdout[-2000:]
    port, token = _free_port(), "test-token"
    # stdin from /dev/null: with a terminal on stdin, jupyter server answers Ctrl-C with a 5 s "Shutdown? (y/n)" prompt
    # and resumes, so the test would depend on how pytest was started (it timed out when run from a terminal).
    # Started with SIGINT ignored, as a non-interactive shell's `cmd &` starts it (and as a suite run in the background
    # starts every test's processes): Ctrl-C must stop it all the same (it hung here when it did not).
    proc = subprocess.Popen([sys.executable, "-m", "autograder", "formgrader", "--workdir", str(workdir), "--port", str(port)],
                            cwd=ROOT, env=course_env(JUPYTER_TOKEN=token), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    base = f"http://127.0.0.1:{port}/formgrader/api"

    def api(path, data=None):
        request = urllib.request.Request(base + path, data=json.dumps(data).encode() if data else None, method="PUT" if data else "GET",
                                         headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    try:
        deadline = time.monotonic() + 120
        while True:  # bounded: the server answers within the deadline or the test fails
            try:
                submissions = api(f"/submitted_notebooks/{CHAPTER}/exercises")
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "formgrader did not start"
                time.sleep(0.3)
        assert {s["student"]: s["score"] for s in submissions} == {"alice": 13.0, "bob": 0.0, "carol": 8.0, "dave": 8.0}
        assert not any(s["needs_manual_grade"] for s in submissions), "formgrader does not ask for manual grading"
        bob = next(s["id"] for s in submissions if s["student"] == "bob")
        grade = next(g for g in api(f"/grades?submission_id={bob}") if g["name"] == "stable_softmax_hidden")
        assert api(f"/grade/{grade['id']}", {"manual_score": 2, "extra_credit": None})["manual_score"] == 2
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the terminal: the server stops, then the reports are rebuilt
        try:
            out, _ = proc.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate(timeout=30)
            raise AssertionError(f"formgrader did not stop within 180 s of Ctrl-C; its output:\n{out[-3000:]}") from None
    assert proc.returncode == 0, out[-3000:]
    assert "rebuilding the reports" in out and " 2/13 " in table_lines(out)["bob"]
    assert float(notebook_rows(workdir)[("bob", CHAPTER)]["score"]) == 2.0
    assert "Score: <b>2 / 13</b>" in (workdir / "feedback" / "bob" / CHAPTER / "exercises.html").read_text()
    missing = cli("formgrader", "--workdir", tmp_path / "nothing-here")
    assert missing.returncode == 2 and "holds no gradebook" in missing.stderr


@pytest.mark.parametrize("ignores_sigterm", [False, True])
def test_formgrader_stops_its_server_on_ctrl_c_whatever_the_server_does(monkeypatch, ignores_sigterm):
    """Ctrl-C stops the server from the command itself (SIGTERM, then SIGKILL after SERVER_STOP_S), instead of
    relying on what jupyter does with a Ctrl-C, which depends on its stdin."""
    from autograder import __main__ as command

    monkeypatch.setattr(command, "SERVER_STOP_S", 2)
    code = "import signal, time\n" + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignores_sigterm else "") + "print('ready', flush=True)\ntime.sleep(120)"
    server = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        status = command._stop(server)
    finally:
        server.kill()
        server.wait()
    assert status == (-signal.SIGKILL if ignores_sigterm else -signal.SIGTERM)


# --- Due dates, a late penalty, a roster ----------------------------------------------------------------


def test_late_submission_gets_the_configured_penalty(tmp_path):
    subs, workdir = tmp_path / "subs", tmp_path / "work"
    ref = demo.filled_submission(CHAPTER)
    stamps = {"ontime": "2025-03-01 22:00:00 UTC", "late": "2025-03-03 04:59:00 UTC", "extended": "2025-03-03 04:59:00 UTC"}
    for student, stamp in stamps.items():
        write_nb(subs / student / CHAPTER / "exercises.ipynb", ref)
        (subs / student / CHAPTER / "timestamp.txt").write_text(stamp + "\n")  # nbgrader's own file
    filetime = write_nb(subs / "filetime" / CHAPTER / "exercises.ipynb", ref)
    when = datetime(2025, 3, 2, 3, 59, tzinfo=timezone.utc).timestamp()  # 5 h after the due date
    os.utime(filetime, (when, when))
    config = tmp_path / "course.toml"
    config.write_text('timezone = "Europe/Berlin"\n[due]\n"02-qkv-attention" = "2025-03-01 23:59"\n'
                      '[extensions."02-qkv-attention"]\nextended = "2d"\n[late_penalty]\npercent_per_day = 10\nmax_percent = 50\n')

    # Wrong input first: a misspelt chapter in the configuration stops the run before anything is graded.
    bad = tmp_path / "bad.toml"
    bad.write_text('[due]\n"02-qkv" = "2025-03-01 23:59"\n')
    refused = cli("grade", subs, "--workdir", workdir, "--course-config", bad)
    assert refused.returncode == 2 and "'02-qkv' is not a chapter id" in refused.stderr
    assert not (workdir / "results").exists()

    result = cli("grade", subs, "--workdir", workdir, "--seed", 1, "--device", "cpu", "--course-config", config)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    grades = {r["student_id"]: r for r in read_csv(workdir / "grades.csv")}
    assert {r["duedate"] for r in grades.values()} == {"2025-03-01 22:59:00"}
    assert grades["late"]["timestamp"] == "2025-03-03 04:59:00" and grades["filetime"]["timestamp"] == "2025-03-02 03:59:00"
    penalties = {s: float(r["late_submission_penalty"]) for s, r in grades.items()}
    assert penalties == pytest.approx({"ontime": 0.0, "late": 2.6, "extended": 0.0, "filetime": 1.3})  # 2 started days, 1 day
    assert float(grades["late"]["score"]) == pytest.approx(10.4) and float(grades["late"]["raw_score"]) == FULL
    scores = {r["student_id"]: r for r in read_csv(workdir / "scores" / f"{CHAPTER}.csv")}
    assert scores["late"]["late_by"] == "1 d 6 h" and scores["late"]["submitted_from"] == "timestamp.txt"
    assert scores["filetime"]["late_by"] == "5 h" and scores["filetime"]["submitted_from"] == "file time"
    assert scores["extended"]["late_by"] == "" and scores["extended"]["due_utc"] == "2025-03-03 22:59:00"
    assert scores["ontime"]["late_by"] == "" and scores["ontime"]["score"] == "13"
    assert "late by 1 d 6 h, penalty 2.6" in table_lines(result.stdout)["late"] and " 10.4/13 " in table_lines(result.stdout)["late"]
    html = (workdir / "feedback" / "late" / CHAPTER / "exercises.html").read_text()
    assert "late by 1 d 6 h" in html and "late penalty 2.6" in html and "Score: <b>10.4 / 13</b>" in html

    # nbgrader's own tools see the same: the penalty is in the gradebook, where nbgrader's plugin put it.
    env = course_env()
    env.pop("PYTHONPATH")  # the working directory's nbgrader_config.py finds the course's plugins by itself
    exported = subprocess.run(["nbgrader", "export", "--to", str(tmp_path / "export.csv")], cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
    assert exported.returncode == 0, exported.stderr[-2000:]
    assert {r["student_id"]: float(r["late_submission_penalty"]) for r in read_csv(tmp_path / "export.csv")} == pytest.approx(penalties)

    # The roster, imported with nbgrader's own command, fills names and emails and lists who submitted nothing.
    (tmp_path / "roster.csv").write_text("id,first_name,last_name,email\nlate,Lena,Late,lena@example.org\nnewbie,Ned,New,ned@example.org\n")
    imported = subprocess.run(["nbgrader", "db", "student", "import", str(tmp_path / "roster.csv")], cwd=workdir, env=env,
                              capture_output=True, text=True, timeout=300)
    assert imported.returncode == 0, imported.stderr[-2000:]
    report = cli("report", "--workdir", workdir)  # the course configuration of the run is remembered
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
    scores = {r["student_id"]: r for r in read_csv(workdir / "scores" / f"{CHAPTER}.csv")}
    assert (scores["late"]["first_name"], scores["late"]["last_name"], scores["late"]["email"]) == ("Lena", "Late", "lena@example.org")
    assert scores["newbie"]["status"] == "not submitted" and scores["late"]["late_by"] == "1 d 6 h"
    assert {r["student_id"]: r["score"] for r in read_csv(workdir / "grades.csv")}["newbie"] == "0.0"

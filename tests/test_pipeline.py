"""End to end: real notebooks graded by the real CLI (sandboxed runs, judged in the grading process).

The corpus: the reference solution (full marks), the untouched student notebook (zero), and each typical
wrong answer of WRONG_ANSWERS (below full marks, with its diagnosis in the summary).
"""

import csv
import json

import nbformat
import pytest

import chapter_contract
from autograder import registry
from autograder.authoring import demo
from autograder.checks import chapter_checks, trains_a_model
from conftest import run_python

CHAPTER = "02-qkv-attention"
# The corpus is graded on one fixed seed, so that this test gives the same result on every run (it once drew a
# random one and failed in CI on a seed where a diagnosis was not the catalogued one). That a diagnosis holds on
# any seed is checked elsewhere: the chapter contract and tests/test_mistake_catalogues.py on harness.SEEDS, and
# scripts/seed_scan.py on as many seeds as one cares to wait for (seeds 5-12: every wrong answer as catalogued).
CORPUS_SEED = 5
# The chapter contract grades each valid answer in-process on two seeds and leaves the third to this corpus.
assert CORPUS_SEED not in chapter_contract.VALID_SEEDS
CHAPTERS = registry.graded_chapters()
# A chapter whose hidden check trains a model (Check.costly: the capstone, seconds a notebook) is graded here with its
# reference, its blank notebook and the valid answers named below; its training bugs are graded through the CLI by
# tests/test_capstone_grading.py, and its whole catalogue in-process by the chapter contract.
TRAINING_SAMPLE = {"10-capstone": ("train_adamw_own_loop",)}


for _chapter in CHAPTERS:  # a new training chapter must say which of its valid answers this corpus grades
    assert not trains_a_model(_chapter) or _chapter in TRAINING_SAMPLE, f"{_chapter} trains a model: add it to TRAINING_SAMPLE"
# Each wrong answer is a student of its own, named <chapter number>-<mistake>, with that chapter only.
WRONG = {f"{chapter[:2]}-{name.replace('_', '-')}": (chapter, name, wrong) for chapter in CHAPTERS if not trains_a_model(chapter)
         for name, wrong in demo.catalogue(chapter).items()}
# Each valid answer written unlike the reference is a student of its own too, named <chapter number>-valid-<name>.
VALID = {f"{chapter[:2]}-valid-{name.replace('_', '-')}": (chapter, name) for chapter in CHAPTERS
         for name in demo.valid_answers(chapter) if not trains_a_model(chapter) or name in TRAINING_SAMPLE[chapter]}


def read_summary(workdir, chapter=None):
    """{student: {chapter: {cell id: row}}}, or with `chapter` that chapter's {student: {cell id: row}};
    a notebook's row with cell "" holds its status message or run notes."""
    rows = {}
    with (workdir / "summary.csv").open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            rows.setdefault(row["student"], {}).setdefault(row["chapter"], {})[row["cell"]] = row
    if chapter is None:
        return rows
    return {student: chapters[chapter] for student, chapters in rows.items() if chapter in chapters}


def graded_cells(rows, student, chapter=CHAPTER):
    """The graded cells of one notebook, from read_summary's rows (either shape)."""
    cells = rows[student][chapter] if chapter in rows[student] else rows[student]
    return {c: r for c, r in cells.items() if c}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Grade every chapter's corpus in one CLI run (reference, blank, each catalogued wrong answer);
    return (workdir, summary rows, stdout)."""
    submissions = tmp_path_factory.mktemp("submissions")
    workdir = tmp_path_factory.mktemp("grading")
    notebooks = {}
    for chapter in CHAPTERS:
        notebooks[("reference", chapter)] = demo.filled_submission(chapter)
        notebooks[("blank", chapter)] = nbformat.read(registry.student_notebook(chapter), as_version=4)
    for student, (chapter, name, _) in WRONG.items():
        notebooks[(student, chapter)] = demo.filled_submission(chapter, [name])
    for student, (chapter, name) in VALID.items():
        notebooks[(student, chapter)] = demo.filled_submission(chapter, valid=[name])
    for (student, chapter), nb in notebooks.items():
        path = submissions / student / chapter / "exercises.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)
    result = run_python("-m", "autograder", "grade", str(submissions), "--workdir", str(workdir), "--device", "cpu",
                        "--seed", str(CORPUS_SEED), timeout=2400)
    assert result.returncode == 0, f"grading failed:\n{result.stdout}\n{result.stderr[-3000:]}"
    return workdir, read_summary(workdir), result.stdout


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_reference_scores_full_marks(corpus, chapter):
    _, rows, _ = corpus
    cells = graded_cells(rows, "reference", chapter)
    assert len(cells) == len(chapter_checks(chapter).CHECKS), f"{chapter}: graded cells {sorted(cells)}"
    lost = {c: r["message"] for c, r in cells.items() if float(r["score"]) < float(r["max_score"])}
    assert not lost, f"the reference solution of {chapter} lost points: {lost}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_untouched_notebook_scores_zero(corpus, chapter):
    _, rows, _ = corpus
    cells = graded_cells(rows, "blank", chapter)
    assert len(cells) == len(chapter_checks(chapter).CHECKS) and sum(float(r["score"]) for r in cells.values()) == 0
    # Told why: not done yet, or (a "find the bug" exercise, whose cell starts with the buggy code) the bug.
    silent = {c: r["message"] for c, r in cells.items() if not r["message"].strip()}
    assert not silent, f"a blank exercise should be told why it has no points: {silent}"
    told_not_done = [c for c, r in cells.items() if any(w in r["message"] for w in ("not implemented", "not defined", "empty"))]
    assert len(told_not_done) >= len(cells) - 1, f"{chapter}: the blank notebook's messages: {[r['message'][:120] for r in cells.values()]}"


@pytest.mark.parametrize("student", list(WRONG))
def test_wrong_answer_loses_points_with_its_diagnosis(corpus, student):
    _, rows, _ = corpus
    chapter, name, wrong = WRONG[student]
    cells = graded_cells(rows, student, chapter)
    failed = {c for c, r in cells.items() if float(r["score"]) < float(r["max_score"])}
    # Only the exercise with the mistake loses points: callers of a wrong function are graded on their own.
    assert failed == set(wrong.failing_cells), f"{student}: failed cells {sorted(failed)}, expected {sorted(wrong.failing_cells)}"
    messages = [cells[c]["message"] for c in wrong.failing_cells]
    assert any(wrong.diagnosis in m for m in messages), f"{student}: the hidden check says {messages!r}, not {wrong.diagnosis!r}"


@pytest.mark.parametrize("student", list(VALID))
def test_valid_answer_written_unlike_the_reference_scores_full_marks(corpus, student):
    _, rows, _ = corpus
    chapter, name = VALID[student]
    cells = graded_cells(rows, student, chapter)
    lost = {c: r["message"][:400] for c, r in cells.items() if float(r["score"]) < float(r["max_score"])}
    assert not lost, f"{student} ({demo.valid_answers(chapter)[name].why}) lost points through the CLI: {lost}"


# A representative part of the corpus for `check`: every chapter's reference, a blank notebook, and one catalogued
# mistake of every other chapter (about 4 s a notebook, so under a minute).
CHECKED = ([("reference", chapter) for chapter in CHAPTERS] + [("blank", CHAPTER)]
           + [(next(s for s, (c, _, _) in WRONG.items() if c == chapter), chapter) for chapter in CHAPTERS[::2]])


def test_check_gives_the_sandboxed_grade_on_the_same_inputs(corpus):
    """`python -m autograder check` (no sandbox, autograder.grading.check) on notebooks of the corpus, each on the
    inputs its sandboxed grade drew (the run's seed, kept in run-state.json, through notebook.inputs_seed): the same
    points and the same message in every graded cell."""
    from autograder.grading import check, notebook

    workdir, rows, _ = corpus
    run_seed = json.loads((workdir / "run-state.json").read_text())["seed"]
    differ = {}
    for student, chapter in CHECKED:
        path = workdir / "submitted" / student / chapter / "exercises.ipynb"
        cells = check.prepare(path)[2]
        result = check.check(path, seed=notebook.inputs_seed(run_seed, student, chapter, cells))
        assert result.chapter == chapter
        graded = graded_cells(rows, student, chapter)
        mine = {c.grade_id: (c.score, c.message) for c in result.cells}
        theirs = {gid: (float(r["score"]), r["message"]) for gid, r in graded.items()}
        if mine != theirs:
            differ[(student, chapter)] = {gid: (mine.get(gid), theirs.get(gid)) for gid in set(mine) | set(theirs) if mine.get(gid) != theirs.get(gid)}
    assert not differ, f"check and the sandboxed grade disagree: {differ}"
    assert any(float(r["score"]) < float(r["max_score"]) for s, c in CHECKED for r in graded_cells(rows, s, c).values())


def test_grades_csv_and_feedback_are_written(corpus):
    workdir, rows, stdout = corpus
    with (workdir / "grades.csv").open() as f:
        grades = {row["student_id"]: row for row in csv.DictReader(f)}
    assert set(grades) == set(rows)
    assert float(grades["reference"]["score"]) == float(grades["reference"]["max_score"])
    assert float(grades["blank"]["score"]) == 0
    for student, chapters in rows.items():
        for chapter in chapters:
            html = workdir / "feedback" / student / chapter / "exercises.html"
            assert html.exists(), f"no feedback for {student}/{chapter}"
    feedback = (workdir / "feedback" / "02-missing-scale" / CHAPTER / "exercises.html").read_text()
    assert "missing scale" in feedback
    assert "seed" in stdout and "s per notebook" in stdout


def test_demo_folder_grades_with_the_expected_scores(tmp_path):
    result = run_python("-m", "autograder", "grade", str(demo.DEMO_DIR), "--workdir", str(tmp_path), "--seed", "3")
    assert result.returncode == 0, result.stderr[-3000:]
    table = {line.split()[0]: line for line in result.stdout.splitlines() if line.split() and line.split()[0] in demo.DEMO_STUDENTS}
    assert set(table) == set(demo.DEMO_STUDENTS), result.stdout
    assert " 13/13 " in table["alice"] and " 0/13 " in table["bob"]
    assert "missing scale" in table["carol"] and "inverted mask" in table["dave"]
    assert (tmp_path / "grades.csv").exists() and (tmp_path / "feedback" / "carol" / CHAPTER / "exercises.html").exists()


def test_cli_rejects_a_folder_without_submissions(tmp_path):
    (tmp_path / "alice").mkdir()
    result = run_python("-m", "autograder", "grade", str(tmp_path), "--workdir", str(tmp_path / "work"))
    assert result.returncode != 0
    assert "no submissions found" in result.stderr + result.stdout


def test_ctrl_c_stops_after_the_current_notebook_and_keeps_the_results(tmp_path):
    """Deterministic: "Grading now" is printed once the first notebook is with the (single) worker, so the
    SIGINT always lands while work is in progress; that notebook is finished and kept, the queue is not
    started, and the same command resumes with the rest (nothing graded twice)."""
    import shutil
    import signal
    import subprocess
    import sys

    from conftest import ROOT, course_env

    submissions = tmp_path / "submissions"
    for i in range(6):  # six copies of the correct demo notebook: seconds of work left when the signal lands
        shutil.copytree(demo.DEMO_DIR / "alice", submissions / f"s{i}")
    env = course_env(PYTHONUNBUFFERED="1")
    workdir = tmp_path / "work"
    command = [sys.executable, "-m", "autograder", "grade", str(submissions), "--workdir", str(workdir), "--seed", "1", "--workers", "1"]
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.startswith("Grading now"):
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-2000:]
    graded = sorted(read_summary(workdir))
    assert 1 <= len(graded) < 6, f"the notebook in progress is finished and saved, the queue is not started: {graded}"
    assert f"Interrupted after {len(graded)} of 6" in out
    assert graded[0] in (workdir / "grades.csv").read_text()
    again = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"Resuming: {len(graded)} notebook(s) already graded" in again.stdout
    assert sorted(read_summary(workdir)) == [f"s{i}" for i in range(6)]

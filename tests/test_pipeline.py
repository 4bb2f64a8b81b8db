"""End to end: real notebooks graded by the real CLI (sandboxed runs, judged in the grading process).

The corpus: the reference solution (full marks), the untouched student notebook (zero), and each typical
wrong answer of WRONG_ANSWERS (below full marks, with its diagnosis in the summary).
"""

import csv

import nbformat
import pytest

from autograder import course, demo
from conftest import run_python

CHAPTER = "02-qkv-attention"
# Which graded cells each wrong answer must fail (self_attention calls the learner's own attention).
# The visible checks only help the learner; the points are on the hidden checks.
SDPA_CELLS = {"scaled_dot_product_attention_hidden", "self_attention_hidden"}
EXPECTED_FAILURES = {
    "softmax_wrong_dim": SDPA_CELLS,
    "missing_scale": SDPA_CELLS,
    "sqrt_d_model": {"self_attention_hidden"},
    "inverted_mask": SDPA_CELLS,
    "mask_after_softmax": SDPA_CELLS,
    "k_not_transposed": SDPA_CELLS,
}


def read_summary(workdir):
    """{student: {cell id: row}}; a student's row with cell "" holds its status message or run notes."""
    rows = {}
    with (workdir / "summary.csv").open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            rows.setdefault(row["student"], {})[row["cell"]] = row
    return rows


def graded_cells(rows, student):
    return {c: r for c, r in rows[student].items() if c}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Grade every corpus submission in one CLI run; return (workdir, summary rows, stdout)."""
    submissions = tmp_path_factory.mktemp("submissions")
    workdir = tmp_path_factory.mktemp("grading")
    notebooks = {"reference": demo.filled_submission(CHAPTER), "blank": nbformat.read(course.student_notebook(CHAPTER), as_version=4)}
    for name in demo.WRONG_ANSWERS:
        notebooks[name.replace("_", "-")] = demo.filled_submission(CHAPTER, [name])
    for student, nb in notebooks.items():
        path = submissions / student / CHAPTER / "exercises.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)
    result = run_python("-m", "autograder", "grade", str(submissions), "--workdir", str(workdir), "--device", "cpu")
    assert result.returncode == 0, f"grading failed:\n{result.stdout}\n{result.stderr[-3000:]}"
    return workdir, read_summary(workdir), result.stdout


def test_reference_scores_full_marks(corpus):
    _, rows, _ = corpus
    cells = graded_cells(rows, "reference")
    assert len(cells) == 4
    lost = {c: r["message"] for c, r in cells.items() if float(r["score"]) < float(r["max_score"])}
    assert not lost, f"the reference solution lost points: {lost}"


def test_untouched_notebook_scores_zero(corpus):
    _, rows, _ = corpus
    cells = graded_cells(rows, "blank")
    assert len(cells) == 4 and sum(float(r["score"]) for r in cells.values()) == 0
    assert all("not implemented" in r["message"] for r in cells.values())


@pytest.mark.parametrize("name", list(demo.WRONG_ANSWERS))
def test_wrong_answer_loses_points_with_its_diagnosis(corpus, name):
    _, rows, _ = corpus
    cells = graded_cells(rows, name.replace("_", "-"))
    failed = {c for c, r in cells.items() if float(r["score"]) < float(r["max_score"])}
    assert failed == EXPECTED_FAILURES[name], f"{name}: failed cells {sorted(failed)}"
    diagnosis = demo.WRONG_ANSWERS[name].diagnosis
    # The hidden check of the function with the mistake names it.
    hidden = f"{demo.WRONG_ANSWERS[name].function}_hidden"
    assert diagnosis in cells[hidden]["message"], f"{name}: hidden check says {cells[hidden]['message']!r}"


def test_grades_csv_and_feedback_are_written(corpus):
    workdir, rows, stdout = corpus
    with (workdir / "grades.csv").open() as f:
        grades = {row["student_id"]: row for row in csv.DictReader(f)}
    assert set(grades) == set(rows)
    assert float(grades["reference"]["score"]) == float(grades["reference"]["max_score"]) == 13
    assert float(grades["blank"]["score"]) == 0
    for student in rows:
        html = workdir / "feedback" / student / CHAPTER / "exercises.html"
        assert html.exists(), f"no feedback for {student}"
    feedback = (workdir / "feedback" / "missing-scale" / CHAPTER / "exercises.html").read_text()
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
    import signal
    import subprocess
    import sys

    from conftest import ROOT, course_env

    env = course_env(PYTHONUNBUFFERED="1")
    workdir = tmp_path / "work"
    proc = subprocess.Popen(
        [sys.executable, "-m", "autograder", "grade", str(demo.DEMO_DIR), "--workdir", str(workdir), "--seed", "1", "--workers", "1"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    for line in proc.stdout:
        if line.startswith("Grading now"):
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-2000:]
    assert "Interrupted after 1 of 4" in out
    rows = read_summary(workdir)
    assert list(rows) == ["alice"], "the notebook in progress is finished and saved, the rest are not started"
    assert "alice" in (workdir / "grades.csv").read_text()

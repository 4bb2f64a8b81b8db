"""What a notebook's format must not cost: only code is graded, so a notebook over the size limit only because of
its outputs is graded without them, and an nbformat 3 notebook (an old Jupyter format) is converted; each with a
note in the report. Through the real CLI."""

import csv
import json

import nbformat
import pytest

from autograder.authoring import demo
from autograder.grading.submission import MAX_NOTEBOOK_BYTES
from conftest import run_python

CHAPTER = "02-qkv-attention"


def grade(submissions, workdir):
    done = run_python("-m", "autograder", "grade", str(submissions), "--workdir", str(workdir), "--device", "cpu",
                      "--seed", "3", timeout=900)
    done.workdir = workdir  # where the run's last_run.json is
    rows = {}
    with (workdir / "summary.csv").open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            rows.setdefault(row["student"], {})[row["cell"]] = row
    return done, rows


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("formats")
    submissions = root / "submissions"
    reference = demo.filled_submission(CHAPTER)
    max_score = None

    big = nbformat.from_dict(json.loads(json.dumps(reference)))
    first_code = next(c for c in big.cells if c.cell_type == "code")
    first_code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="x" * (MAX_NOTEBOOK_BYTES + 2**20))]
    old = nbformat.convert(nbformat.from_dict(json.loads(json.dumps(reference))), 3)
    huge_code = nbformat.from_dict(json.loads(json.dumps(reference)))
    huge_code.cells.append(nbformat.v4.new_code_cell("# " + "y" * (MAX_NOTEBOOK_BYTES + 2**20)))
    for student, nb, version in (("reference", reference, 4), ("big-outputs", big, 4), ("nbformat3", old, 3),
                                 ("huge-code", huge_code, 4)):
        path = submissions / student / CHAPTER / "exercises.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path, version=version)
    text = nbformat.writes(reference)
    for student, data in (("bom", b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode("utf-8")), ("utf16", text.encode("utf-16"))):
        path = submissions / student / CHAPTER / "exercises.ipynb"  # as a Windows editor may save it
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
    assert (submissions / "big-outputs" / CHAPTER / "exercises.ipynb").stat().st_size > MAX_NOTEBOOK_BYTES
    return grade(submissions, root / "work")


def test_a_notebook_too_large_only_because_of_its_outputs_is_graded_without_them(graded):
    done, rows = graded
    reference, big = rows["reference"][""], rows["big-outputs"][""]
    assert big["status"] == "graded" and big["score"] == reference["score"], (big, done.stdout[-2000:])
    assert "outputs were removed" in big["message"], big


def test_a_notebook_whose_code_alone_is_too_large_is_still_refused(graded):
    _, rows = graded
    row = rows["huge-code"][""]
    assert row["status"] == "invalid" and "code alone" in row["message"], row


def test_an_nbformat_3_notebook_is_converted_and_graded(graded):
    _, rows = graded
    reference, old = rows["reference"][""], rows["nbformat3"][""]
    assert old["status"] == "graded" and old["score"] == reference["score"], old
    assert "nbformat 3" in old["message"], old


@pytest.mark.parametrize("student, encoding", [("bom", "byte-order mark"), ("utf16", "UTF-16")])
def test_a_notebook_saved_with_a_byte_order_mark_or_as_utf16_is_graded(graded, student, encoding):
    _, rows = graded
    reference, saved = rows["reference"][""], rows[student][""]
    assert saved["status"] == "graded" and saved["score"] == reference["score"], saved
    assert encoding in saved["message"], saved


def test_the_run_does_not_call_a_notebook_graded_that_could_not_be(graded):
    done, rows = graded
    statuses = [r[""]["status"] for r in rows.values()]
    assert statuses.count("invalid") == 1 and statuses.count("graded") == 5, statuses
    assert "6 notebook(s) graded" not in done.stdout, done.stdout[-1500:]
    assert "6 notebook(s) run through the grader" in done.stdout, done.stdout[-1500:]
    # The grading phase is timed from the first notebooks handed to the workers; the wait for the workers before it
    # (the embedded cluster's start) is recorded apart, and the output says both as last_run.json holds them.
    run = json.loads((done.workdir / "last_run.json").read_text())
    assert run["seconds"] > 0 and run["waited_for_workers_s"] >= 0, run
    said = f"run through the grader in {run['seconds']:.1f} s"
    assert said in done.stdout, (said, done.stdout[-1500:])
    if run["waited_for_workers_s"] >= 0.05:
        assert f"after {run['waited_for_workers_s']:.1f} s waiting for the workers to start" in done.stdout, done.stdout[-1500:]
    assert "This run: 5 notebook(s) graded, 1 could not be graded" in done.stdout, done.stdout[-1500:]


def test_a_student_id_starting_with_a_dash_can_be_named_to_only(tmp_path):
    submissions, workdir = tmp_path / "submissions", tmp_path / "work"
    for student in ("-dash", "plain"):
        path = submissions / student / CHAPTER / "exercises.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(demo.filled_submission(CHAPTER), path)
    done = run_python("-m", "autograder", "grade", str(submissions), "--workdir", str(workdir), "--device", "cpu",
                      "--seed", "3", "--only", "-dash", timeout=900)
    assert done.returncode == 0, done.stdout[-1500:] + done.stderr[-1500:]
    with (workdir / "summary.csv").open(encoding="utf-8") as f:
        graded = {row["student"] for row in csv.DictReader(f) if row["cell"] == "" and row["status"] == "graded"}
    assert graded == {"-dash"}, graded


def test_grades_csv_says_which_zeros_are_not_real_scores(graded):
    done, rows = graded
    workdir = None
    for line in done.stdout.splitlines():
        if line.startswith("grades:"):
            workdir = line.split(":", 1)[1].strip().rsplit("/", 1)[0]
    with open(f"{workdir}/grades.csv", encoding="utf-8") as f:
        grades = {(r["student_id"], r["assignment"]): r for r in csv.DictReader(f)}
    assert grades[("reference", CHAPTER)]["status"] == "graded"
    assert grades[("huge-code", CHAPTER)]["status"] == "invalid" and float(grades[("huge-code", CHAPTER)]["score"]) == 0

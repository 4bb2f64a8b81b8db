"""Resubmissions, through the real CLI: every submitted version is kept (history/), a resubmission that cannot be
graded never replaces a graded one silently, identical content keeps its first submission time (so re-exporting a
folder makes nobody late), and every run says what changed since the last one."""

import csv
import json
import os
from datetime import datetime, timezone

import nbformat
import pytest

from autograder import registry
from autograder.authoring import demo
from conftest import run_python

CHAPTER = "02-qkv-attention"
FULL = 13.0
DUE = '[due]\n"02-qkv-attention" = "2025-03-01 23:59"\n[late_penalty]\npercent_per_day = 10\n'
BEFORE_DUE = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc).timestamp()
AFTER_DUE = datetime(2025, 3, 4, 12, 0, tzinfo=timezone.utc).timestamp()  # 3 started days late


def grade(subs, workdir, *extra):
    return run_python("-m", "autograder", "grade", str(subs), "--workdir", str(workdir), "--device", "cpu", "--seed", "4",
                      "--workers", "2", "--course-config", str(workdir.parent / "course.toml"), *map(str, extra), timeout=900)


def rows(path):
    if not path.exists():  # (a file this grader writes; missing on code before it, so the tests fail there one by one)
        return []
    with path.open(encoding="utf-8") as f:
        return list(csv.DictReader(f))


def grades(workdir):
    return {r["student_id"]: r for r in rows(workdir / "grades.csv")}


def notebook_row(workdir, student):
    return next(r for r in rows(workdir / "summary.csv") if r["student"] == student and r["cell"] == "")


def write(path, data: bytes, when):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (when, when))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Four runs over one class; what each printed and what the working directory held after it."""
    root = tmp_path_factory.mktemp("history")
    (root / "course.toml").write_text(DUE)
    subs, workdir = root / "subs", root / "work"
    reference = nbformat.writes(demo.filled_submission(CHAPTER)).encode()
    blank = registry.student_notebook(CHAPTER).read_bytes()  # the notebook as released: nothing answered
    path = {s: subs / s / CHAPTER / "exercises.ipynb" for s in ("alice", "bob", "carol")}
    for student in path:
        write(path[student], reference, BEFORE_DUE)
    out = {"first": grade(subs, workdir)}
    out["submitted_alice_first"] = (workdir / "submitted" / "alice" / CHAPTER / "exercises.ipynb").read_bytes()

    # alice: a truncated resubmission; bob: a worse but valid one; carol: the same bytes, re-exported late.
    write(path["alice"], reference[: len(reference) // 2], AFTER_DUE)
    write(path["bob"], blank, BEFORE_DUE)
    write(path["carol"], reference, AFTER_DUE)
    out["second"] = grade(subs, workdir)
    out["grades_second"] = grades(workdir)
    out["alice_second"] = notebook_row(workdir, "alice")
    out["changes_second"] = rows(workdir / "changes.csv")
    out["submitted_alice_second"] = (workdir / "submitted" / "alice" / CHAPTER / "exercises.ipynb").read_bytes()
    versions = workdir / "history" / "alice" / CHAPTER / "versions.json"
    out["versions_alice"] = json.loads(versions.read_text()) if versions.exists() else []

    out["third"] = grade(subs, workdir)  # nothing changed: nothing is run again, alice is still held
    out["grades_third"] = grades(workdir)
    out["take_latest"] = grade(subs, workdir, "--only", "alice", "--take-latest")
    out["grades_latest"] = grades(workdir)
    out["autograded_alice_latest"] = (workdir / "autograded" / "alice" / CHAPTER).exists()
    # A fix to the chapter's hidden checks since carol was graded: her record says it was graded with other checks.
    record = workdir / "results" / "carol" / f"{CHAPTER}.json"
    data = json.loads(record.read_text())
    data["release"] = data["release"].split("+checks:")[0] + "+checks:0000000000000000"  # (on older code: another release)
    record.write_text(json.dumps(data))
    out["checks_fixed"] = grade(subs, workdir)
    out["changes_checks_fixed"] = rows(workdir / "changes.csv")
    # carol leaves the class (her folder is removed): her result stays, and says so.
    (path["carol"]).unlink()
    for folder in (path["carol"].parent, path["carol"].parent.parent):
        folder.rmdir()
    out["carol_gone"] = grade(subs, workdir)
    out["grades_gone"] = grades(workdir)
    out["carol_gone_row"] = notebook_row(workdir, "carol")
    out["workdir"] = workdir
    out["reference"] = reference
    return out


def test_a_resubmission_that_cannot_be_graded_does_not_replace_the_graded_version(runs):
    second = runs["second"]
    assert runs["first"].returncode == 0, runs["first"].stdout[-2000:] + runs["first"].stderr[-2000:]
    assert second.returncode == 1, "a resubmission not graded: the run says not everything was graded"
    alice = runs["grades_second"]["alice"]
    assert float(alice["raw_score"]) == FULL and alice["status"] == "graded", alice
    assert "resubmitted" in runs["alice_second"]["message"] and "13/13, stands" in runs["alice_second"]["message"], runs["alice_second"]
    assert "alice/02-qkv-attention: held" in second.stdout and "--take-latest" in second.stdout, second.stdout[-3000:]
    assert runs["submitted_alice_second"] == runs["submitted_alice_first"], "formgrader must show the version whose result stands"
    assert runs["alice_second"]["submitted_utc"].startswith("2025-03-01"), "the standing version's time, not the resubmission's"


def test_every_version_is_kept_with_when_it_came(runs):
    versions = runs["versions_alice"]
    assert len(versions) == 2, versions
    first, second = versions
    assert first["status"] == "graded" and first["score"] == FULL and not first["held"]
    assert second["held"] and second["status"] == "invalid" and second["submitted"].startswith("2025-03-04")
    for v in versions:
        kept = runs["workdir"] / v["copy"]
        assert kept.is_file() and v["received"], v
    assert (runs["workdir"] / first["copy"]).read_bytes() == runs["reference"]


def test_identical_content_keeps_its_first_submission_time(runs):
    carol = runs["grades_second"]["carol"]
    assert carol["timestamp"].startswith("2025-03-01") and float(carol["late_submission_penalty"]) == 0.0, carol
    assert not any(c["student"] == "carol" and c["change"] == "regraded" for c in runs["changes_second"]), "same bytes: not regraded"
    assert "first submission's time counts" in notebook_row(runs["workdir"], "carol")["message"]


def test_each_run_says_what_changed_since_the_last(runs):
    changes = {c["student"]: c for c in runs["changes_second"]}
    assert changes["bob"]["change"] == "regraded" and changes["bob"]["before"] == "graded 13/13" and changes["bob"]["after"] == "graded 0/13"
    assert changes["bob"]["note"] == "a new version"
    assert changes["alice"]["change"] == "held" and changes["alice"]["after"] == "graded 13/13"
    assert "bob/02-qkv-attention: regraded     graded 13/13 -> graded 0/13" in runs["second"].stdout
    first = runs["first"].stdout
    assert "Changes since the last run: 3 new" in first, first[-2000:]


def test_a_held_resubmission_is_not_run_again_and_still_stands(runs):
    third = runs["third"]
    assert third.returncode == 1 and "Resuming: 3 notebook(s)" in third.stdout, third.stdout[-2000:]
    assert float(runs["grades_third"]["alice"]["raw_score"]) == FULL
    assert "alice/02-qkv-attention: held" in third.stdout


def test_the_instructor_can_take_the_latest_version(runs):
    latest = runs["take_latest"]
    assert latest.returncode == 1, latest.stdout[-2000:]
    alice = runs["grades_latest"]["alice"]
    assert alice["status"] == "invalid" and float(alice["raw_score"]) == 0.0, alice
    assert not runs["autograded_alice_latest"], "formgrader must not show the verdicts of a version that no longer counts"
    assert float(runs["grades_latest"]["bob"]["raw_score"]) == 0.0 and float(runs["grades_latest"]["carol"]["raw_score"]) == FULL


def test_a_fix_to_the_hidden_checks_regrades_what_was_graded_with_the_old_ones(runs):
    fixed = runs["checks_fixed"]
    assert "Resuming: 2 notebook(s)" in fixed.stdout, fixed.stdout[-2000:]
    (change,) = runs["changes_checks_fixed"]
    assert change["student"] == "carol" and change["change"] == "regraded", change
    assert change["note"] == "same content, the course's notebook or checks changed" and change["after"] == "graded 13/13"


def test_a_graded_student_no_longer_in_the_folder_keeps_the_score_with_status_gone(runs):
    gone = runs["carol_gone"]
    assert gone.returncode == 1, "alice's invalid notebook still counts as not graded"
    assert "gone        1 graded notebook(s) no longer in the folder (carol/02-qkv-attention)" in gone.stdout, gone.stdout[-2000:]
    carol = runs["grades_gone"]["carol"]
    assert carol["status"] == "gone" and float(carol["raw_score"]) == FULL, carol
    assert runs["carol_gone_row"]["status"] == "gone" and "no folder carol/ any more" in runs["carol_gone_row"]["message"]


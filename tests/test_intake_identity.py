"""Chapter identity and archives at intake (issue 20, items 3 and 4).

A notebook is graded as the chapter its cells belong to, wherever it was put, with a note; two different notebooks
claiming one chapter are `ambiguous`; a notebook of no chapter is `unrecognised`. Archives (`alice.zip`,
`alice/submission.zip`, `alice/02-qkv-attention.zip`, tar too) are unpacked safely into the working directory and
graded with a note, or refused with status `archive`, the reason and the command to unpack them.
Through the real CLI (one small grading run), then intake's rules one by one on `intake.discover`.
"""

import csv
import io
import json
import os
import shutil
import tarfile
import zipfile

import nbformat
import pytest

from autograder import registry
from autograder.authoring import demo
from autograder.grading import intake
from conftest import run_python

A, B = "02-qkv-attention", "03-worked-examples"


def write_nb(path, nb):
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def nb_text(nb):
    return nbformat.writes(nb)


def blank(chapter):
    return nbformat.read(registry.student_notebook(chapter), as_version=4)


def make_zip(path, members):
    """members: {name: text}."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    return path


def cli_grade(submissions, workdir):
    return run_python("-m", "autograder", "grade", str(submissions), "--workdir", str(workdir), "--device", "cpu",
                      "--seed", "5", timeout=900)


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def rows_of(workdir):
    """{(student, chapter): the notebook's or skipped entry's row of summary.csv}."""
    return {(r["student"], r["chapter"]): r for r in read_csv(workdir / "summary.csv") if r["cell"] == ""}


def grades_of(workdir):
    return {(r["student_id"], r["assignment"]): r for r in read_csv(workdir / "grades.csv")}


# --- Through the CLI --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """alice: a chapter-03 notebook in her 02 folder. bob: two different 03 notebooks (one in the 02 folder).
    carol: a notebook of no chapter in her 02 folder. dave.zip: his whole folder zipped. erin.zip: unsafe."""
    root = tmp_path_factory.mktemp("identity")
    subs, workdir = root / "submissions", root / "work"
    write_nb(subs / "alice" / A / "exercises.ipynb", demo.filled_submission(B))
    write_nb(subs / "bob" / B / "exercises.ipynb", demo.filled_submission(B))
    other = demo.filled_submission(B)
    other.cells.append(nbformat.v4.new_markdown_cell("my second try"))
    write_nb(subs / "bob" / A / "exercises.ipynb", other)
    write_nb(subs / "carol" / A / "exercises.ipynb",
             nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import torch\nx = torch.ones(3)\nprint(x)")]))
    make_zip(subs / "dave.zip", {f"dave/{A}/exercises.ipynb": nb_text(demo.filled_submission(A)), "__MACOSX/._dave": "x"})
    make_zip(subs / "erin.zip", {f"../{A}/exercises.ipynb": nb_text(demo.filled_submission(A))})
    first = cli_grade(subs, workdir)
    return dict(root=root, subs=subs, workdir=workdir, first=first, rows=rows_of(workdir), grades=grades_of(workdir))


def _out(result):
    return f"\n--- stdout:\n{result.stdout[-3000:]}\n--- stderr:\n{result.stderr[-2000:]}"


def test_a_notebook_in_another_chapters_folder_is_graded_as_its_own_chapter(graded):
    rows = graded["rows"]
    assert ("alice", B) in rows, f"alice's chapter-03 work was not graded as 03: {sorted(rows)}" + _out(graded["first"])
    row = rows[("alice", B)]
    assert row["status"] == "graded" and float(row["score"]) == float(row["max_score"]), row
    assert f"found in alice/{A}/, its cells are those of {B}" in row["message"] + " ".join(json.loads(
        (graded["workdir"] / "results" / "alice" / f"{B}.json").read_text()).get("intake", {}).get("notes", [])), row
    assert rows[("alice", A)]["status"] == "missing" and f"is one of {B}" in rows[("alice", A)]["message"], rows[("alice", A)]


def test_two_different_notebooks_of_one_chapter_are_ambiguous_and_none_is_graded(graded):
    rows = graded["rows"]
    row = rows[("bob", B)]
    assert row["status"] == "ambiguous", row
    assert f"bob/{B}/exercises.ipynb" in row["message"] and f"bob/{A}/exercises.ipynb" in row["message"], row
    assert not (graded["workdir"] / "results" / "bob").exists(), "nothing of bob's was graded"
    assert rows[("bob", A)]["status"] == "missing", rows[("bob", A)]


def test_a_notebook_of_no_chapter_is_unrecognised_not_a_zero(graded):
    row = graded["rows"][("carol", A)]
    assert row["status"] == "unrecognised" and "download the chapter's exercises.ipynb again" in row["message"], row
    assert graded["grades"][("carol", A)]["status"] == "unrecognised", graded["grades"][("carol", A)]


def test_a_zipped_student_folder_is_unpacked_and_graded_with_a_note(graded):
    rows, grades = graded["rows"], graded["grades"]
    assert ("dave", A) in rows, f"dave.zip was not graded: {sorted(rows)}" + _out(graded["first"])
    row = rows[("dave", A)]
    assert row["status"] == "graded" and float(row["score"]) == 13.0, row
    assert "unpacked from dave.zip" in graded["first"].stdout + row["message"] + json.dumps(json.loads(
        (graded["workdir"] / "results" / "dave" / f"{A}.json").read_text()).get("intake", {})), row
    assert grades[("dave", A)]["status"] == "graded" and float(grades[("dave", A)]["score"]) == 13.0
    unpacked = list((graded["workdir"] / "unpacked").rglob("exercises.ipynb"))
    assert unpacked and not list((graded["workdir"] / "unpacked").rglob("__MACOSX")), unpacked


def test_an_unsafe_archive_is_refused_with_the_reason_and_the_command(graded):
    rows, grades = graded["rows"], graded["grades"]
    row = rows[("erin", "")]
    assert row["status"] == "archive" and "leads outside the archive" in row["message"] and "unzip -d" in row["message"], row
    assert grades[("erin", A)]["status"] == "archive", "erin is in grades.csv, with the archive's status"
    assert not (graded["root"] / A).exists(), "nothing was written outside the working directory"


def test_grading_again_is_idempotent_and_a_changed_archive_replaces_the_old_one(graded):
    again = cli_grade(graded["subs"], graded["workdir"])
    assert again.returncode == 1, _out(again)
    assert "already graded" in again.stdout and "grading the other 0" in again.stdout, "nothing changed: nothing regraded" + _out(again)
    make_zip(graded["subs"] / "dave.zip", {f"{A}/exercises.ipynb": nb_text(demo.filled_submission(A, ["missing_scale"]))})
    changed = cli_grade(graded["subs"], graded["workdir"])
    rows = rows_of(graded["workdir"])
    assert float(rows[("dave", A)]["score"]) == 8.0, rows[("dave", A)]
    copies = list((graded["workdir"] / "unpacked").glob("dave.zip.*"))
    assert len(copies) == 1, f"no stale copy of the older dave.zip: {copies}" + _out(changed)


# --- Chapter identity, rule by rule -----------------------------------------------------------------------


def discover(folder, tmp_path):
    subs, skipped, _ = intake.discover(folder, unpack_into=tmp_path / "unpacked")
    return {(s.student, s.chapter): s for s in subs}, {(k.student, k.chapter): k for k in skipped}


def test_a_few_cells_of_another_chapter_do_not_move_a_notebook(tmp_path):
    nb = demo.filled_submission(A)
    foreign = [c for c in demo.filled_submission(B).cells if intake._grade_id(c) in ("scores", "scores_hidden")]
    nb.cells += foreign  # two cells pasted from chapter 03, with their metadata
    write_nb(tmp_path / "s" / "alice" / A / "exercises.ipynb", nb)
    subs, skipped = discover(tmp_path / "s", tmp_path)
    assert set(subs) == {("alice", A)} and not skipped and not subs[("alice", A)].notes


def test_generic_ids_alone_match_no_chapter(tmp_path):
    generic = [c for c in blank(A).cells if intake._grade_id(c) in ("imports", "check_helpers")]
    assert len(generic) == 2
    write_nb(tmp_path / "s" / "alice" / "notes.ipynb", nbformat.v4.new_notebook(cells=generic))
    subs, skipped = discover(tmp_path / "s", tmp_path)
    assert not subs and skipped[("alice", "")].status == "unrecognised", skipped


@pytest.mark.parametrize("kind", ["blank", "no-nbgrader-metadata", "malformed", "nbformat-3"])
def test_a_genuine_or_unreadable_notebook_stays_its_folders_chapter(tmp_path, kind):
    path = tmp_path / "s" / "alice" / A / "exercises.ipynb"
    if kind == "blank":
        write_nb(path, blank(A))  # all the cells, no answers: graded (0 points), as before
    elif kind == "no-nbgrader-metadata":
        nb = demo.filled_submission(A)
        for cell in nb.cells:
            cell.metadata = {}
        write_nb(path, nb)  # matched by the functions it defines
    elif kind == "malformed":
        path.parent.mkdir(parents=True)
        path.write_text('{"cells": [')  # graded later as invalid, with the parse error
    else:
        path.parent.mkdir(parents=True)
        nbformat.write(demo.filled_submission(A), path, version=3)
    subs, skipped = discover(tmp_path / "s", tmp_path)
    assert set(subs) == {("alice", A)} and not skipped, (subs, skipped)


def test_a_loose_notebook_and_its_identical_copy_in_the_folder_are_graded_once(tmp_path):
    write_nb(tmp_path / "s" / "alice" / A / "exercises.ipynb", demo.filled_submission(A))
    write_nb(tmp_path / "s" / "alice" / "exercises.ipynb", demo.filled_submission(A))
    subs, skipped = discover(tmp_path / "s", tmp_path)
    assert not skipped and subs[("alice", A)].path.parent.name == A
    assert any("the same notebook is also at alice/exercises.ipynb" in n for n in subs[("alice", A)].notes)


# --- Archives, rule by rule -------------------------------------------------------------------------------


def tar_with(path, build):
    with tarfile.open(path, "w:gz") as tf:
        build(tf)
    return path


def _tar_file(tf, name, data=b"x", **attrs):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in attrs.items():
        setattr(info, key, value)
    tf.addfile(info, io.BytesIO(data) if info.isfile() else None)


def _zip_symlink(path):
    with zipfile.ZipFile(path, "w") as zf:
        info = zipfile.ZipInfo(f"{A}/exercises.ipynb")
        info.create_system = 3
        info.external_attr = (0o120777 << 16)
        zf.writestr(info, "/etc/passwd")
    return path


UNSAFE = {
    "absolute": (lambda p: make_zip(p / "alice.zip", {f"/tmp/{A}/exercises.ipynb": "{}"}), "absolute path"),
    "dotdot": (lambda p: make_zip(p / "alice.zip", {"../../evil.txt": "x"}), "leads outside"),
    "zip-symlink": (lambda p: _zip_symlink(p / "alice.zip"), "symbolic link"),
    "tar-symlink": (lambda p: tar_with(p / "alice.tar.gz", lambda tf: _tar_file(tf, "link", b"", type=tarfile.SYMTYPE, linkname="/etc/passwd")), "symbolic link"),
    "tar-hardlink": (lambda p: tar_with(p / "alice.tgz", lambda tf: _tar_file(tf, "link", b"", type=tarfile.LNKTYPE, linkname="/etc/passwd")), "hard link"),
    "tar-device": (lambda p: tar_with(p / "alice.tar.gz", lambda tf: _tar_file(tf, "fifo", b"", type=tarfile.FIFOTYPE)), "not a regular file"),
    "corrupt": (lambda p: (p / "alice.zip").write_bytes(b"PK\x03\x04 not really a zip") and p / "alice.zip", "could not be unpacked"),
    "truncated-tar": (lambda p: (p / "alice.tar.gz").write_bytes(b"\x1f\x8b\x08\x00garbage"), "could not be unpacked"),
}


@pytest.mark.parametrize("case", list(UNSAFE))
def test_an_unsafe_or_corrupt_archive_is_refused_with_the_reason(tmp_path, case):
    build, fragment = UNSAFE[case]
    (tmp_path / "s").mkdir()
    build(tmp_path / "s")
    subs, skipped = discover(tmp_path / "s", tmp_path)
    entry = skipped.get(("alice", ""))
    assert not subs and entry and entry.status == "archive", (subs, skipped)
    assert fragment in entry.message and ("unzip -d" in entry.message or "tar -xf" in entry.message), entry.message
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "s" / "evil.txt").exists()
    assert not [p for p in (tmp_path / "unpacked").rglob("*") if p.is_file()], "nothing of it was unpacked"


def test_an_archive_over_the_limits_is_refused(tmp_path, monkeypatch):
    make_zip(tmp_path / "s" / "many.zip", {f"f{i}.txt": "x" for i in range(12)})
    make_zip(tmp_path / "s" / "bomb.zip", {"zeros.txt": "0" * 200_000})  # a few hundred bytes compressed
    monkeypatch.setattr(intake, "MAX_ARCHIVE_MEMBERS", 10)
    monkeypatch.setattr(intake, "MAX_UNPACKED_BYTES", 100_000)
    _, skipped = discover(tmp_path / "s", tmp_path)
    assert "more than 10 members" in skipped[("many", "")].message
    assert "would unpack to more than" in skipped[("bomb", "")].message


def test_an_archive_whose_declared_size_lies_is_refused(tmp_path):
    data = b"0" * 100_000
    path = make_zip(tmp_path / "s" / "liar.zip", {"zeros.txt": data})
    raw = bytearray(path.read_bytes())
    size = len(data).to_bytes(4, "little")
    assert raw.count(size) == 2  # the local header and the central directory
    path.write_bytes(bytes(raw).replace(size, (10).to_bytes(4, "little")))
    _, skipped = discover(tmp_path / "s", tmp_path)
    assert skipped[("liar", "")].status == "archive" and "could not be unpacked" in skipped[("liar", "")].message


def test_archives_inside_a_students_folder_are_unpacked_with_a_note(tmp_path):
    make_zip(tmp_path / "s" / "alice" / "submission.zip", {f"{A}/exercises.ipynb": nb_text(demo.filled_submission(A)),
                                                           ".hidden": "x", f"{A}/.ipynb_checkpoints/x.ipynb": "{}"})
    make_zip(tmp_path / "s" / "bob" / f"{A}.zip", {"exercises.ipynb": nb_text(demo.filled_submission(A))})
    tar = tmp_path / "s" / "carol.tar.gz"
    with tarfile.open(tar, "w:gz") as tf:
        data = nb_text(demo.filled_submission(B)).encode()
        _tar_file(tf, f"carol/{B}/exercises.ipynb", data)
    make_zip(tmp_path / "s" / "dave.zip", {"inner.zip": (tmp_path / "s" / "alice" / "submission.zip").read_bytes()})
    subs, skipped = discover(tmp_path / "s", tmp_path)
    assert set(subs) == {("alice", A), ("bob", A), ("carol", B)}, (subs, skipped)
    assert "unpacked from alice/submission.zip" in subs[("alice", A)].notes
    assert "unpacked from bob/02-qkv-attention.zip" in subs[("bob", A)].notes
    assert "unpacked from carol.tar.gz" in subs[("carol", B)].notes
    assert all(str(s.path).startswith(str(tmp_path / "unpacked")) for s in subs.values())
    nested = skipped[("dave", "")]
    assert nested.status == "archive" and "not unpacked again" in nested.message, nested
    assert not list((tmp_path / "unpacked").rglob(".hidden")) and not list((tmp_path / "unpacked").rglob(".ipynb_checkpoints"))


def test_a_folder_and_an_archive_of_the_same_chapter(tmp_path):
    """Identical: graded once, with a note. Different: ambiguous, both listed, neither graded."""
    write_nb(tmp_path / "s" / "alice" / A / "exercises.ipynb", demo.filled_submission(A))
    make_zip(tmp_path / "s" / "alice.zip", {f"alice/{A}/exercises.ipynb": (tmp_path / "s" / "alice" / A / "exercises.ipynb").read_text()})
    write_nb(tmp_path / "s" / "bob" / A / "exercises.ipynb", demo.filled_submission(A))
    make_zip(tmp_path / "s" / "bob.zip", {f"{A}/exercises.ipynb": nb_text(demo.filled_submission(A, ["missing_scale"]))})
    subs, skipped = discover(tmp_path / "s", tmp_path)
    assert subs[("alice", A)].path == tmp_path / "s" / "alice" / A / "exercises.ipynb"
    assert any("also at alice.zip:" in n for n in subs[("alice", A)].notes), subs[("alice", A)].notes
    assert ("bob", A) not in subs and skipped[("bob", A)].status == "ambiguous"
    assert f"bob/{A}/exercises.ipynb" in skipped[("bob", A)].message and f"bob.zip:{A}/exercises.ipynb" in skipped[("bob", A)].message


def test_without_a_place_to_unpack_an_archive_gets_the_command(tmp_path):
    make_zip(tmp_path / "s" / "alice.zip", {f"{A}/exercises.ipynb": nb_text(demo.filled_submission(A))})
    subs, skipped, _ = intake.discover(tmp_path / "s")
    assert not subs and skipped[0].status == "archive" and "unzip -d" in skipped[0].message, skipped


def test_unpacking_is_idempotent_and_leaves_nothing_stale(tmp_path):
    archive = make_zip(tmp_path / "alice.zip", {"a.txt": "one", "old.txt": "old"})
    first = intake.unpack(archive, tmp_path / "into")
    assert intake.unpack(archive, tmp_path / "into") == first, "unchanged: the same folder is reused"
    make_zip(archive, {"a.txt": "two"})
    second = intake.unpack(archive, tmp_path / "into")
    assert second != first and not first.exists() and sorted(p.name for p in second.iterdir()) == ["a.txt"]
    assert os.stat(second / "a.txt").st_mtime == pytest.approx(archive.stat().st_mtime, abs=1), "the archive's time"
    shutil.rmtree(tmp_path / "into")


def test_an_archive_given_as_the_class_folder_gets_the_command_to_unpack_it(tmp_path):
    archive = tmp_path / "class.zip"
    archive.write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty zip
    done = run_python("-m", "autograder", "grade", str(archive), "--workdir", str(tmp_path / "work"), "--device", "cpu")
    assert done.returncode == 2 and f"unzip -d {tmp_path / 'class'} {archive}" in done.stderr, done.stderr[-1000:]

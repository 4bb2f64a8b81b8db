"""`python -m autograder check` (autograder.grading.check): the grader's hidden checks on one notebook, without the
sandbox, anywhere; and chapter 03's rule (no softmax built-in in exercises 3-4 only) as the grader enforces it.
(Its agreement with the sandboxed grade on the pipeline's corpus is in test_pipeline.py.)"""

import os
import shutil
import subprocess
import sys

import nbformat
import pytest

from autograder import registry
from autograder.authoring import demo
from autograder.grading import check, notebook
from conftest import ROOT, course_env
from solutions import ch03_worked_examples as ref03

CH03 = "03-worked-examples"


def with_cells(chapter, **sources):
    """The reference submission of a chapter with some solution cells (by grade id) replaced."""
    nb = demo.filled_submission(chapter)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in sources:
            cell.source = sources[gid]
    return nb


SOFTMAX_ROWS = "import torch\nweights = torch.softmax(torch.tensor(scaled, dtype=torch.float64), dim=-1).tolist()\n"
SOFTMAX_COLUMNS = "import torch\nweights = torch.softmax(torch.tensor(scaled, dtype=torch.float64), dim=0).tolist()\n"
RAISES = "import torch\nweights = torch.softmax(torch.tensor(scaled, dtype=torch.float64), dim=5).tolist()\n"


def _attention_steps_with_builtin():
    source = demo.reference_source(CH03, "attention_steps")
    assert "stable_softmax(" in source, "the reference attention_steps no longer calls stable_softmax: update this test"
    return source.replace("stable_softmax(", "torch.softmax(", 1)


@pytest.fixture(scope="module")
def ch03(tmp_path_factory):
    """`check` on chapter 03 notebooks (one seed): typed weights computed with torch.softmax along the rows (right),
    along the columns (wrong), and a weights cell that raises; attention_steps calling torch.softmax (refused)."""
    folder = tmp_path_factory.mktemp("ch03")
    notebooks = {
        "rows": with_cells(CH03, weights=SOFTMAX_ROWS, attention_steps=_attention_steps_with_builtin()),
        "columns": with_cells(CH03, weights=SOFTMAX_COLUMNS),
        "raises": with_cells(CH03, weights=RAISES),
    }
    results = {}
    for name, nb in notebooks.items():
        path = folder / f"{name}.ipynb"
        nbformat.write(nb, path)
        results[name] = {c.grade_id: c for c in check.check(path, seed=11).cells}
    return results


def test_ch03_typed_answer_computed_with_softmax_keeps_its_points(ch03):
    """The notebook's rule forbids the softmax built-in in exercises 3-4 only: typed answers computed with it keep
    their points (before, the guard switched softmax off for the whole notebook: 0 points, "not defined")."""
    weights = ch03["rows"]["weights_hidden"]
    assert weights.score == weights.max_score, weights.message
    assert ch03["rows"]["output_hidden"].score == ch03["rows"]["output_hidden"].max_score


def test_ch03_rule_still_refuses_the_builtin_in_attention_steps(ch03):
    steps = ch03["rows"]["attention_steps_hidden"]
    assert steps.score == 0 and "softmax" in steps.message, steps.message


def test_ch03_typed_softmax_along_the_wrong_dimension_fails_with_its_slip(ch03):
    weights = ch03["columns"]["weights_hidden"]
    assert weights.score == 0
    assert "softmax over the columns" in weights.message, weights.message
    # The message names the entries that are off, never the right values.
    for value in ref03.your_turn_answers()["weights"].flatten().tolist():
        assert f"{value:.2f}" not in weights.message and f"{value:.3f}" not in weights.message, weights.message


def test_ch03_a_cell_that_raised_says_why(ch03):
    weights = ch03["raises"]["weights_hidden"]
    assert weights.score == 0
    assert "IndexError" in weights.message and "stopped with" in weights.message, weights.message
    assert "assign it in the answer cell" not in weights.message, weights.message


def test_guard_groups_name_the_exercises_whose_rule_forbids_less():
    checks = __import__(f"autograder.checks.{registry.module_name(CH03)}", fromlist=["CHECKS"])
    cells = [{"kind": "probe", "probe": gid} for gid in checks.CHECKS]
    assert notebook.guard_groups(cells, checks) == [{"scores_hidden", "scaled_hidden", "weights_hidden", "output_hidden"}]
    only_functions = [c for c in cells if c["probe"].endswith("steps_hidden")]
    assert notebook.guard_groups(only_functions, checks) == []


def _cli(args, tmp_path, **env):
    return subprocess.run([sys.executable, "-m", "autograder", "check", *args], cwd=tmp_path, env=course_env(**env),
                          capture_output=True, text=True, timeout=300)


def test_check_runs_outside_any_class_folder_without_bubblewrap(tmp_path):
    """A notebook in a folder of its own, PATH without bwrap (only this Python's folder): the verdicts, points and
    seed are printed, exit status 0, and `--seed` repeats the same run."""
    nb = demo.filled_submission("02-qkv-attention", ["missing_scale"])
    path = tmp_path / "exercises.ipynb"
    nbformat.write(nb, path)
    bin_only = str(tmp_path / "bin")
    os.mkdir(bin_only)
    os.symlink(sys.executable, os.path.join(bin_only, "python"))
    env = {"PATH": bin_only}
    assert shutil.which("bwrap", path=bin_only) is None
    first = _cli([str(path), "--seed", "4"], tmp_path, **env)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "seed 4" in first.stdout and "without the grading sandbox" in first.stdout
    assert "missing scale" in first.stdout and "failed, 0/" in first.stdout and "passed" in first.stdout
    total = [line for line in first.stdout.splitlines() if line.startswith("Total: ")]
    assert total and total[0] != "Total: 13/13", first.stdout
    again = check.render(check.check(path, seed=4), path)  # in-process: the same seed gives the same run
    assert again.splitlines()[2:] == first.stdout.splitlines()[2:]


def test_check_refuses_what_it_cannot_check_in_one_line(tmp_path, capsys):
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{not json")
    other = tmp_path / "other.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), other)
    for path, words in ((broken, "not a valid notebook"), (other, "no chapter's exercises"), (tmp_path / "none.ipynb", "cannot be read")):
        status = check.main(path)
        out, err = capsys.readouterr()
        assert status == 2, (path, out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0] and not out, err

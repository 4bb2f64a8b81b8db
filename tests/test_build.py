"""Generated files are in sync with their sources, and the student notebook gives nothing away."""

import inspect
import json

import nbformat
import pytest

from autograder.authoring import build, demo
from autograder import registry
from solutions import ch02_qkv_attention as ref

CHAPTER = "02-qkv-attention"
STALE = "is stale: run `make notebooks` (python -m autograder build) and commit the result"


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    build.build_student_notebooks(tmp_path_factory.mktemp("work"), out_root=out)
    return out


def test_student_notebooks_are_in_sync_with_instructor_sources(regenerated):
    for chapter_id in registry.graded_chapters():
        committed = registry.student_notebook(chapter_id)
        fresh = regenerated / "chapters" / chapter_id / f"{registry.NOTEBOOK}.ipynb"
        assert committed.exists(), f"{committed} is missing: run `make notebooks`"
        assert committed.read_text(encoding="utf-8") == fresh.read_text(encoding="utf-8"), f"{committed} {STALE}"


def test_demo_submissions_are_in_sync(tmp_path):
    for fresh in demo.write_demo(tmp_path):
        committed = demo.DEMO_DIR / fresh.relative_to(tmp_path)
        assert committed.exists(), f"{committed} is missing: run `make notebooks`"
        assert json.loads(committed.read_text()) == json.loads(fresh.read_text()), f"{committed} {STALE}"


def test_instructor_solutions_are_the_reference_functions():
    nb = build.instructor_notebook(CHAPTER)
    solution_cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    assert [c.metadata.nbgrader.grade_id for c in solution_cells] == [
        "stable_softmax", "scaled_dot_product_attention", "self_attention", "dot_product_variance"
    ]
    for cell in solution_cells:
        without_markers = "\n".join(line for line in cell.source.splitlines() if "### BEGIN SOLUTION" not in line and "### END SOLUTION" not in line)
        reference = inspect.getsource(getattr(ref, cell.metadata.nbgrader.grade_id)).rstrip("\n")
        assert without_markers == reference, f"solution cell {cell.metadata.nbgrader.grade_id} drifted from solutions/"


def test_student_notebook_hides_solutions_and_hidden_checks():
    nb = nbformat.read(registry.student_notebook(CHAPTER), as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    for secret in ["BEGIN SOLUTION", "BEGIN HIDDEN TESTS", "check_scaled_dot_product_attention", "x.amax(", "masked_fill(~mask"]:
        assert secret not in text, f"the student notebook reveals {secret!r}"
    solution_cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    assert all("raise NotImplementedError()" in c.source for c in solution_cells)
    points = sum(c.metadata.nbgrader.get("points", 0) for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade"))
    assert points == 13


def test_points_announced_in_headings_match_the_graded_cells():
    """'## 2. ... (5 points)' must equal the points of the graded cells up to the next heading."""
    import re

    nb = nbformat.read(registry.student_notebook(CHAPTER), as_version=4)
    sections = []  # [announced points, points of the cells in the section]
    for cell in nb.cells:
        heading = re.match(r"^## .*\((\d+) points?\)", cell.source) if cell.cell_type == "markdown" else None
        if heading:
            sections.append([int(heading.group(1)), 0])
        elif cell.metadata.get("nbgrader", {}).get("grade"):
            assert sections, f"graded cell {cell.metadata.nbgrader.grade_id} comes before any exercise heading"
            sections[-1][1] += cell.metadata.nbgrader.points
    assert len(sections) == 4
    assert all(announced == actual for announced, actual in sections), f"(announced, actual) per section: {sections}"


def test_visible_checks_do_not_import_the_course():
    """Visible checks must run with torch alone: no import of solutions or autograder in the student notebook."""
    nb = nbformat.read(registry.student_notebook(CHAPTER), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert "import solutions" not in cell.source and "from solutions" not in cell.source
            assert "from autograder" not in cell.source and "import autograder" not in cell.source


def test_solution_source_wraps_the_body_after_the_docstring():
    source = build.solution_source(ref, "stable_softmax")
    lines = source.splitlines()
    begin, end = lines.index("    ### BEGIN SOLUTION"), lines.index("    ### END SOLUTION")
    assert '"""' in "\n".join(lines[:begin]), "the docstring stays visible"
    assert "x_max = x.amax" in "\n".join(lines[begin:end])
    assert end == len(lines) - 1


@pytest.mark.parametrize(
    "cells,message",
    [
        ("```{code-cell} ipython3\n:kind: solution\n:grade_id: a\nx = 1\n```\n\n```{code-cell} ipython3\n:kind: solution\n:grade_id: a\ny = 1\n```\n", "duplicated grade_id"),
        ("```{code-cell} ipython3\n:kind: tests\n:grade_id: t\nassert True\n```\n", "needs :points:"),
        ("```{code-cell} ipython3\n:kind: answer\n:grade_id: t\nx = 1\n```\n", "needs :kind:"),
        ("```{code-cell} ipython3\n:grade: yes\nx = 1\n```\n", "unknown options"),
    ],
)
def test_builder_rejects_malformed_sources(cells, message):
    header = "---\njupytext:\n  text_representation:\n    format_name: myst\nkernelspec:\n  name: python3\n  display_name: Python 3\n---\n\n"
    with pytest.raises(build.BuildError, match=message):
        build.instructor_notebook(CHAPTER, template_text=header + cells)


def test_literal_round_trips():
    import torch

    t = torch.tensor([[0.123456789, -2.0], [float("nan"), 1e-9]], dtype=torch.float64)
    back = eval(build.literal(t), {"torch": torch})
    assert back.dtype == t.dtype
    assert torch.allclose(back, t, rtol=1e-7, atol=0, equal_nan=True)
    mask = torch.tensor([[True, False]])
    assert torch.equal(eval(build.literal(mask), {"torch": torch}), mask)

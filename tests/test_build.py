"""Generated files are in sync with their sources; the builder's helpers. (That a student notebook gives nothing
away, that its solution cells are the reference and its headings' points add up: tests/chapter_contract.py.)"""

import json

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

"""The grading run's cache of rendered instructor notebooks (autograder/authoring/build.py, render_cache_path): a
rendering is reused only when everything it is made from is unchanged, and a damaged one is rendered again."""

import nbformat
import pytest

from autograder.authoring import build
from autograder.grading import cluster

CHAPTER = "02-qkv-attention"


@pytest.fixture
def counted(monkeypatch, tmp_path):
    """Renderings counted; the cache in a folder of its own."""
    monkeypatch.setenv("COURSE_RENDER_CACHE", str(tmp_path / "cache"))
    calls = []
    real = build.instructor_notebook

    def counting(chapter_id):
        calls.append(chapter_id)
        return real(chapter_id)

    monkeypatch.setattr(build, "instructor_notebook", counting)
    return calls


def test_a_second_run_reuses_the_rendering(counted, tmp_path):
    build.write_instructor_sources(tmp_path / "a", [CHAPTER], cache=cluster.checks_version)
    build.write_instructor_sources(tmp_path / "b", [CHAPTER], cache=cluster.checks_version)
    assert counted == [CHAPTER], f"rendered {len(counted)} times for two runs with nothing changed"
    first, second = (tmp_path / w / "source" / CHAPTER / "exercises.ipynb" for w in ("a", "b"))
    assert first.read_text() == second.read_text(), "the reused rendering differs from the first"


def test_without_the_cache_every_call_renders(counted, tmp_path):
    build.write_instructor_sources(tmp_path / "a", [CHAPTER])
    build.write_instructor_sources(tmp_path / "b", [CHAPTER])
    assert counted == [CHAPTER, CHAPTER]


def test_a_change_to_the_checks_renders_again(counted, tmp_path):
    build.write_instructor_sources(tmp_path / "a", [CHAPTER], cache=cluster.checks_version)
    before = build.render_cache_path(CHAPTER, cluster.checks_version(CHAPTER))
    assert build.render_cache_path(CHAPTER, "a fixed check") != before, "the cache key ignores the chapter's checks"
    build.write_instructor_sources(tmp_path / "b", [CHAPTER], cache=lambda chapter: "a fixed check")
    assert counted == [CHAPTER, CHAPTER], "a rendering made with other checks was reused"


def test_a_damaged_cache_entry_is_rendered_again(counted, tmp_path):
    build.write_instructor_sources(tmp_path / "a", [CHAPTER], cache=cluster.checks_version)
    path = build.render_cache_path(CHAPTER, cluster.checks_version(CHAPTER))
    path.write_text(path.read_text()[:500])  # cut short, as by a full disk
    build.write_instructor_sources(tmp_path / "b", [CHAPTER], cache=cluster.checks_version)
    assert counted == [CHAPTER, CHAPTER], "a truncated rendering was used"
    nbformat.validate(nbformat.read(tmp_path / "b" / "source" / CHAPTER / "exercises.ipynb", as_version=4))

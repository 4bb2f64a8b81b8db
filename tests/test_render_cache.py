"""The grading run's cache of rendered instructor notebooks (autograder/authoring/release.py, render_cache_path): a
rendering is reused only when everything it is made from is unchanged, and a damaged one is rendered again."""

import json

import nbformat
import pytest

from autograder.authoring import build, release
from autograder.grading import cluster

CHAPTER = "02-qkv-attention"


def _render(chapter_id):
    """The rendering as the build passes it (build.instructor_notebook, looked up at each call: `counted` replaces it)."""
    return build.instructor_notebook(chapter_id)


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
    release.write_instructor_sources(tmp_path / "a", [CHAPTER], cache=cluster.checks_version, render=_render)
    release.write_instructor_sources(tmp_path / "b", [CHAPTER], cache=cluster.checks_version, render=_render)
    assert counted == [CHAPTER], f"rendered {len(counted)} times for two runs with nothing changed"
    first, second = (tmp_path / w / "source" / CHAPTER / "exercises.ipynb" for w in ("a", "b"))
    assert first.read_text() == second.read_text(), "the reused rendering differs from the first"


def test_without_the_cache_every_call_renders(counted, tmp_path):
    release.write_instructor_sources(tmp_path / "a", [CHAPTER], render=_render)
    release.write_instructor_sources(tmp_path / "b", [CHAPTER], render=_render)
    assert counted == [CHAPTER, CHAPTER]


def test_a_change_to_the_checks_renders_again(counted, tmp_path):
    release.write_instructor_sources(tmp_path / "a", [CHAPTER], cache=cluster.checks_version, render=_render)
    before = release.render_cache_path(CHAPTER, cluster.checks_version(CHAPTER))
    assert release.render_cache_path(CHAPTER, "a fixed check") != before, "the cache key ignores the chapter's checks"
    release.write_instructor_sources(tmp_path / "b", [CHAPTER], cache=lambda chapter: "a fixed check", render=_render)
    assert counted == [CHAPTER, CHAPTER], "a rendering made with other checks was reused"


def test_a_damaged_cache_entry_is_rendered_again(counted, tmp_path):
    release.write_instructor_sources(tmp_path / "a", [CHAPTER], cache=cluster.checks_version, render=_render)
    path = release.render_cache_path(CHAPTER, cluster.checks_version(CHAPTER))
    path.write_text(path.read_text()[:500])  # cut short, as by a full disk
    release.write_instructor_sources(tmp_path / "b", [CHAPTER], cache=cluster.checks_version, render=_render)
    assert counted == [CHAPTER, CHAPTER], "a truncated rendering was used"
    nbformat.validate(nbformat.read(tmp_path / "b" / "source" / CHAPTER / "exercises.ipynb", as_version=4))


# --- The release: a grading run does not release again a chapter that is current in its working directory ------


@pytest.fixture
def releases(monkeypatch, tmp_path):
    """nbgrader's generate_assignment calls counted, by chapter; the rendering cache in a folder of its own."""
    monkeypatch.setenv("COURSE_RENDER_CACHE", str(tmp_path / "cache"))
    from autograder.config import nbgrader_api

    api = nbgrader_api(tmp_path / "work")
    calls = []
    real = api.generate_assignment

    def counting(chapter_id, **kwargs):
        calls.append(chapter_id)
        return real(chapter_id, **kwargs)

    monkeypatch.setattr(api, "generate_assignment", counting)
    return api, tmp_path / "work", calls


def _release(api, workdir):
    return release.generate_assignments(workdir, [CHAPTER], api, cache=cluster.checks_version, skip_current=True, render=_render)


def test_a_rerun_does_not_release_a_current_chapter_again(releases):
    api, workdir, calls = releases
    _release(api, workdir)
    released = (workdir / "release" / CHAPTER / "exercises.ipynb").read_bytes()
    _release(api, workdir)
    assert calls == [CHAPTER], f"released {len(calls)} times with nothing changed"
    assert (workdir / "release" / CHAPTER / "exercises.ipynb").read_bytes() == released


def test_a_release_made_from_another_instructor_notebook_is_made_again(releases):
    api, workdir, calls = releases
    _release(api, workdir)
    stamps = release._read_released(workdir)
    stamps[CHAPTER]["source"] = "0" * 64  # as if released from an earlier version of the chapter
    (workdir / release.RELEASED).write_text(json.dumps(stamps))
    _release(api, workdir)
    assert calls == [CHAPTER, CHAPTER], "a release made from another instructor notebook was kept"


def test_a_gradebook_without_the_chapter_gets_it_released_again(releases):
    api, workdir, calls = releases
    _release(api, workdir)
    (workdir / "gradebook.db").unlink()  # a new, empty gradebook (or one where the assignment was deleted)
    _release(api, workdir)
    assert calls == [CHAPTER, CHAPTER], "the release was skipped for a gradebook that does not hold the chapter"
    from nbgrader.api import Gradebook

    with Gradebook(api.coursedir.db_url) as gradebook:
        assert gradebook.find_notebook("exercises", CHAPTER).grade_cells


def test_a_removed_release_is_made_again_and_the_build_always_releases(releases):
    api, workdir, calls = releases
    _release(api, workdir)
    (workdir / "release" / CHAPTER / "exercises.ipynb").unlink()
    _release(api, workdir)
    release.generate_assignments(workdir, [CHAPTER], api, cache=cluster.checks_version, render=_render)  # the build: skip_current off
    assert calls == [CHAPTER, CHAPTER, CHAPTER]
    assert (workdir / "release" / CHAPTER / "exercises.ipynb").is_file()


def test_a_release_from_the_cache_and_the_jobs_of_a_run_import_no_torch(tmp_path):
    """The coordinator of a run on the cluster imports no torch (about 2 s of every run's start): with the rendering
    cached, the release needs nbgrader and the files only, and looking at the class's notebooks and making their
    jobs need no tensor. (The first run after a change renders, which runs the references in torch.)"""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from conftest import course_env

    root = Path(__file__).resolve().parents[1]
    env = {**course_env(), "COURSE_RENDER_CACHE": str(tmp_path / "cache")}
    folder = tmp_path / "in" / "ana" / CHAPTER
    folder.mkdir(parents=True)
    shutil.copy(root / "chapters" / CHAPTER / "exercises.ipynb", folder / "exercises.ipynb")
    probe = (
        "import sys\n"
        "from pathlib import Path\n"
        "from autograder.grading import grade, cluster, intake\n"
        "from autograder.authoring import release\n"
        "from autograder.results import Settings\n"
        "from autograder.grading import sandbox\n"
        "work = Path(sys.argv[1])\n"
        "release.generate_assignments(work, [sys.argv[2]], cache=cluster.checks_version, skip_current=True,\n"
        "                             render=grade.render_instructor_notebook)\n"
        "subs, skipped, _ = intake.discover(Path(sys.argv[3]), exclude=work, unpack_into=work / 'unpacked')\n"
        "assert [s.student for s in subs] == ['ana'], (subs, skipped)\n"
        "job = cluster.make_job(work, subs[0], Settings(str(work), 0, 'cpu', 'bwrap', sandbox.Limits()), {})\n"
        "print('torch' in sys.modules)\n"
    )

    def run(workdir):
        done = subprocess.run([sys.executable, "-c", probe, str(workdir), CHAPTER, str(tmp_path / "in")], cwd=root, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.strip().splitlines()[-1]

    assert run(tmp_path / "first") == "True", "the first release renders the instructor notebook, which imports torch"
    assert run(tmp_path / "second") == "False", "a release from the cached rendering, or intake, or a job, imported torch"

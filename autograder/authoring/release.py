"""A chapter's release for grading: its instructor notebook rendered into the working directory (or reused from the
render cache), then nbgrader's generate_assignment, which fills the gradebook and writes <workdir>/release/.

Apart from build.py (which renders the notebooks, running the reference solutions in torch) so that a grading
run's coordinator imports no torch: with the rendering cached, a release needs only nbgrader and the files, and
the coordinator of a run on the Dask cluster never runs a tensor operation (about 2 s of imports saved on the
critical path of every run). The rendering itself is passed in (`render`): build imports this module, not the
other way round."""

import hashlib
import json
import os
from pathlib import Path

import nbformat

from autograder import registry
from autograder.config import nbgrader_api
from autograder.results import atomic_write


class BuildError(Exception):
    """A chapter could not be built: its rendering (build.py) or nbgrader's release of it failed."""


def write_instructor_sources(workdir: Path, chapters=None, cache=None, *, render) -> list[str]:
    """Render every chapter's instructor notebook into <workdir>/source/<chapter>/exercises.ipynb. With `cache`, a
    function giving a chapter's grading fingerprint (grading runs pass autograder.grading.cluster.checks_version), a
    rendering made earlier from the same inputs is reused (`render_cache_path`): rendering runs the reference
    solutions and the catalogue of mistakes, about 1.3 s a chapter, on every run otherwise. render(chapter_id): the
    notebook, on a miss (build.instructor_notebook; passed in, so that this module imports neither build nor torch)."""
    chapters = chapters or registry.graded_chapters()
    for chapter_id in chapters:
        target = workdir / "source" / chapter_id / f"{registry.NOTEBOOK}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        cached = render_cache_path(chapter_id, cache(chapter_id)) if cache else None
        text = _read_cached(cached)
        if text is None:
            text = nbformat.writes(render(chapter_id))
            text = text if text.endswith("\n") else text + "\n"  # as nbformat.write
            if cached is not None:
                try:
                    cached.parent.mkdir(parents=True, exist_ok=True)
                    atomic_write(cached, text)
                except OSError:
                    pass  # no cache where none can be written: the next run renders again
        atomic_write(target, text)  # never half a file
    return chapters


def render_cache_path(chapter_id: str, grading_fingerprint: str) -> Path:
    """Where the rendering of a chapter's instructor notebook is kept between grading runs: named by a fingerprint
    of everything it is made from (the chapter's source and test data, the authoring code, and the grading
    fingerprint: grading code, check library, the chapter's checks, every solution, torch and numpy versions), so a
    change to any of them renders it again. $COURSE_RENDER_CACHE, else ~/.cache/transformer-course."""
    digest = hashlib.sha256(grading_fingerprint.encode())
    root = registry.ROOT / "autograder"
    files = sorted((root / "authoring").glob("*.py")) + sorted((root / "source" / chapter_id).rglob("*"))
    for path in files:
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    folder = os.environ.get("COURSE_RENDER_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "transformer-course"
    return Path(folder) / f"{chapter_id}-{digest.hexdigest()[:20]}.ipynb"


def _read_cached(path: Path | None) -> str | None:
    """The cached rendering, if it is there and a valid notebook (a damaged one is rendered again)."""
    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8")
        nbformat.validate(nbformat.reads(text, as_version=4))
        return text
    except (OSError, ValueError, nbformat.ValidationError):
        return None


RELEASED = "released.json"  # in the working directory: what each chapter's release was made from (_release_stamp)


def generate_assignments(workdir: Path, chapters=None, api=None, cache=None, skip_current=False, *, render) -> list[str]:
    """Instructor sources -> nbgrader generate_assignment (fills the gradebook) -> <workdir>/release/.

    skip_current (grading runs): a chapter released before in this working directory from the same instructor
    notebook, into the same gradebook, which still holds it, is not released again (nbgrader takes about 0.4 s a
    chapter, paid by every rerun of one student otherwise)."""
    chapters = write_instructor_sources(workdir, chapters, cache=cache, render=render)
    api = api or nbgrader_api(workdir)
    stamps = _read_released(workdir)
    for chapter_id in chapters:
        stamp = _release_stamp(workdir, chapter_id, api.coursedir.db_url)
        if skip_current and stamp is not None and stamps.get(chapter_id) == stamp and _in_gradebook(api.coursedir.db_url, chapter_id):
            continue
        if stamps.pop(chapter_id, None) is not None:  # no stamp of the old release while it is replaced
            atomic_write(workdir / RELEASED, json.dumps(stamps, indent=1, sort_keys=True))
        result = api.generate_assignment(chapter_id, force=True, create=True)
        if not result["success"]:
            raise BuildError(f"nbgrader generate_assignment failed for {chapter_id}:\n{result['error']}\n{result['log']}")
        stamps[chapter_id] = _release_stamp(workdir, chapter_id, api.coursedir.db_url)
        atomic_write(workdir / RELEASED, json.dumps(stamps, indent=1, sort_keys=True))
    return chapters


def _read_released(workdir: Path) -> dict:
    try:
        stamps = json.loads((Path(workdir) / RELEASED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return stamps if isinstance(stamps, dict) else {}


def _release_stamp(workdir: Path, chapter_id: str, db_url: str) -> dict | None:
    """The instructor notebook's and the released notebook's hashes and the gradebook URL's (None: not released)."""
    files = [Path(workdir) / kind / chapter_id / f"{registry.NOTEBOOK}.ipynb" for kind in ("source", "release")]
    try:
        source, release = (hashlib.sha256(path.read_bytes()).hexdigest() for path in files)
    except OSError:
        return None
    return {"source": source, "release": release, "gradebook": hashlib.sha256(db_url.encode()).hexdigest()[:16]}  # no password kept


def _in_gradebook(db_url: str, chapter_id: str) -> bool:
    """Does the gradebook hold the chapter's notebook with its graded cells (generate_assignment's records)?"""
    from nbgrader.api import Gradebook, MissingEntry

    try:
        with Gradebook(db_url) as gradebook:
            return len(gradebook.find_notebook(registry.NOTEBOOK, chapter_id).grade_cells) > 0
    except MissingEntry:
        return False

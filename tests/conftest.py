"""Shared fixtures: tiny seeded inputs in one place, and the one-off expensive runs (grading, book build)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Where the tests build the book and look at it: `$COURSE_BUILD_DIR/_build/html` (jupyter-book's --path-output),
# by default the repository's own _build. Another folder keeps a test build apart from `make book`'s.
BUILD_DIR = Path(os.environ.get("COURSE_BUILD_DIR") or ROOT).resolve()
# The class edition (course/editions.py), built by the `class_book` fixture as `make class-book` builds it.
CLASS_DIR = BUILD_DIR / "_build" / "class"
CLASS_HTML = CLASS_DIR / "_build" / "html"


def course_env(**extra):
    """The environment of a course command: the repo on PYTHONPATH, this venv's bin/ first on PATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["MPLBACKEND"] = "Agg"
    env.update(extra)
    return env


def run_python(*args, cwd=ROOT, timeout=900):
    """Run `python *args` with this interpreter in the course environment."""
    return subprocess.run([sys.executable, *args], cwd=cwd, env=course_env(), capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def built_book():
    """The strict build of the book (any Sphinx warning or cell error fails it), once per test session."""
    jb = shutil.which("jupyter-book", path=str(Path(sys.executable).parent)) or shutil.which("jupyter-book")
    assert jb, "jupyter-book is not on PATH (run the tests through `make test`)"
    result = run_python(jb, "build", ".", "--path-output", str(BUILD_DIR), "--warningiserror", "--nitpick", "--keep-going",
                        timeout=1500)
    assert result.returncode == 0, f"strict book build failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result


@pytest.fixture(scope="session")
def class_book(built_book):
    """The class edition, built strictly once per test session after the full one, from its execution cache
    (so that it runs no page again: a few minutes of reading and writing)."""
    jb = shutil.which("jupyter-book", path=str(Path(sys.executable).parent)) or shutil.which("jupyter-book")
    env = course_env(COURSE_EDITION="class", COURSE_EXECUTION_CACHE=str(BUILD_DIR / "_build" / ".jupyter_cache"))
    result = subprocess.run([sys.executable, jb, "build", ".", "--path-output", str(CLASS_DIR), "--warningiserror",
                             "--nitpick", "--keep-going"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert result.returncode == 0, f"strict build of the class edition failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    executed = re.findall(r"(\S+\.md): Executing notebook", result.stdout)
    forced = [page for page in executed if "execution_mode: force" not in Path(page).read_text(encoding="utf-8")]
    assert not forced, f"the class edition ran pages that the full edition's execution cache holds: {forced}"
    return result


@pytest.fixture
def gen():
    """A fresh seeded CPU generator per test."""
    return torch.Generator().manual_seed(1234)


@pytest.fixture
def grading_env(monkeypatch):
    """Hidden checks read their seed and device from the environment; pin both for the tests."""
    monkeypatch.setenv("COURSE_GRADING_SEED", "7")
    monkeypatch.setenv("COURSE_DEVICE", "cpu")

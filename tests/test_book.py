"""The site builds strictly (any Sphinx warning fails), every page of the table of contents is there, and no
executed cell produced an error."""

import re
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, run_python

HTML = ROOT / "_build" / "html"
ERROR_MARKERS = ("highlight-ipythontb", "output traceback", 'class="output error')


def toc_files():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries):
        for entry in entries:
            files.append(entry["file"])
            walk(entry.get("sections", []))

    for part in toc["parts"]:
        walk(part["chapters"])
    return files


def cell_errors(html_dir: Path) -> list[str]:
    """Pages whose HTML shows an executed cell's error output."""
    return sorted(
        str(page.relative_to(html_dir))
        for page in html_dir.rglob("*.html")
        if any(marker in page.read_text(encoding="utf-8", errors="replace") for marker in ERROR_MARKERS)
    )


@pytest.fixture(scope="module")
def built_book():
    jb = shutil.which("jupyter-book")
    assert jb, "jupyter-book is not on PATH (run the tests through `make test`)"
    result = run_python(jb, "build", ".", "--warningiserror", "--nitpick", "--keep-going", timeout=1500)
    assert result.returncode == 0, f"strict book build failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result


def test_index_exists(built_book):
    assert (HTML / "index.html").exists()


def test_every_toc_page_is_built(built_book):
    missing = [f for f in toc_files() if not (HTML / f"{f}.html").exists()]
    assert not missing, f"pages in _toc.yml with no HTML: {missing}"
    assert (ROOT / "chapters" / "02-qkv-attention" / "exercises.ipynb").exists()
    assert list((HTML / "_downloads").rglob("exercises.ipynb")), "the exercise notebook is not offered for download"


def test_no_executed_cell_failed(built_book):
    assert cell_errors(HTML) == []
    reports = HTML / "reports"
    assert not reports.exists() or not any(reports.iterdir()), f"execution reports: {list(reports.iterdir())}"


def test_chapter_02_numbers_are_glued(built_book):
    source = (ROOT / "chapters" / "02-qkv-attention" / "index.md").read_text(encoding="utf-8")
    assert "{glue:text}" in source or "{glue:}" in source
    page = (HTML / "chapters" / "02-qkv-attention" / "index.html").read_text(encoding="utf-8")
    assert page.count("<img") >= 2, "chapter 02 should show its figures"


def test_cell_error_detector_finds_an_error(tmp_path):
    (tmp_path / "ok.html").write_text('<div class="cell_output"><pre>fine</pre></div>')
    assert cell_errors(tmp_path) == []
    (tmp_path / "bad.html").write_text('<div class="output traceback highlight-ipythontb notranslate">ZeroDivisionError</div>')
    assert cell_errors(tmp_path) == ["bad.html"]

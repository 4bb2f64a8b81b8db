"""The site builds strictly (any Sphinx warning fails), every page of the table of contents is there, and no
executed cell produced an error."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import BUILD_DIR, ROOT

HTML = BUILD_DIR / "_build" / "html"  # built by the session fixture `built_book` (conftest.py)
ERROR_MARKERS = ("highlight-ipythontb", "output traceback", 'class="output error')
# A cell that printed to stderr (a warning, e.g. matplotlib's "Glyph ... missing from font") shows this class.
STDERR_MARKER = "output stderr"
CHAPTERS = sorted(p.parent.name for p in (ROOT / "chapters").glob("[0-9][0-9]-*/index.md"))
APPENDICES = ["errata", "glossary"]
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
needs_browser = pytest.mark.skipif(BROWSER is None, reason="needs Debian's chromium (`make test` installs it as root)")


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


def test_nine_chapters_the_capstone_and_the_appendices_are_in_the_toc():
    files = toc_files()
    assert len(CHAPTERS) == 10 and CHAPTERS[-1] == "10-capstone", CHAPTERS
    for chapter in CHAPTERS:
        assert f"chapters/{chapter}/index" in files, f"{chapter} is not in _toc.yml"
    for page in APPENDICES:
        assert f"chapters/{page}" in files, f"appendix {page} is not in _toc.yml"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_page_is_complete(built_book, chapter):
    """Each reading page shows figures, glues its numbers, and asks 3-5 questions with hidden answers."""
    source = (ROOT / "chapters" / chapter / "index.md").read_text(encoding="utf-8")
    page = (HTML / "chapters" / chapter / "index.html").read_text(encoding="utf-8")
    assert source.count("{glue:") >= 10, f"{chapter}: numbers in the prose must be glued from executed code"
    assert not re.search(r"\{glue:[a-z]*\}`[^`]*`", page), f"{chapter}: a glue role was not resolved"
    images = re.findall(r'<img[^>]+src="([^"]+)"', page)
    assert len(images) >= 2, f"{chapter}: expected figures, found {len(images)}"
    for src in images:
        image = (HTML / "chapters" / chapter / src).resolve()
        assert image.exists() and image.stat().st_size > 1000, f"{chapter}: figure {src} missing or empty"
    questions = source.split("## Check your understanding", 1)
    assert len(questions) == 2, f"{chapter}: no 'Check your understanding' section"
    dropdowns = questions[1].split("\n## ", 1)[0].count(":::{dropdown}")
    assert 3 <= dropdowns <= 5, f"{chapter}: {dropdowns} questions with hidden answers, expected 3-5"


def test_no_cell_printed_a_warning(built_book):
    noisy = sorted(
        str(page.relative_to(HTML))
        for page in HTML.rglob("*.html")
        if STDERR_MARKER in page.read_text(encoding="utf-8", errors="replace")
    )
    assert noisy == [], f"cells printed to stderr (warnings, missing glyphs) on: {noisy}"


def test_errata_entries_are_checked_by_code(built_book):
    source = (ROOT / "chapters" / "errata.md").read_text(encoding="utf-8")
    entries = re.findall(r"^\(errata-(\d{3}-\d+)\)=$", source, flags=re.M)
    assert len(entries) >= 20 and len(entries) == len(set(entries)), entries
    for entry in entries:
        assert f"{{ref}}`{entry} <errata-{entry}>`" in source, f"errata {entry} is missing from the summary table"
    assert source.count("assert ") >= 25, "errata claims should be asserted by code"
    assert (HTML / "chapters" / "errata.html").exists() and (HTML / "chapters" / "glossary.html").exists()


def test_cell_error_detector_finds_an_error(tmp_path):
    (tmp_path / "ok.html").write_text('<div class="cell_output"><pre>fine</pre></div>')
    assert cell_errors(tmp_path) == []
    (tmp_path / "bad.html").write_text('<div class="output traceback highlight-ipythontb notranslate">ZeroDivisionError</div>')
    assert cell_errors(tmp_path) == ["bad.html"]


def test_math_is_served_by_the_site(built_book):
    """MathJax comes from the site's own _static folder, not a CDN: formulas render offline."""
    page = (HTML / "chapters" / "05-masks" / "index.html").read_text(encoding="utf-8")
    scripts = re.findall(r'<script[^>]+src="([^"]*mathjax[^"]*)"', page, flags=re.I)
    assert scripts and all("://" not in s for s in scripts), f"MathJax is loaded from elsewhere: {scripts}"
    files = [(HTML / "chapters" / "05-masks" / s.split("?")[0]).resolve() for s in scripts]  # drop Sphinx's ?v=
    assert all(f.is_file() for f in files), scripts


def typeset_counts(html_page: Path) -> tuple[int, int, int]:
    """(formulas in the page, formulas MathJax typeset, TeX errors) after headless Chromium ran the page's JS."""
    dom = subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--virtual-time-budget=10000", "--dump-dom", html_page.as_uri()],
        capture_output=True, text=True, timeout=120,
    ).stdout
    source = html_page.read_text(encoding="utf-8")
    return source.count('class="math notranslate'), dom.count("<mjx-container"), dom.count("<mjx-merror")


@needs_browser
def test_every_formula_typesets_in_a_browser(built_book):
    pages = [HTML / f"{f}.html" for f in toc_files()]
    problems = []
    for page in pages:
        formulas, typeset, errors = typeset_counts(page)
        if typeset != formulas or errors:
            problems.append(f"{page.relative_to(HTML)}: {typeset} of {formulas} formulas typeset, {errors} TeX errors")
    assert not problems, "\n".join(problems)


@needs_browser
def test_typeset_check_finds_a_tex_error(built_book):
    page = HTML / "chapters" / "05-masks" / "index.html"
    broken = page.parent / "_typeset_probe.html"
    try:
        broken.write_text(page.read_text(encoding="utf-8").replace(
            '<span class="math notranslate nohighlight">', '<span class="math notranslate nohighlight">\\(\\frac{1}\\)</span><span class="math notranslate nohighlight">', 1))
        formulas, typeset, errors = typeset_counts(broken)
        assert errors >= 1 and typeset == formulas
    finally:
        broken.unlink(missing_ok=True)


def test_intro_is_a_chapter_map(built_book):
    """The introduction links every chapter once in its map, names what the learner writes in each chapter with
    exercises (the grader's graded functions), draws the map, and no longer repeats the sidebar's "Chapters" list."""
    import importlib

    from autograder import registry

    page = (HTML / "intro.html").read_text(encoding="utf-8")
    assert "at a glance" in page and "<h2>Chapters" not in page
    # The hidden toctrees of the table of contents stay; no visible list of links repeats the sidebar.
    assert all(not body.strip() for body in re.findall(r'<div class="toctree-wrapper compound">(.*?)</div>', page, re.S))
    for chapter in registry.CHAPTER_IDS:
        assert f'href="chapters/{chapter}/index.html"' in page, chapter
    for chapter in registry.graded_chapters():  # a chapter without an exercise notebook has no graded functions yet
        checks = importlib.import_module(f"autograder.checks.{registry.module_name(chapter)}").CHECKS
        for grade_id in checks:
            assert f"{grade_id.removesuffix('_hidden')}</span></code>" in page, (chapter, grade_id)
    assert re.search(r'<img[^>]+src="_images/[0-9a-f]+\.png"', page), "the chapter diagram is missing"


def test_build_status_shows_when_each_page_changed(built_book):
    """Build status has a row per page with the date its source last changed, and the execution table's column
    says it is the time the code was run."""
    page = (HTML / "chapters" / "build-status.html").read_text(encoding="utf-8")
    table = page[page.index("course-page-sources"):]
    for source in toc_files():
        path = source + ".md"
        assert f"<code class=\"docutils literal notranslate\"><span class=\"pre\">{path}</span></code>" in table, path
    assert re.search(r"<td><p>\d{4}-\d\d-\d\d</p></td>", table)
    assert "Code last run" in page and ">Modified<" not in page


def test_page_dates_fall_back_without_git(tmp_path):
    """A git checkout gives the last commit's date; a copy without .git (or unpacked inside another repository)
    the file's date, marked as such; an uncommitted change is said."""
    import os

    from course.buildstatus import git_root, last_change

    page = tmp_path / "page.md"
    page.write_text("# A page\n")
    os.utime(page, (946_684_800, 946_684_800))  # 2000-01-01 UTC
    assert git_root(tmp_path) is None
    date, how = last_change(page, None)
    assert how == "file date (no git history in this copy)" and date.startswith(("1999-12-31", "2000-01-01"))

    env = dict(os.environ, GIT_AUTHOR_DATE="2001-02-03T12:00:00Z", GIT_COMMITTER_DATE="2001-02-03T12:00:00Z",
               GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.org")
    for args in (["init", "-q"], ["add", "page.md"], ["commit", "-qm", "page"]):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, env=env, capture_output=True)
    assert git_root(tmp_path) == tmp_path
    assert last_change(page, tmp_path) == ("2001-02-03", "last commit")
    page.write_text("# A page, edited\n")
    assert last_change(page, tmp_path)[1] == "file date (changed since its last commit, 2001-02-03)"
    # An archive unpacked inside some other repository is not that repository's checkout.
    (tmp_path / "unpacked").mkdir()
    assert git_root(tmp_path / "unpacked") is None

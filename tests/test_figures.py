"""Figures and equations are numbered per chapter, figures are captioned, and references to them resolve.

A reader who looks only at a figure should understand it (its caption says what is plotted and what to see), and
the text refers to figures and equations by number ("Fig. 9.1", "(9.1)"). The check reads the built HTML of each
chapter page: every image a code cell drew sits inside a numbered figure with a caption, every figure and
equation number is the chapter's own, and no {numref}/{eq} reference is left unresolved. `figure_problems` is a
plain function of the HTML, so its own test needs no build.
"""

import re

import pytest
from bs4 import BeautifulSoup

from conftest import BUILD_DIR, ROOT

HTML = BUILD_DIR / "_build" / "html"  # built by the session fixture `built_book` (conftest.py)
CHAPTERS = sorted(p.parent.name for p in (ROOT / "chapters").glob("[0-9][0-9]-*/index.md"))
# Where Sphinx leaves a reference it could not resolve: the role's text in a span or code with class "xref"
# outside any link, or "???" for a target that has no number.
UNRESOLVED_MARK = "???"


def figure_problems(html: str, chapter: int) -> list[str]:
    """What breaks the figure rules on one chapter page (empty if nothing): an image in a cell's output outside
    a figure, a figure without a number, a name (id) or a caption text, a figure or equation numbered outside
    chapter `chapter`, and unresolved references."""
    soup = BeautifulSoup(html, "html.parser")
    problems = []
    for img in soup.select("div.cell_output img"):
        figure = img.find_parent("figure")
        src = img.get("src", "?")
        if figure is None:
            problems.append(f"image {src} is not in a figure (no number, no caption)")
            continue
        number = figure.select_one("figcaption span.caption-number")
        text = figure.select_one("figcaption span.caption-text")
        if number is None or text is None or not text.get_text(strip=True):
            problems.append(f"figure of {src} has no numbered caption")
            continue
        if not re.fullmatch(rf"Fig\. {chapter}\.\d+", number.get_text(strip=True)):
            problems.append(f"figure of {src} is numbered {number.get_text(strip=True)!r}, not Fig. {chapter}.N")
        if not figure.get("id"):
            problems.append(f"figure of {src} has no name to refer to it by")
    for eqno in soup.select("span.eqno"):
        label = eqno.find(string=True, recursive=False) or ""
        if not re.fullmatch(rf"\({chapter}\.\d+\)", label.strip()):
            problems.append(f"equation numbered {label.strip()!r}, not ({chapter}.N)")
    for xref in soup.select(".xref"):
        if xref.find_parent("a") is None:
            problems.append(f"unresolved reference {xref.get_text(strip=True)!r}")
    for link in soup.select("a.reference"):
        if UNRESOLVED_MARK in link.get_text():
            problems.append(f"reference without a number: {link.get_text(strip=True)!r}")
    return problems


def figure_counts(html: str) -> tuple[int, int, int]:
    """(captioned figures, numbered equations, references to figures and equations) on one page."""
    soup = BeautifulSoup(html, "html.parser")
    figures = len(soup.select("figure figcaption span.caption-number"))
    equations = len(soup.select("span.eqno"))
    refs = len(soup.select('a.reference.internal[href^="#fig-"], a.reference.internal[href^="#equation-"]'))
    return figures, equations, refs


def chapter_number(chapter: str) -> int:
    return int(chapter.split("-")[0])


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_figures_are_numbered_and_captioned(built_book, chapter):
    html = (HTML / "chapters" / chapter / "index.html").read_text(encoding="utf-8")
    assert figure_problems(html, chapter_number(chapter)) == []
    figures, _, refs = figure_counts(html)
    assert figures >= 1 and refs >= 1, f"{chapter}: {figures} captioned figures, {refs} references to them"


def test_concept_diagrams_are_numbered(built_book):
    """The two concept diagrams exist, are numbered and are referred to by number."""
    for chapter, name in [("04-multi-head", "fig-04-mha-diagram"), ("09-complexity-kv-cache", "fig-09-kv-cache")]:
        soup = BeautifulSoup((HTML / "chapters" / chapter / "index.html").read_text(encoding="utf-8"), "html.parser")
        figure = soup.find("figure", id=name)
        assert figure is not None and figure.find("img") is not None, name
        assert soup.select_one(f'a.reference.internal[href="#{name}"]') is not None, f"nothing refers to {name}"


CAPTIONED = """<div class="cell_output docutils container"><figure class="align-default" id="fig-09-flops">
<img src="a.png"/><figcaption><p><span class="caption-number">Fig. 9.1 </span><span class="caption-text">FLOPs
against n.</span></p></figcaption></figure></div>
<p>See <a class="reference internal" href="#fig-09-flops"><span class="std std-numref">Fig. 9.1</span></a> and
<a class="reference internal" href="#equation-eq-09-flops">(9.1)</a>.</p>
<div class="math" id="equation-eq-09-flops"><span class="eqno">(9.1)<a class="headerlink" href="#">#</a></span>x</div>"""
BROKEN = {
    "uncaptioned figure": '<div class="cell_output docutils container"><img src="b.png"/></div>',
    "figure without caption text": '<div class="cell_output"><figure id="f"><img src="b.png"/></figure></div>',
    "another chapter's number": CAPTIONED.replace("Fig. 9.1 </span>", "Fig. 3 </span>"),
    "equation of another chapter": CAPTIONED.replace('<span class="eqno">(9.1)', '<span class="eqno">(12)'),
    "unresolved numref": '<p>See <span class="xref std std-numref">fig-09-missing</span>.</p>',
    "numref without a number": '<p><a class="reference internal" href="#x"><span>Fig. ???</span></a></p>',
}


def test_check_passes_a_captioned_figure():
    assert figure_problems(CAPTIONED, 9) == []
    assert figure_counts(CAPTIONED) == (1, 1, 2)


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_check_fails_on_a_broken_fixture(case):
    assert figure_problems(CAPTIONED + BROKEN[case], 9) != []


def test_without_a_chinese_font_the_figure_style_says_what_to_install(monkeypatch, tmp_path):
    """Neither the site's cut font nor an installed Noto Sans CJK: the style warns, naming the package, instead of
    leaving matplotlib to draw Chinese as boxes (the style before issue 26 said nothing)."""
    import matplotlib as mpl

    from course import figures, fonts

    def not_installed():
        raise FileNotFoundError(fonts.INSTALL_HINT)

    monkeypatch.setattr(fonts, "OTF", tmp_path / "course-cjk.otf")
    monkeypatch.setattr(fonts, "find_source", not_installed)
    assert figures.chinese_font() is None
    with mpl.rc_context(), pytest.warns(UserWarning, match="fonts-noto-cjk"):
        figures.use_course_style()

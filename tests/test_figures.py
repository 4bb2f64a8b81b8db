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


def alt_problems(html: str) -> list[str]:
    """Images whose alt text does not say what they show: none, or a file path (Sphinx writes the image's path
    there, which a screen reader reads out), or a single word."""
    soup = BeautifulSoup(html, "html.parser")
    problems = []
    for img in soup.find_all("img"):
        alt = (img.get("alt") or "").strip()
        if not alt or re.search(r"(^|/)[\w.-]+\.(png|svg|jpe?g|gif)$", alt) or "/_images/" in alt or len(alt.split()) < 3:
            problems.append(f"{img.get('src')}: alt {alt!r}")
    return problems


def test_alt_check_fails_on_a_path_and_passes_a_description():
    path = "../../_images/5cbe6ce3.png"
    old = f'<figure><img alt="{path}" src="{path}" /><figcaption><p>Fig. 5.1 Masks.</p></figcaption></figure>'
    assert alt_problems(old) == [f"{path}: alt '{path}'"]
    assert alt_problems('<img src="a.png" />') and alt_problems('<img alt="fig_mask" src="a.png" />')
    assert not alt_problems('<img alt="The causal mask of five tokens, True on and below the diagonal." src="a.png" />')


def test_every_image_of_the_site_has_alt_text_that_says_what_it_shows(built_book):
    """Alt text from the figure's caption (course/sphinxext.py): its first sentence."""
    pages = sorted(HTML.rglob("*.html"))
    problems = {str(p.relative_to(HTML)): found for p in pages if (found := alt_problems(p.read_text(encoding="utf-8")))}
    assert not problems
    chapter4 = BeautifulSoup((HTML / "chapters" / "04-multi-head" / "index.html").read_text(encoding="utf-8"), "html.parser")
    first = chapter4.select_one("figure#fig-04-mha-diagram img")
    assert first["alt"].startswith("Multi-head self-attention, drawn for a few tokens and h = 3 heads")


# --- the concept diagrams (course/diagrams.py): arrows that do not cross, labels beside what they name --------------

def arrow_segments(fig) -> list[tuple[tuple[float, float], tuple[float, float]]]:
    """Every arrow of a diagram as (start, end) in data coordinates."""
    from matplotlib.text import Annotation

    return [(tuple(a.xyann), tuple(a.xy)) for ax in fig.axes for a in ax.texts
            if isinstance(a, Annotation) and a.arrow_patch is not None]


def crossing_arrows(segments) -> list[tuple]:
    """Pairs of straight arrows that cross each other (arrows that only share an end do not count)."""
    def side(a, b, c):
        return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])

    crossings = []
    for i, (p1, p2) in enumerate(segments):
        for q1, q2 in segments[i + 1:]:
            if {p1, p2} & {q1, q2}:
                continue
            if side(p1, p2, q1) * side(p1, p2, q2) < 0 and side(q1, q2, p1) * side(q1, q2, p2) < 0:
                crossings.append(((p1, p2), (q1, q2)))
    return crossings


def test_crossing_check_on_a_fixture():
    assert crossing_arrows([((0, 0), (2, 2)), ((0, 2), (2, 0))])
    assert not crossing_arrows([((0, 0), (2, 2)), ((0, 2), (1, 3)), ((2, 2), (3, 0))])


def test_the_multi_head_diagram_has_no_crossing_arrows_and_labels_w_o_beside_its_arrow():
    """Fig. 4.1: before, an arrow ran from every head block of Q, K and V to its head, and they crossed; the
    "× W^O" label stood five cells left of its arrow."""
    import matplotlib

    matplotlib.use("Agg")
    from course import diagrams

    fig = diagrams.multi_head_attention(n=4, h=3)
    assert not crossing_arrows(arrow_segments(fig))
    label = next(t for ax in fig.axes for t in ax.texts if "W^O" in t.get_text())
    x, y = label.get_position()
    vertical = [(s, e) for s, e in arrow_segments(fig) if s[0] == e[0] and min(s[1], e[1]) <= y <= max(s[1], e[1])]
    assert vertical and min(abs(x - s[0]) for s, _ in vertical) <= 1.0  # within one cell of the arrow it names


def test_the_kv_cache_diagram_reads_the_cache_from_its_rows_not_from_the_next_step():
    """Fig. 9.3: the arrows to the weights and to the output leave the cached K and V, not the dashed row that
    step t + 1 will fill (they started 0.1 cell below it)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.patches import Rectangle

    from course import diagrams

    fig = diagrams.kv_cache_step(t=5, d_k=4)
    ax = fig.axes[0]
    dashed = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_linestyle() == "--"]
    assert len(dashed) == 2

    def from_the_next_row(point, rect, margin=0.3):
        """At or below the top edge of the dashed row, within its width: the arrow comes out of that row."""
        x, y = point
        return rect.get_x() - margin <= x <= rect.get_x() + rect.get_width() + margin and y <= rect.get_y() + rect.get_height()

    starts = [s for s, _ in arrow_segments(fig)]
    assert not [s for s in starts if any(from_the_next_row(s, r) for r in dashed)]

"""The style every figure of the course is drawn in, and the measure that keeps figures readable.

The book build runs `use_course_style()` in every page that draws (the Sphinx extension `course.sphinxext`
adds a hidden cell after the page's `%matplotlib inline`; a downloaded notebook shows that cell). It

- draws Chinese with the site's own font (`_static/fonts/course-cjk.otf`, the same subset the web pages use),
  so the figures can label 我 喜欢 苹果 as the notes do; Latin text stays in DejaVu Sans. Where that subset
  was not cut (a page run from the course archive, which holds no build output), it draws Chinese with the
  installed Noto Sans CJK it is cut from; where neither is there, it warns once, saying what to install,
  instead of leaving matplotlib to draw empty boxes;
- sets the sizes, and fits every figure to where the site shows it (`fit_to_column`): at most `CONTENT_PX`
  pixels wide (the content column on a desktop screen; a figure drawn wider is scaled down as a whole and laid
  out again, its text keeping its size), no text below `MIN_TEXT_PT`, so that text is at least
  `SMALL_PRINT_PX` pixels high as shown;
- writes into every PNG it renders the height of its smallest text (`MIN_TEXT_KEY`, in the PNG's own pixels),
  which the site's browser test (tests/test_site.py) compares with the size at which the figure is shown.
"""

from __future__ import annotations

import warnings

import matplotlib as mpl
from matplotlib.figure import Figure
from matplotlib.layout_engine import PlaceHolderLayoutEngine
from matplotlib.text import Text

from course import fonts

# The site at desktop width: figures are shown in a column this many CSS pixels wide, and the smallest body
# text (code and cell output, 0.875 rem) is this high. tests/test_site.py measures both in the browser.
CONTENT_PX = 784
SMALL_PRINT_PX = 14
# A figure is never shown smaller than 1/MAX_SHRINK of its natural width (it scrolls in its box instead).
MAX_SHRINK = 1.5
DPI = 100
MIN_TEXT_KEY = "Course-Min-Text-Px"
# No text smaller than this in a figure: at 100 dpi, 10.5 pt is 14.6 px, the small print (14 px) and a little.
MIN_TEXT_PT = 10.5
# Font sizes in points: at 100 dpi, 10.5 pt is 14.6 px.
STYLE = {
    "figure.dpi": DPI,
    "savefig.dpi": "figure",
    "font.size": 11,
    "axes.titlesize": 12,
    "axes.labelsize": 11,
    "xtick.labelsize": 10.5,
    "ytick.labelsize": 10.5,
    "legend.fontsize": 10.5,
    "legend.title_fontsize": 11,
    "figure.titlesize": 13,
    "figure.figsize": (7.2, 4.4),
}


NO_CJK_FONT = ("the figures of this page label Chinese text, and no Chinese font was found: "
               f"{fonts.INSTALL_HINT}, then run the page again")


def chinese_font() -> tuple[str, str] | None:
    """The font file and family that draw the figures' Chinese: the site's subset where the book build cut it,
    else the installed Noto Sans CJK (SC face) it is cut from, else None."""
    if fonts.OTF.is_file():
        return str(fonts.OTF), fonts.FAMILY
    try:
        return str(fonts.find_source()), fonts.SOURCE_FAMILY
    except FileNotFoundError:
        return None


def use_course_style() -> None:
    """Fonts and sizes for the figures of this page, and the PNG output that records its smallest text."""
    mpl.rcParams.update(STYLE)
    found = chinese_font()
    if found:
        from matplotlib import font_manager

        path, family = found
        font_manager.fontManager.addfont(path)
        # Fallback per glyph: Latin from DejaVu Sans, Chinese from the font found.
        mpl.rcParams["font.family"] = ["DejaVu Sans", family]
    else:
        warnings.warn(NO_CJK_FONT, stacklevel=2)
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and hasattr(shell, "display_formatter"):
        shell.display_formatter.formatters["image/png"].for_type(Figure, figure_png)


def smallest_text_px(fig: Figure) -> float | None:
    """Height in the PNG's pixels of the smallest visible text of the figure (None if it has no text)."""
    sizes = [t.get_fontsize() for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and (t.axes is None or t.axes.get_visible())]
    return min(sizes) * fig.dpi / 72 if sizes else None


def fit_to_column(fig: Figure) -> None:
    """Make the figure readable where the site shows it: no text below MIN_TEXT_PT, and no wider than the
    content column (a wider figure is scaled down as a whole, its text keeping its size, and laid out again)."""
    for text in fig.findobj(Text):
        if text.get_fontsize() < MIN_TEXT_PT:
            text.set_fontsize(MIN_TEXT_PT)
    # A title longer than the column wraps (its text cannot shrink with the figure).
    titles = [fig._suptitle] + [ax.title for ax in fig.axes]
    for title in titles:
        if title is not None and title.get_text():
            title.set_wrap(True)
    pad_px = 2 * mpl.rcParams["savefig.pad_inches"] * fig.dpi  # the margin a tight PNG adds around it
    for _ in range(4):
        fig.draw_without_rendering()  # runs the layout engine, as saving will
        width_px = fig.get_tightbbox(fig.canvas.get_renderer()).width * fig.dpi + pad_px
        if width_px <= CONTENT_PX:
            return
        scale = (CONTENT_PX - pad_px) / (width_px - pad_px) * 0.995
        w, h = fig.get_size_inches()
        fig.set_size_inches(w * scale, h * scale)
        engine = fig.get_layout_engine()  # constrained layout lays out again by itself when drawn
        if engine is None or isinstance(engine, PlaceHolderLayoutEngine):  # tight_layout ran once: again
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fig.tight_layout()


def figure_png(fig: Figure) -> str:
    """What the inline backend shows (a tight PNG, base64, fitted to the content column), with the smallest
    text size in its metadata."""
    from IPython.core.pylabtools import print_figure

    fit_to_column(fig)
    smallest = smallest_text_px(fig)
    metadata = {MIN_TEXT_KEY: f"{smallest:.2f}"} if smallest else {}
    return print_figure(fig, "png", bbox_inches="tight", base64=True, metadata=metadata)

"""Sphinx extension of the course book (listed in _config.yml): the site as readers meet it.

- config-inited: the edition being built (course.editions: `COURSE_EDITION=class` is the class edition, without
  the answers: its own run note and archive, the tag of its {only} blocks, the full edition's execution cache).

- builder-inited: cut the Chinese web font to the characters of the pages (course.fonts), so that a bare
  `jupyter-book build .` serves it too; the CSS that uses it is `_static/course.css`.
- source-read: in every notebook page that draws, a hidden cell after `%matplotlib inline` applies the
  course's figure style (course.figures: the same Chinese font, sizes, the smallest-text record); every
  chapter page gets a folded note saying how to run it as a notebook.
- html-page-context: every executed page offers its notebook (`.ipynb`, with outputs) in the download menu,
  rewritten to read like the page (course.downloads: glued values, plain Markdown admonitions and links); the
  thebe scripts, which the book does not use (no live code), are left out; figures (`_figures`): on a wide
  screen each keeps at least 1/1.5 of its natural width, on a phone it is scaled to the screen, and each is a
  link to its full-size image.
- build-finished: the course's source files packed as `_downloads/transformer-course.tar.gz` (course.downloads),
  which the role {course-archive}`text` links to (the run note of every chapter, the introduction); the role
  {course-notebook}`text` links to the page's own notebook, the same rewritten one as the download menu's.
"""

from __future__ import annotations

import hashlib
import html
import os
import re
import struct
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.util import logging

from course import downloads, editions, figures, fonts

logger = logging.getLogger(__name__)
CHAPTER_PAGE = re.compile(r"chapters/\d\d-[^/]+/index")
# The cell names the version of the figure style (a hash of course/figures.py, course/diagrams.py and of the
# font's characters), so that changing any of them makes the execution cache run the pages that draw again.
STYLE_CELL = """
```{code-cell} ipython3
:tags: [remove-cell]
# Added by the book build (course/sphinxext.py): the course's figure style (Chinese font, sizes), STYLE_VERSION.
from course.figures import use_course_style

use_course_style()
```
"""
RUN_NOTE = """
:::{admonition} Run this page yourself
:class: tip dropdown course-run-note
This page is a Jupyter notebook. Download it, with its outputs, from the download menu at the top of the page
(*.ipynb*) or here: {course-notebook}`notebook`. It runs in Jupyter once the course is installed. Download
{course-archive}`the course (transformer-course.tar.gz)`, unpack it, and in its folder
`python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e .` (Python 3.11: the pinned requirements,
and the course itself, which makes `solutions`, the reference code that the page imports, and the figure style
importable; on Linux, pip picks PyTorch's large CUDA build: the top of `requirements.txt` says how to install the
CPU-only one first); then `.venv/bin/jupyter lab NAME` where you saved the notebook. In the same folder, `make book`
builds this site and `make test` runs the course's tests (README.md).
:::
"""


RUN_NOTE_CLASS = """
:::{admonition} Run this page yourself
:class: tip dropdown course-run-note
This page is a Jupyter notebook. Download it, with its outputs, from the download menu at the top of the page
(*.ipynb*) or here: {course-notebook}`notebook`. This is the class edition of the course, published without
the answers to the graded exercises: the page's code imports the reference solutions (`solutions`), which this
edition leaves out, so the notebook shows the page's outputs but its code does not run. What you run is the
chapter's exercise notebook (*Exercises*, below this page), with PyTorch alone; {course-archive}`the course
(transformer-course.tar.gz)` holds every exercise notebook and says, in `CLASS-EDITION.md`, what it leaves out.
:::
"""


def _edition(app: Sphinx, config) -> None:
    """The edition being built (course.editions): the class edition sets the tag its pages' {only} blocks name,
    and reads the full edition's execution cache, so that it runs no page (course/editions.py says why)."""
    app.course_edition = editions.current()
    if app.course_edition == editions.CLASS:
        app.tags.add(editions.TAG)
        config.nb_execution_cache_path = os.environ.get(editions.CACHE_ENV) or str(Path(app.srcdir) / "_build" / ".jupyter_cache")
        logger.info(f"[course] class edition: no answers in the archive; execution cache {config.nb_execution_cache_path}")


def _build_font(app: Sphinx) -> None:
    info = fonts.ensure_font(Path(app.srcdir))
    logger.info(f"[course] Chinese web font: {info['woff2_bytes'] / 1024:.1f} KiB, "
                f"{len(info['characters'])} characters ({fonts.LICENSE})")


def _front_matter_end(text: str) -> int:
    if text.startswith("---\n"):
        end = text.find("\n---\n", 4)
        if end >= 0:
            return end + 5
    return 0


def _inject(app: Sphinx, docname: str, source: list[str]) -> None:
    text = source[0]
    start = _front_matter_end(text)
    if "kernelspec:" not in text[:start]:
        return  # not a notebook page
    matplotlib_cell = re.search(r"^```\{code-cell\}[^\n]*\n(?:(?!^```).*\n)*?%matplotlib inline\n(?:(?!^```).*\n)*?^```\n",
                                text, flags=re.M)
    if matplotlib_cell:
        cell = STYLE_CELL.replace("STYLE_VERSION", f"version {_style_version()}")
        text = text[:matplotlib_cell.end()] + cell + text[matplotlib_cell.end():]
    if CHAPTER_PAGE.fullmatch(docname):
        title = re.compile(r"^# .*\n", flags=re.M).search(text, start)
        if title:
            note = (RUN_NOTE_CLASS if app.course_edition == editions.CLASS else RUN_NOTE).replace("NAME", Path(docname).name + ".ipynb")
            text = text[:title.end()] + note + text[title.end():]
    source[0] = text


def _style_version() -> str:
    digest = hashlib.sha256(Path(figures.__file__).read_bytes())
    digest.update(Path(figures.__file__).with_name("diagrams.py").read_bytes())  # the concept diagrams the pages draw
    digest.update(fonts.site_characters().encode())
    return digest.hexdigest()[:12]


def _png_width(path: Path) -> int | None:
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return struct.unpack(">I", head[16:20])[0]


def _page(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    outdir = Path(app.outdir)
    # The executed notebook, offered by the theme's download menu (which looks for `ipynb_source`).
    executed = outdir.parent / "jupyter_execute" / f"{pagename}.ipynb"
    if doctree is not None and executed.is_file():
        # As the page reads: glued values, plain Markdown admonitions and links (course/downloads.py).
        downloads.write_notebook(app, pagename, executed, outdir / downloads.notebook_path(pagename))
        context["ipynb_source"] = f"{pagename}.ipynb"  # the theme links to _sources/ + this
    # No thebe: the page has no live code, and its two configuration scripts declared the same constant twice.
    # (In place: these are the builder's own lists, which later handlers, e.g. MathJax's, still append to.)
    for key in ("script_files", "css_files"):
        files = context.get(key, [])
        files[:] = [f for f in files if "thebe" not in str(f).lower()
                    and "THEBE" not in str(getattr(f, "attributes", {}).get("body", ""))]
    body = context.get("body")
    if not body:
        return
    body = re.sub(r'<script type="text/x-thebe-config">.*?</script>\s*<script>kernelName = [^<]*</script>', "", body, flags=re.S)
    # The execution table marks success and failure with emoji, which a reader without an emoji font sees as
    # boxes: use the check marks of the text fonts instead.
    context["body"] = body.replace("\u2705", "\u2713 ok").replace("\u274c", "\u2717 failed")


def _inside_link(html: str, position: int) -> bool:
    """Whether `position` of the HTML lies inside an <a> element (Sphinx's scaled images already are one)."""
    return html.rfind("<a ", 0, position) > html.rfind("</a>", 0, position)


def _figures(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """Figures readable on every screen (course.css). Each PNG figure carries its smallest width, 1/1.5 of its
    natural width, as the CSS variable --course-min-width, which course.css applies on wide screens only: there
    the figure's text stays as large as the body's small print. On a narrow screen (a phone) the figure is scaled
    to the column instead of scrolling inside its box, and since it then may be too small to read, every figure
    is a link to its full-size image, which the reader opens (and zooms) with a tap."""
    body = context.get("body")
    if not body:
        return
    sources = {Path(dest).name: Path(app.srcdir, src) for src, dest in app.builder.images.items()}

    def figure(m: re.Match) -> str:
        tag, src = m.group(0), m.group(1)
        path = sources.get(src.rsplit("/", 1)[-1])
        width = _png_width(path) if path and path.is_file() and src.endswith(".png") else None
        if width:
            min_width = f"--course-min-width: {width / figures.MAX_SHRINK:.0f}px"
            if ' style="' in tag:
                tag = tag.replace(' style="', f' style="{min_width}; ', 1)
            else:
                tag = tag.replace("<img ", f'<img style="{min_width}" ', 1)
        if _inside_link(body, m.start()):
            return tag
        return f'<a class="course-figure-link" href="{src}" title="Open the full-size image">{tag}</a>'

    body = re.sub(r'<img\b[^>]*?\bsrc="([^"]+)"[^>]*>', figure, body)
    context["body"] = re.sub(r"<figure\b[^>]*>.*?</figure>", _alt_from_caption, body, flags=re.S)


def caption_summary(caption_html: str) -> str:
    """What a figure shows, in words, from its caption: the caption's first sentence as plain text (math as its
    TeX without delimiters, no markup, no number, no link mark)."""
    text = re.sub(r'<span class="caption-number">.*?</span>|<a class="headerlink".*?</a>', "", caption_html, flags=re.S)
    text = html.unescape(re.sub(r"<[^>]+>", "", text))
    text = re.sub(r"\\\(|\\\)|\\text\{([^{}]*)\}", lambda m: m.group(1) or "", text)
    return downloads.first_sentence(text)


def _alt_from_caption(m: re.Match) -> str:
    """A figure's images get alt text that says what the figure shows (its caption's first sentence), not the
    image's file path, which Sphinx writes there and a screen reader would read out."""
    figure = m.group(0)
    caption = re.search(r"<figcaption>(.*?)</figcaption>", figure, flags=re.S)
    summary = caption_summary(caption.group(1)) if caption else ""
    if not summary:
        return figure
    alt = html.escape(summary, quote=True)
    return re.sub(r'(<img\b[^>]*?\balt=")[^"]*(")', lambda i: i.group(1) + alt + i.group(2), figure)


def _archive_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """{course-archive}`text`: a link to the course archive the build writes, relative to the page."""
    from docutils import nodes
    from sphinx.util.osutil import relative_uri

    env = inliner.document.settings.env
    uri = relative_uri(env.app.builder.get_target_uri(env.docname), downloads.ARCHIVE)
    return [nodes.reference(rawtext, text, refuri=uri, classes=["course-archive"])], []


def _notebook_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """{course-notebook}`text`: a link to the page's own notebook, the one the download menu offers (written by
    `_page` as `_sources/<page>.ipynb`, rewritten to read like the page), relative to the page. (myst-nb's
    {nb-download} would serve the executed notebook with its MyST source as it is.)"""
    from docutils import nodes
    from sphinx.util.osutil import relative_uri

    env = inliner.document.settings.env
    uri = relative_uri(env.app.builder.get_target_uri(env.docname), downloads.notebook_path(env.docname))
    return [nodes.reference(rawtext, text, refuri=uri, classes=["course-notebook"])], []


def _write_archive(app: Sphinx, exception: Exception | None) -> None:
    """The course as a source archive beside the site, when the book is built from the course's root."""
    root = Path(app.srcdir)
    if exception is not None or app.builder.format != "html" or not (root / "pyproject.toml").is_file():
        return
    count = downloads.write_archive(root, Path(app.outdir) / downloads.ARCHIVE, edition=app.course_edition)
    logger.info(f"[course] course archive ({app.course_edition} edition): {downloads.ARCHIVE}, {count} files")


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", _edition)
    app.add_role("course-archive", _archive_role)
    app.add_role("course-notebook", _notebook_role)
    app.connect("build-finished", _write_archive)
    app.connect("builder-inited", _build_font)
    app.connect("source-read", _inject)
    app.connect("html-page-context", _page, priority=400)  # before the theme builds its download menu (501)
    app.connect("html-page-context", _figures, priority=450)
    # env_version: what source-read injects (the run note, the style cell) is part of every page read, so a
    # change to it must make Sphinx read every page again (bump it with such a change).
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "5", "env_version": 4}

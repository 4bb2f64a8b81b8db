"""What a reader downloads from the site (issue 19): every executed page's notebook reads like the page (no MyST
role or directive fence left, the page's glued values in place), and the course itself, served as a source
archive beside the site, unpacks and installs.

Each check is also shown to fail on what breaks it: the notebook myst-nb keeps in jupyter_execute/ (the raw
MyST the site used to offer), small notebooks with one role or fence, an archive without pyproject.toml.
The build checked is `$COURSE_BUILD_DIR/_build/html`, built strictly first by the `built_book` fixture."""

import copy
import html
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import nbformat
import pytest

from conftest import BUILD_DIR, ROOT
from course import downloads

HTML = BUILD_DIR / "_build" / "html"
EXECUTED = BUILD_DIR / "_build" / "jupyter_execute"
ARCHIVE = HTML / downloads.ARCHIVE
CHAPTER = "chapters/09-complexity-kv-cache/index"

# A MyST role (`{glue:text}`key``) and a directive fence (```{note}, :::{admonition}).
MYST_ROLE = re.compile(r"\{[a-z][a-z:-]*\}`")
MYST_FENCE = re.compile(r"^[ \t>]*(`{3,}|:{3,})\{", re.M)
FENCE_LINE = re.compile(r"^[ \t>]*(`{3,}|~{3,}|:{3,})(\{)?")
# Read left to right: a role (with its content) or a code span, whichever starts first.
ROLE_OR_CODE_SPAN = re.compile(r"(?P<role>\{[a-z][a-z:-]*\}(`+).+?\2)|(?<!`)(`+)(?!`).+?(?<!`)\3(?!`)", re.S)


def myst_left(notebook) -> list[str]:
    """The roles and directive fences in a notebook's Markdown (its Markdown cells and Markdown outputs),
    outside code blocks and code spans (where a guide may show a role as an example)."""
    found = []
    for cell in notebook["cells"]:
        texts = [cell["source"]] if cell["cell_type"] == "markdown" else [
            o["data"]["text/markdown"] for o in cell.get("outputs", []) if "text/markdown" in o.get("data", {})]
        for text in texts:
            text = without_code_blocks("".join(text) if isinstance(text, list) else text)
            found += [m.group(0).strip() for m in MYST_FENCE.finditer(text)]
            text = ROLE_OR_CODE_SPAN.sub(lambda m: m.group("role") or "", text)  # code spans out, roles kept
            found += MYST_ROLE.findall(text)
    return found


def without_code_blocks(text: str) -> str:
    """The text less its fenced code blocks; a directive's fence (```{note}) and body stay."""
    kept, closing = [], None
    for line in text.split("\n"):
        fence = FENCE_LINE.match(line)
        if closing:
            if fence and fence.group(1)[0] == closing[0] and len(fence.group(1)) >= len(closing) and not fence.group(2):
                closing = None
            continue
        if fence and not fence.group(2) and fence.group(1)[0] != ":":
            closing = fence.group(1)
            continue
        kept.append(line)
    return "\n".join(kept)


def markdown_text(notebook) -> str:
    return "\n".join(c["source"] for c in notebook["cells"] if c["cell_type"] == "markdown")


def notebook(*cells) -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(c) if isinstance(c, str) else c for c in cells])


# --- the notebooks --------------------------------------------------------------------------------------------


def test_no_downloaded_notebook_contains_a_myst_role_or_fence(built_book):
    offered = sorted((HTML / "_sources").rglob("*.ipynb"))
    chapters = sorted(ROOT.glob("chapters/[0-9][0-9]-*/index.md"))
    assert len(offered) >= len(chapters) > 0
    left = {str(p.relative_to(HTML)): myst_left(nbformat.read(p, as_version=4)) for p in offered}
    assert not {page: found for page, found in left.items() if found}


def offered_notebooks(page: Path) -> list[Path]:
    """The notebooks a page of the site links to (its download menu, its run note, an exercise page's link),
    as files of the built site."""
    text = page.read_text(encoding="utf-8")
    hrefs = {html.unescape(h).split("#")[0] for h in re.findall(r'href="([^"]+\.ipynb)(?:#[^"]*)?"', text)}
    return sorted({(page.parent / h).resolve() for h in hrefs if not re.match(r"\w+://", h)})


def test_every_notebook_link_of_the_site_serves_a_notebook_that_reads_like_its_page(built_book):
    """Every link to a .ipynb on every page (not only the download menu's: the run note's "notebook" too) leads
    to a notebook with no MyST left. The run note's link as it was (myst-nb's {nb-download}, which served the
    executed notebook from _downloads/ with its MyST as typed) fails the same check."""
    links = {page: offered_notebooks(page) for page in sorted(HTML.rglob("*.html"))}
    chapter = HTML / f"{CHAPTER}.html"
    assert len(links[chapter]) == 1 and links[chapter][0] == (HTML / "_sources" / f"{CHAPTER}.ipynb").resolve()
    served = sorted({nb for found in links.values() for nb in found})
    assert len(served) >= len(list(ROOT.glob("chapters/[0-9][0-9]-*/index.md"))) * 2  # pages and exercises
    assert not [nb for nb in served if not nb.is_file()]
    assert not {str(nb.relative_to(HTML.resolve())): left for nb in served
                if (left := myst_left(nbformat.read(nb, as_version=4)))}
    raw = EXECUTED / f"{CHAPTER}.ipynb"  # what {nb-download}`notebook <index.ipynb>` copied into _downloads/
    assert len(myst_left(nbformat.read(raw, as_version=4))) >= 99


def unexplained_relative_links(notebook) -> list[str]:
    """Links of a downloaded notebook that lead nowhere beside it (relative links to the site's pages), unless
    its first cell says that they are relative to the site."""
    if notebook.cells and notebook.cells[0].source == downloads.RELATIVE_NOTE:
        return []
    found = []
    for text in (c.source for c in notebook.cells if c.cell_type == "markdown"):
        found += [link for link in re.findall(r"\]\(([^()\s]+)\)", without_code_blocks(text))
                  if not re.match(r"(\w+://|#|attachment:|mailto:)", link)]
    return found


def test_a_downloaded_notebook_says_where_its_links_lead(built_book):
    """Without the site's address (html.baseurl, not set here), the notebook's first cell says its links are
    relative to the site; the notebook without that cell (as before) has links that lead nowhere beside it."""
    downloaded = nbformat.read(HTML / "_sources" / f"{CHAPTER}.ipynb", as_version=4)
    assert downloaded.cells[0].source == downloads.RELATIVE_NOTE and not unexplained_relative_links(downloaded)
    downloaded.cells.pop(0)
    assert len(unexplained_relative_links(downloaded)) >= 10


def test_links_take_the_site_address_where_it_is_known():
    page = "chapters/02-qkv-attention/index.html"
    base = "https://course.example.org/transformer/"
    assert downloads.site_address(page, "../03-worked-examples/index.html#sec-a", base) == \
        "https://course.example.org/transformer/chapters/03-worked-examples/index.html#sec-a"
    assert downloads.site_address(page, "../../_downloads/transformer-course.tar.gz", base) == \
        "https://course.example.org/transformer/_downloads/transformer-course.tar.gz"
    assert downloads.site_address(page, "../../_sources/chapters/02-qkv-attention/index.ipynb", base) == \
        "https://course.example.org/transformer/_sources/chapters/02-qkv-attention/index.ipynb"
    for kept in ("#sec-b", "https://arxiv.org/abs/1706.03762", "mailto:a@b.c"):
        assert downloads.site_address(page, kept, base) == kept
    assert downloads.site_address(page, "../03-worked-examples/index.html", "") == "../03-worked-examples/index.html"


def test_the_myst_check_fails_on_the_raw_notebook_and_on_one_role_or_fence(built_book):
    raw = nbformat.read(EXECUTED / f"{CHAPTER}.ipynb", as_version=4)  # what the download menu offered before
    assert len([r for r in myst_left(raw) if r == "{glue:text}`"]) >= 99
    for broken in ("The page says {glue:text}`x:.1f`.", "See {doc}`../intro`.", "As {cite:t}`vaswani2017` show",
                   "(Figure {numref}`fig-kv`)", ":::{admonition} Note\nText\n:::", "```{note}\nText\n```",
                   "> quoted\n> ::::{dropdown} Title\n> ::::"):
        assert myst_left(notebook(broken)), broken
    # a role shown as code, in a code span or a code block, is not MyST left over
    assert not myst_left(notebook("Write `` {glue:text}`key` `` to paste a value:\n\n```md\n{glue:text}`key:.2f`\n:::{note}\n```"))


def test_the_downloaded_notebook_shows_the_values_the_page_shows(built_book):
    """Chapter 09: every value its page pastes (`pasted-text` spans, in order) is in the download, in order;
    the notebook jupyter_execute/ keeps (raw MyST) fails the same check."""
    page = (HTML / f"{CHAPTER}.html").read_text(encoding="utf-8")
    values = [html.unescape(v) for v in re.findall(r'<span class="pasted-text">([^<]*)</span>', page)]
    assert len(values) >= 99, len(values)

    def in_order(text: str) -> list[str]:
        missing, at = [], 0
        for value in values:
            found = text.find(value, at)
            if found < 0:
                missing.append(value)
            else:
                at = found + len(value)
        return missing

    downloaded = nbformat.read(HTML / "_sources" / f"{CHAPTER}.ipynb", as_version=4)
    assert not in_order(markdown_text(downloaded))
    glued = json.loads((EXECUTED / f"{CHAPTER}.glue.json").read_text(encoding="utf-8"))
    flops = f"{int(glued['flops_counted']['data']['text/plain']):,}"  # {glue:text}`flops_counted:,`
    assert f"Both say {flops} FLOPs" in markdown_text(downloaded)
    assert in_order(markdown_text(nbformat.read(EXECUTED / f"{CHAPTER}.ipynb", as_version=4)))


def test_the_downloaded_notebook_keeps_every_code_cell_and_hides_what_the_page_removes(built_book):
    raw = nbformat.read(EXECUTED / f"{CHAPTER}.ipynb", as_version=4)
    downloaded = nbformat.read(HTML / "_sources" / f"{CHAPTER}.ipynb", as_version=4)
    code = [c for c in downloaded.cells if c.cell_type == "code"]
    assert [c.source for c in code] == [c.source for c in raw.cells if c.cell_type == "code"]
    removed = [c for c in code if "remove-cell" in c.metadata.get("tags", [])]
    assert removed and all(c.metadata["jupyter"] == {"source_hidden": True, "outputs_hidden": True} for c in removed)
    assert any("use_course_style()" in c.source for c in removed)  # the figure style still applies
    assert "jupytext" not in downloaded.metadata  # Jupyter opens it as a plain notebook, not as MyST text


def test_the_conversion_of_each_kind_of_myst():
    """Without a site: values formatted as myst-nb formats them, admonitions as quotes, labels as anchors,
    code left as written, numbered equations tagged; removed Markdown goes, removed code stays collapsed."""
    glue = {"x": {"data": {"text/plain": "0.123456"}}, "n": {"data": {"text/plain": "301989888"}},
            "t": {"data": {"text/markdown": "**bold** and {doc}`intro`", "text/plain": "'t'"}},
            "img": {"data": {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure size 640x480 with 1 Axes>"}}}

    class Numbered(downloads.Resolver):
        def xref(self, role, target, title):
            if role == "eq":
                return "[(9.2)](#equation-kv)"
            return "[Fig. 9.1](#fig-a)" if role == "numref" else f"[{title or target.upper()}]({target}.html)"

    source = ("(sec-a)=\n## A\nIt is {glue:text}`x:.1f`, {glue:text}`n:,` FLOPs, {glue:text}`x`; {glue:md}`t`.\n"
              ":::{admonition} Why\n:class: tip dropdown\nSee {ref}`Section A <sec-a>`.\n\n```python\nprint('{doc}`x`')\n```\n:::\n"
              "After.\n\n```{note}\nPlain {math}`a^2`.\n```\n$$\nE = mc^2\n$$ (kv)\n\n% a comment\n```{glue:figure} img\n:name: fig-a\n\nThe {glue:text}`x:.2f` curve.\n```\n"
              "End `{doc}` and {eq}`kv`.")
    cells = [source, nbformat.v4.new_code_cell("glue('x', 0.123456)", metadata={"tags": ["remove-cell"]}),
             nbformat.v4.new_markdown_cell("hidden", metadata={"tags": ["remove-cell"]})]
    out = downloads.readable_notebook(notebook(*cells), Numbered(glue))
    text = out.cells[0].source
    assert '<a id="sec-a"></a>\n\n## A' in text
    assert "It is 0.1, 301,989,888 FLOPs, 0.123456; **bold** and [INTRO](intro.html)." in text
    assert "> **Why**\n>\n> See [Section A](sec-a.html).\n>\n> ```python\n> print('{doc}`x`')\n> ```\n\nAfter." in text
    assert "> **Note**\n>\n> Plain $a^2$." in text
    assert "E = mc^2\n\\tag{9.2} $$" in text and "a comment" not in text
    assert '<a id="fig-a"></a>\n\n![The 0.12 curve.](attachment:img.png)\n\n*Fig. 9.1: The 0.12 curve.*' in text
    assert out.cells[0].attachments == {"img.png": {"image/png": "iVBORw0KGgo="}}
    assert text.endswith("End `{doc}` and [(9.2)](#equation-kv).")
    assert [c.cell_type for c in out.cells] == ["markdown", "code"]
    assert out.cells[1].metadata["collapsed"] and out.cells[1].metadata["jupyter"]["source_hidden"]
    with pytest.raises(KeyError, match="no glued value 'y'"):  # a missing value fails the build, never a raw role
        downloads.readable_notebook(notebook("{glue:text}`y`"), downloads.Resolver(glue))


# --- the course archive ---------------------------------------------------------------------------------------


def install_and_import(folder: Path, target: Path) -> subprocess.CompletedProcess:
    """Install an unpacked course (no dependencies: they are this environment's) into `target`, then import
    its three packages from there, in a fresh interpreter outside the repository."""
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                              "--no-index", "--target", str(target), str(folder)],
                             capture_output=True, text=True, timeout=300, cwd=target.parent)
    if install.returncode:
        return install
    code = ("import autograder, course, solutions, solutions.ch09_complexity_kv_cache\n"
            "print('\\n'.join(m.__file__ for m in (autograder, course, solutions)))")
    env = {"PATH": str(Path(sys.executable).parent), "PYTHONPATH": str(target), "MPLBACKEND": "Agg"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=target.parent,
                            env=env)
    if result.returncode == 0 and not all(line.startswith(str(target)) for line in result.stdout.split()):
        result.returncode, result.stderr = 1, f"imported from elsewhere: {result.stdout}"
    return result


def unpack(archive: Path, into: Path) -> Path:
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / downloads.ARCHIVE_ROOT


def test_the_site_offers_the_course_archive_and_it_installs(built_book, tmp_path):
    intro = (HTML / "intro.html").read_text(encoding="utf-8")
    chapter = (HTML / f"{CHAPTER}.html").read_text(encoding="utf-8")
    for page, text in (("intro.html", intro), (f"{CHAPTER}.html", chapter)):
        links = re.findall(r'href="([^"]*transformer-course\.tar\.gz)"', text)
        assert links and (HTML / page).parent.joinpath(links[0]).resolve() == ARCHIVE.resolve(), page
        words = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", text))
        assert "make book" in words and "make test" in words, page
    with tarfile.open(ARCHIVE) as tar:
        names = {m.name.removeprefix(f"{downloads.ARCHIVE_ROOT}/") for m in tar.getmembers()}
    assert names == set(downloads.course_files(ROOT))
    assert {"pyproject.toml", "Makefile", "requirements.txt", "constraints.txt", "_config.yml"} <= names
    assert not [n for n in names if n.split("/")[0] in ("_build", ".venv", "grading") or "__pycache__" in n]
    folder = unpack(ARCHIVE, tmp_path / "unpacked")
    result = install_and_import(folder, tmp_path / "site-packages")
    assert result.returncode == 0, result.stderr[-2000:]


def last_commit_times(root: Path, names) -> dict[str, int]:
    """Each file's date as `git log -1` gives it, one file at a time (for a file with changes not committed, its
    modification time): what the appendix Build status shows for a page."""
    dates = {}
    for name in names:
        dirty = subprocess.run(["git", "status", "--porcelain", "--", name], cwd=root, capture_output=True, text=True).stdout
        when = subprocess.run(["git", "log", "-1", "--format=%ct", "--", name], cwd=root, capture_output=True, text=True).stdout
        dates[name] = int((root / name).stat().st_mtime) if dirty.strip() or not when.strip() else int(when)
    return dates


def dated_before_their_change(archive: Path, root: Path) -> dict[str, tuple[int, int]]:
    """The archive's files whose date is not when the file last changed (its commit): {name: (date, change)}."""
    with tarfile.open(archive) as tar:
        dates = {m.name.removeprefix(f"{downloads.ARCHIVE_ROOT}/"): int(m.mtime) for m in tar.getmembers()}
    changed = last_commit_times(root, dates)
    return {name: (date, changed[name]) for name, date in dates.items() if date != changed[name]}


def test_every_archive_file_is_dated_by_its_last_change(built_book, tmp_path):
    """Not 1970-01-01: a site built from the unpacked archive shows the same Build status dates. An archive
    packed with every date 0 (as before) fails the same check."""
    if not (ROOT / ".git").exists():
        pytest.skip("no git history in this copy")
    assert not dated_before_their_change(ARCHIVE, ROOT)
    with tarfile.open(ARCHIVE) as tar, tarfile.open(tmp_path / "epoch.tar.gz", "w:gz") as out:
        for member in tar.getmembers():
            data = tar.extractfile(member).read()
            member.mtime = 0
            out.addfile(member, io.BytesIO(data))
    assert len(dated_before_their_change(tmp_path / "epoch.tar.gz", ROOT)) == len(downloads.course_files(ROOT))


def test_the_install_check_fails_on_an_archive_that_lacks_a_needed_file(built_book, tmp_path):
    folder = unpack(ARCHIVE, tmp_path / "unpacked")
    (folder / "pyproject.toml").unlink()
    assert install_and_import(folder, tmp_path / "a").returncode != 0
    (folder / "pyproject.toml").write_bytes(unpack(ARCHIVE, tmp_path / "again").joinpath("pyproject.toml").read_bytes())
    (folder / "solutions" / "__init__.py").unlink()  # not a package any more: not installed
    assert install_and_import(folder, tmp_path / "b").returncode != 0


def test_the_archive_is_the_same_bytes_for_the_same_files_and_packs_no_build(tmp_path):
    """Without git (a copy unpacked from the archive), the files outside build folders, environments, grading
    runs and caches, each dated by its modification time; owners and the time of packing do not change the
    bytes, a file's date does."""
    course = tmp_path / "course"
    for name, text in {"pyproject.toml": "[project]\n", "solutions/__init__.py": "", "autograder/grading/run.py": "x = 1\n",
                       "_build/html/index.html": "", ".venv/bin/python": "", "grading/run/results.json": "{}",
                       "course/__pycache__/a.pyc": ""}.items():
        (course / name).parent.mkdir(parents=True, exist_ok=True)
        (course / name).write_text(text)
    assert downloads.course_files(course) == ["autograder/grading/run.py", "pyproject.toml", "solutions/__init__.py"]
    for path in course.rglob("*"):
        os.utime(path, (1_700_000_000, 1_700_000_000))
    downloads.write_archive(course, tmp_path / "one.tar.gz")
    downloads.write_archive(course, tmp_path / "two.tar.gz")
    assert (tmp_path / "one.tar.gz").read_bytes() == (tmp_path / "two.tar.gz").read_bytes()
    with tarfile.open(tmp_path / "one.tar.gz") as tar:
        assert {m.mtime for m in tar.getmembers()} == {1_700_000_000}
    os.utime(course / "pyproject.toml", (1_800_000_000, 1_800_000_000))
    downloads.write_archive(course, tmp_path / "dated.tar.gz")
    assert (tmp_path / "dated.tar.gz").read_bytes() != (tmp_path / "one.tar.gz").read_bytes()
    (course / "pyproject.toml").write_text("[project]\nname = 'changed'\n")
    downloads.write_archive(course, tmp_path / "three.tar.gz")
    assert (tmp_path / "three.tar.gz").read_bytes() != (tmp_path / "one.tar.gz").read_bytes()


# --- a page run again from the archive ------------------------------------------------------------------------

GLYPH_MISSING = re.compile(r"Glyph \d+ .*missing from font|findfont: Font family .* not found|no Chinese font was found")
# The figure style as it was before issue 26: the site's cut font or nothing (matplotlib then draws boxes).
OLD_STYLE_FONT = """    if fonts.OTF.is_file():
        from matplotlib import font_manager

        font_manager.fontManager.addfont(str(fonts.OTF))
        mpl.rcParams["font.family"] = ["DejaVu Sans", fonts.FAMILY]
"""
CHINESE_PLOT = ("%matplotlib inline\nimport matplotlib.pyplot as plt\nfrom course.figures import use_course_style\n"
                "use_course_style()\nfig, ax = plt.subplots()\nax.set_title('我 喜欢 苹果')\nplt.show()")


def run_in(folder: Path, notebook, monkeypatch, cwd: Path) -> list[str]:
    """Run a notebook top to bottom in a fresh kernel that imports the course from `folder` (an unpacked
    archive, so the site's cut font is not there); return what its cells wrote to stderr."""
    from nbclient import NotebookClient

    monkeypatch.setenv("PYTHONPATH", str(folder))
    monkeypatch.setenv("MPLCONFIGDIR", str(folder.parent / "mplconfig"))  # a fresh font cache, no earlier state
    notebook = copy.deepcopy(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    return ["".join(o.get("text", "")) for c in notebook.cells if c.cell_type == "code" for o in c.outputs
            if o.get("name") == "stderr"]


def test_a_page_run_from_the_archive_draws_its_chinese_with_an_installed_font(built_book, tmp_path, monkeypatch):
    """Chapter 05's notebook, as the site serves it, run top to bottom in the unpacked archive (no cut font
    there, only the installed Noto Sans CJK): no glyph is missing. A small page with the figure style as it was
    (the cut font or nothing) warns that 我 is missing."""
    from course import fonts

    try:
        fonts.find_source()
    except FileNotFoundError:
        pytest.skip(fonts.INSTALL_HINT)
    folder = unpack(ARCHIVE, tmp_path / "unpacked")
    assert not (folder / "_static" / "fonts" / "course-cjk.otf").exists()
    chapter = "chapters/05-masks/index"
    page = nbformat.read(HTML / "_sources" / f"{chapter}.ipynb", as_version=4)
    assert any("use_course_style()" in c.source for c in page.cells) and "我" in json.dumps(page.cells, ensure_ascii=False)
    stderr = run_in(folder, page, monkeypatch, folder / "chapters" / "05-masks")
    assert not [line for line in stderr if GLYPH_MISSING.search(line)], stderr
    plot = notebook(nbformat.v4.new_code_cell(CHINESE_PLOT))
    assert not [t for t in run_in(folder, plot, monkeypatch, tmp_path) if GLYPH_MISSING.search(t)]
    style = folder / "course" / "figures.py"
    text = style.read_text(encoding="utf-8")
    start, end = text.index("    found = chinese_font()\n"), text.index("    try:\n        from IPython")
    style.write_text(text[:start] + OLD_STYLE_FONT + text[end:], encoding="utf-8")
    assert [t for t in run_in(folder, plot, monkeypatch, tmp_path) if re.search(r"Glyph 25105 .*missing", t)]

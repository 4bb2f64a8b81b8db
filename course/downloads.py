"""What a reader downloads from the site: each executed page as a notebook that reads like the page, and the
course itself as a source archive (both written by the book build, course/sphinxext.py).

The notebook myst-nb executes keeps the page's MyST source in its Markdown cells: `{glue:text}` roles where the
page shows numbers, `:::{admonition}` fences, `{doc}` and `{ref}` roles, which Jupyter shows as they are typed.
`readable_notebook` turns that notebook into plain Jupyter Markdown:

- glue roles and directives become the glued values, formatted as myst-nb formats them on the page (its own
  `format_plain_text`), read from the executed notebook's glue outputs;
- cross-references (`{doc}`, `{ref}`, `{numref}`, `{eq}`, `{term}`, `{cite:t}`/`{cite:p}`, any `domain:type`
  role) are resolved by the Sphinx domain that resolves them on the page, so the notebook shows the same text
  (title, "Fig. 9.3", "(2.1)", "Vaswani et al. [2017]") as a Markdown link to the site's page;
- admonitions and dropdowns become a bold title and a block quote; figures, tables and code blocks their Markdown
  equivalents; labels become HTML anchors, comments go; math stays ($...$ is Jupyter's own), a labelled
  equation gets its number as `\\tag`;
- links to the site's other pages and files become the site's full address where it is known (`html.baseurl` in
  _config.yml, Sphinx's `html_baseurl`), since nothing of the site lies beside a downloaded notebook; where it is
  not, they stay relative to the page and the notebook's first cell says so;
- code cells all stay, so the notebook runs top to bottom: a cell the page removes (it may compute glued values,
  or apply the figure style) is kept, collapsed, with its tag; a hidden input or output is hidden in Jupyter too.

Code spans and fenced code blocks are left exactly as written (a guide may show a role as an example).

`write_archive` packs the course's source files (those git knows, or, without git, every file outside the build
folders) into a tar.gz whose bytes depend only on those files and their dates: sorted entries, fixed owners, and
each file dated as the appendix *Build status* dates it (`file_dates`): its last commit, or, for a file with
changes not committed or without git, its modification time. A site built from the unpacked archive then shows
the same dates as the site it came from.
"""

from __future__ import annotations

import copy
import gzip
import io
import json
import os
import posixpath
import re
import subprocess
import tarfile
from pathlib import Path
import nbformat

from course import editions

# Where the site serves the course archive, and the folder name inside it.
ARCHIVE = "_downloads/transformer-course.tar.gz"
ARCHIVE_ROOT = "transformer-course"


def notebook_path(docname: str) -> str:
    """Where the site serves a page's notebook (the theme's download menu links to `_sources/<page>.ipynb`)."""
    return f"_sources/{docname}.ipynb"

# Never packed, even when a walk (no git) finds them: build outputs, environments and grading runs at the top,
# caches anywhere.
EXCLUDED_TOP = {"_build", ".venv", "venv", "grading", ".git"}
EXCLUDED_PARTS = {".git", "__pycache__", ".pytest_cache", ".ipynb_checkpoints", ".jupyter_cache", "_build"}
EXCLUDED_SUFFIXES = (".pyc", ".pyo", ".egg-info")

# A role, `{name}`content`` (content in a run of one or more backticks), or a code span, which is kept as it is.
ROLE_OR_CODE = re.compile(r"\{(?P<name>[A-Za-z][\w:+.-]*)\}(?P<ticks>`+)(?P<content>.+?)(?P=ticks)|(?P<code>(`+).+?\5)", re.S)
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|:{3,}|~{3,})(?:\{(?P<name>[^}\s]+)\})?(?P<rest>.*)$")
TARGET = re.compile(r"^\((?P<label>[^()\s]+)\)=\s*$")
LABELLED_MATH = re.compile(r"\$\$[ \t]*\((?P<label>[^()\s]+)\)[ \t]*$")

ADMONITIONS = {"admonition", "note", "tip", "hint", "important", "warning", "caution", "attention", "danger", "error",
               "seealso", "dropdown", "topic", "sidebar", "margin", "epigraph", "todo"}
CODE_BLOCKS = {"code-block", "code", "sourcecode", "literalinclude"}
DROPPED = {"tableofcontents", "toctree", "nb-exec-table", "bibliography", "index"}
# The roles of the standard and math domains that take no `domain:` prefix in MyST.
PLAIN_XREF_ROLES = {"doc": ("std", "doc"), "ref": ("std", "ref"), "numref": ("std", "numref"), "term": ("std", "term"),
                    "keyword": ("std", "keyword"), "option": ("std", "option"), "eq": ("math", "eq"),
                    "cite": ("cite", "p")}
LOWERCASE_TARGETS = {("std", "ref"), ("std", "numref"), ("std", "term"), ("std", "keyword")}
# The mime types a bare `{glue}` pastes, most preferred first (myst-nb's order for HTML, less what Markdown lacks).
GLUE_PRIORITY = ["text/html", "image/svg+xml", "image/png", "image/jpeg", "text/markdown", "text/latex", "text/plain"]


class Resolver:
    """How names in the page become text: glued values and cross-references. This one knows no site (the plain
    text of each reference); `SphinxResolver` asks the Sphinx build."""

    def __init__(self, glue: dict[str, dict] | None = None):
        self.glue_data = glue or {}

    def glue(self, key: str) -> dict:
        """The glued output `key` (`doc::key` for another page's), as myst-nb stores it."""
        if key not in self.glue_data:
            raise KeyError(f"no glued value {key!r}")
        return self.glue_data[key]

    def xref(self, role: str, target: str, title: str | None) -> str:
        """The Markdown of a cross-reference role; without a site, its title or target."""
        return title or target

    def url(self, path: str) -> str:
        """A link from the page to `path`, a file of the site (e.g. the course archive)."""
        return path

    def image(self, path: str) -> str:
        """Where the site serves the image that the page's source names `path`."""
        return path

    def notebook_link(self, text: str) -> str:
        """A link to the page's own notebook; without a site, its text."""
        return text

    def only(self, expression: str) -> bool:
        """Whether an {only} block is shown: as Sphinx evaluates its expression over the build's tags (here none)."""
        from sphinx.util.tags import Tags

        return Tags().eval_condition(expression)


def site_address(page_uri: str, link: str, base: str) -> str:
    """A link written relative to a page of the site (`page_uri`, e.g. `chapters/02-x/index.html`) as it reads
    from anywhere: the site's full address `base` and the file's path in the site. A link to another site or
    within the page, or any link when `base` is empty (the address is not known), is left as it is."""
    if not base or not link or link.startswith("#") or re.match(r"[A-Za-z][\w+.-]*:", link) or link.startswith("/"):
        return link
    path, hash_, fragment = link.partition("#")
    path = posixpath.normpath(posixpath.join(posixpath.dirname(page_uri), path))
    return f"{base.rstrip('/')}/{path}{hash_}{fragment}"


RELATIVE_NOTE = ("*This notebook is a page of the course's website, downloaded. Its links to the site's other pages "
                 "are relative to the page's address on the site: follow them on the site, where they lead to the "
                 "page named; they do not open beside a downloaded copy.*")
ADDRESS_NOTE = "*This notebook is the page [{title}]({address}) of the course's website; its links lead to the site.*"


def split_title(content: str) -> tuple[str | None, str]:
    """`title <target>` or `target`, as Sphinx's cross-reference roles read them."""
    m = re.fullmatch(r"(?P<title>.*?)\s*<(?P<target>[^<>]+)>", content.strip(), flags=re.S)
    if m and m.group("title"):
        return m.group("title"), m.group("target")
    return None, content.strip()


def plain_text(output: dict, fmt_spec: str = "s") -> str:
    """A glued output's text/plain as `{glue:text}` shows it (myst-nb's own formatting of the format spec)."""
    from myst_nb.core.variables import format_plain_text

    return format_plain_text(output["data"]["text/plain"], fmt_spec)


def first_sentence(text: str, min_words: int = 4) -> str:
    """The first sentence of a caption, in one line: what a figure shows, as its alt text (the site's, and the
    downloaded notebook's). A sentence ends at a full stop outside brackets that a space or the end follows; a
    first sentence of fewer than `min_words` words (a title, "Label smoothing.") takes the next one with it."""
    text = re.sub(r"\s+", " ", text).strip()
    depth = 0
    for i, char in enumerate(text):
        depth += (char in "([") - (char in ")]")
        if char == "." and depth == 0 and (i + 1 == len(text) or text[i + 1] == " ") and len(text[:i].split()) >= min_words:
            return text[:i + 1]
    return text


def markdown_summary(caption: str) -> str:
    """A Markdown caption's first sentence as plain text (links as their text, no emphasis, code or math marks)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", caption)
    text = re.sub(r"[*`$]|\\text\{([^{}]*)\}", lambda m: m.group(1) or "", text)
    return first_sentence(text).replace("[", "(").replace("]", ")")


def pasted(output: dict, attachments: dict, key: str, alt: str = "") -> str:
    """A glued output as `{glue}` pastes it: the first mime type that Markdown can show (an image with `alt` as
    its alt text, or its name)."""
    data = output["data"]
    for mime in GLUE_PRIORITY:
        if mime in data:
            if mime.startswith("image/"):
                name = f"{key}.{mime.split('/')[1].split('+')[0]}"
                attachments[name] = {mime: data[mime]}
                return f"![{alt or key}](attachment:{name})"
            if mime == "text/plain":
                return plain_text(output)
            value = data[mime]
            return "".join(value) if isinstance(value, list) else value
    raise KeyError(f"glued value {key!r} has nothing Markdown can show")


def role_markdown(name: str, content: str, resolver: Resolver, attachments: dict) -> str:
    """The Markdown that stands for one role."""
    if name in ("glue:text", "glue:md"):
        doc, sep, rest = content.rpartition("::")  # [doc::]key[:format]
        key, colon, fmt = rest.partition(":")
        output = resolver.glue(doc + sep + key)
        if name == "glue:md":
            return inline(pasted_markdown(output), resolver, attachments)
        return plain_text(output, fmt if colon else "s")
    if name in ("glue", "glue:", "glue:any"):
        return inline(pasted(resolver.glue(content), attachments, content), resolver, attachments)
    if name == "math":
        return f"${content}$"
    if name in ("sub", "sup", "kbd"):
        return f"<{name}>{content}</{name}>"
    if name == "abbr":
        return re.sub(r"\s*\(.*\)\s*$", "", content)
    if name == "course-archive":
        return f"[{content}]({resolver.url(ARCHIVE)})"
    if name == "course-notebook":
        return resolver.notebook_link(content)
    title, target = split_title(content)
    if name in ("nb-download", "download"):
        return f"[{title or target}]({target})"
    if name in PLAIN_XREF_ROLES or ":" in name:
        return resolver.xref(name, target, title)
    return title or target  # any other role: its text


def pasted_markdown(output: dict) -> str:
    value = output["data"]["text/markdown"]
    return "".join(value) if isinstance(value, list) else value


def inline(text: str, resolver: Resolver, attachments: dict) -> str:
    """Roles replaced, code spans kept."""
    def one(m: re.Match) -> str:
        if m.group("code"):
            return m.group("code")
        return role_markdown(m.group("name"), m.group("content"), resolver, attachments)

    return ROLE_OR_CODE.sub(one, text)


def quoted(text: str) -> str:
    return "\n".join(f"> {line}" if line.strip() else ">" for line in text.strip("\n").split("\n"))


def directive_parts(lines: list[str]) -> tuple[dict[str, str], list[str]]:
    """A directive body's options (`:key: value` lines or a `---` YAML block at its start) and the rest."""
    options: dict[str, str] = {}
    if lines and lines[0].strip() == "---":
        end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
        if end is not None:
            for line in lines[1:end]:
                key, _, value = line.partition(":")
                options[key.strip()] = value.strip()
            return options, lines[end + 1:]
    i = 0
    while i < len(lines):
        m = re.match(r"^\s*:([\w-]+):\s*(.*)$", lines[i])
        if not m:
            break
        options[m.group(1)] = m.group(2).strip()
        i += 1
    return options, lines[i:]


def directive_markdown(name: str, argument: str, body: list[str], resolver: Resolver, attachments: dict) -> str:
    """The Markdown that stands for one directive."""
    options, rest = directive_parts(body)
    if name in DROPPED:
        return ""
    if name == "only":  # a block of one edition (course.editions): kept where the page keeps it
        return markdown(rest, resolver, attachments) if resolver.only(argument) else ""
    if name in CODE_BLOCKS:
        return "```" + argument + "\n" + "\n".join(rest) + "\n```"
    if name == "math":
        math = "\n".join(rest).strip()
        if "label" in options:
            math += f" \\tag{{{equation_number(options['label'], resolver)}}}"
            return f'<a id="equation-{options["label"]}"></a>\n\n$$\n{math}\n$$'
        return f"$$\n{math}\n$$"
    anchor = f'<a id="{options["name"]}"></a>\n\n' if options.get("name") else ""
    if name in ("figure", "image"):
        alt = inline(options.get("alt", ""), resolver, attachments)
        image = f"![{alt}]({resolver.image(argument)})"
        caption = markdown(rest, resolver, attachments).strip()
        caption = numbered(caption, options, resolver) if name == "figure" else ""
        return anchor + image + (f"\n\n*{caption}*" if caption else "")
    if name in ("glue", "glue:", "glue:any", "glue:figure", "glue:math", "glue:md"):
        output = resolver.glue(argument)
        if name == "glue:md":
            shown = inline(pasted_markdown(output), resolver, attachments)
        elif name == "glue:math":
            latex = output["data"].get("text/latex") or output["data"]["text/plain"]
            shown = "$$\n" + ("".join(latex) if isinstance(latex, list) else latex).strip().strip("$") + "\n$$"
        caption = markdown(rest, resolver, attachments).strip()
        if name not in ("glue:md", "glue:math"):
            shown = inline(pasted(output, attachments, argument, markdown_summary(caption)), resolver, attachments)
        caption = numbered(caption, options, resolver)
        return anchor + shown + (f"\n\n*{caption}*" if caption else "")
    title = inline(argument.strip(), resolver, attachments)
    content = markdown(rest, resolver, attachments).strip("\n")
    if name in ADMONITIONS:
        title = title or name.capitalize()
        return quoted(f"**{title}**\n\n{content}")
    if name in ("table", "list-table") and options.get("name"):
        return f"{anchor}**{numbered(title, options, resolver)}**\n\n{content}"
    # a table, a list-table or a directive of another extension: its title in bold, then its content
    return (f"**{title}**\n\n" if title else "") + content


def numbered(caption: str, options: dict, resolver: Resolver) -> str:
    """A caption after the number the page gives its figure or table ("Fig. 9.3: caption")."""
    number = ""
    if options.get("name"):
        text = resolver.xref("numref", options["name"], None)
        m = re.match(r"\[(.*)\]\(.*\)$", text, flags=re.S)
        number = m.group(1) if m else ""
    return f"{number}{': ' if number and caption else ''}{caption}"


def equation_number(label: str, resolver: Resolver) -> str:
    """The number the page gives a labelled equation (from the `{eq}` reference to it), without parentheses."""
    text = resolver.xref("eq", label, None)
    m = re.match(r"\[\(?([^\])]+?)\)?\]\(", text) or re.match(r"\(?([^)]+)\)?", text)
    return m.group(1) if m else label


def markdown(lines: list[str], resolver: Resolver, attachments: dict) -> str:
    """Plain Jupyter Markdown for MyST lines (a cell, or a directive's body)."""
    out: list[str] = []
    plain: list[str] = []

    def flush() -> None:
        if plain:
            out.append(inline("\n".join(plain), resolver, attachments))
            plain.clear()

    def block(text: str) -> None:
        """A block quote or an anchor stands apart: blank lines around it, so that it neither swallows the
        next line (a quote's lazy continuation, an HTML block's heading) nor is swallowed by a paragraph."""
        flush()
        if out and out[-1].strip():
            out.append("")
        out.append(text)
        out.append("")

    i = 0
    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
        if fence:
            mark = fence.group("fence")
            closing = re.compile(rf"^[ \t]*{re.escape(mark[0])}{{{len(mark)},}}[ \t]*$")
            end = next((j for j in range(i + 1, len(lines)) if closing.match(lines[j])), len(lines))
            body = lines[i + 1:end]
            if fence.group("name"):
                indent = fence.group("indent")
                text = directive_markdown(fence.group("name"), fence.group("rest").strip(), body, resolver, attachments)
                if text:
                    block("\n".join(indent + t if t else t for t in text.split("\n")))
            else:
                flush()
                out.append("\n".join(lines[i:end + 1]))  # a code block: exactly as written
            i = end + 1
            continue
        target = TARGET.match(line)
        if target:
            block(f'<a id="{target.group("label")}"></a>')
        elif line.startswith("%") or line.strip() == "+++":
            pass  # a MyST comment or block break
        else:
            labelled = LABELLED_MATH.search(line)
            if labelled:
                number = equation_number(labelled.group("label"), resolver)
                line = line[:labelled.start()] + f"\\tag{{{number}}} $$"
            plain.append(line)
        i += 1
    flush()
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out)


def readable_notebook(notebook: dict, resolver: Resolver) -> nbformat.NotebookNode:
    """The executed page as a reader's notebook (see the module's docstring); the input is left unchanged."""
    nb = nbformat.from_dict(copy.deepcopy(notebook))
    cells = []
    for cell in nb.cells:
        tags = set(cell.get("metadata", {}).get("tags", []))
        if cell.cell_type == "markdown":
            if "remove-cell" in tags:
                continue  # prose the page leaves out
            attachments: dict = {}
            cell.source = markdown(cell.source.split("\n"), resolver, attachments)
            if attachments:
                cell.attachments = attachments
        elif cell.cell_type == "code":
            jupyter = cell.metadata.setdefault("jupyter", {})
            if tags & {"remove-cell", "hide-cell"}:
                jupyter.update(source_hidden=True, outputs_hidden=True)
                cell.metadata["collapsed"] = True
            if tags & {"remove-input", "hide-input"}:
                jupyter["source_hidden"] = True
            if tags & {"remove-output", "hide-output"}:
                jupyter["outputs_hidden"] = True
                cell.metadata["collapsed"] = True
            if not jupyter:
                del cell.metadata["jupyter"]
            for output in cell.get("outputs", []):
                data = output.get("data", {})
                if "text/markdown" in data:  # a computed table, rendered as MyST on the page
                    attachments = {}
                    data["text/markdown"] = markdown(pasted_markdown(output).split("\n"), resolver, attachments)
        cells.append(cell)
    nb.cells = cells
    for key in ("jupytext", "source_map"):
        nb.metadata.pop(key, None)
    return nb


def glue_outputs(executed: Path) -> dict[str, dict]:
    """The glued outputs of an executed page by name. myst-nb takes them out of the notebook it keeps in
    jupyter_execute/ (a glue with display=False leaves no output there) and saves them beside it, as
    `<page>.glue.json`, with the mime types as the page reads them."""
    path = executed.with_name(executed.stem + ".glue.json")
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


# --- the Sphinx side: the resolver and the files the build writes ------------------------------------------


class SphinxResolver(Resolver):
    """Glued values of the page's executed notebook (and of other pages', `doc::key`), references resolved by
    the domains of the Sphinx build, links relative to the page (as the site's own)."""

    def __init__(self, app, docname: str, glue: dict[str, dict], execute_dir: Path):
        super().__init__(glue)
        self.app, self.docname, self.execute_dir = app, docname, execute_dir

    def glue(self, key: str) -> dict:
        doc, sep, name = key.partition("::")
        if not sep:
            return super().glue(key)
        path = (self.execute_dir / Path(self.docname).parent / f"{doc}.glue.json")
        return json.loads(path.read_text(encoding="utf-8"))[name]

    @property
    def base(self) -> str:
        """The site's full address (Sphinx's html_baseurl), or "" where it is not known."""
        return getattr(self.app.config, "html_baseurl", "") or ""

    def page_uri(self) -> str:
        return self.app.builder.get_target_uri(self.docname)

    def link(self, uri: str) -> str:
        """A link of the page as it reads in the downloaded notebook (`site_address`)."""
        return site_address(self.page_uri(), uri, self.base)

    def url(self, path: str) -> str:
        from sphinx.util.osutil import relative_uri

        return self.link(relative_uri(self.page_uri(), path))

    def notebook_link(self, text: str) -> str:
        return f"[{text}]({self.url(notebook_path(self.docname))})"

    def only(self, expression: str) -> bool:
        return self.app.tags.eval_condition(expression)

    def image(self, path: str) -> str:
        if re.match(r"\w+://", path):
            return path
        source = os.path.normpath(os.path.join(os.path.dirname(self.docname), path.lstrip("/")) if not path.startswith("/")
                                  else path.lstrip("/"))
        served = self.app.builder.images.get(Path(source).as_posix())
        return self.url(f"{self.app.builder.imagedir}/{served}") if served else path

    def xref(self, role: str, target: str, title: str | None) -> str:
        from docutils import nodes
        from sphinx import addnodes

        domain_name, typ = PLAIN_XREF_ROLES.get(role) or role.split(":", 1)
        env = self.app.env
        if domain_name not in env.domains:
            return title or target
        if (domain_name, typ) in LOWERCASE_TARGETS:
            target = target.lower()
        contnode = nodes.inline(title or target, title or target)
        node = addnodes.pending_xref(title or target, contnode, refdomain=domain_name, reftype=typ, reftarget=target,
                                     refexplicit=title is not None, refdoc=self.docname, refwarn=False, ids=["download"])
        try:
            resolved = env.get_domain(domain_name).resolve_xref(env, self.docname, self.app.builder, typ, target, node,
                                                                contnode)
        except Exception:  # noqa: BLE001 (the page itself was built strictly: fall back to the text)
            resolved = None
        return node_markdown(resolved, self.link) if resolved is not None else (title or target)


def node_markdown(node, link=lambda uri: uri) -> str:
    """Inline docutils nodes (a resolved reference) as Markdown: links (each passed through `link`), emphasis,
    code, math."""
    from docutils import nodes

    if isinstance(node, nodes.Text):
        return str(node)
    inner = "".join(node_markdown(child, link) for child in node.children)
    if isinstance(node, nodes.reference) and (node.get("refuri") or node.get("refid")):
        return f"[{inner}]({link(node.get('refuri') or '#' + node['refid'])})"
    if isinstance(node, nodes.literal):
        return f"`{node.astext()}`"
    if isinstance(node, nodes.math):
        return f"${node.astext()}$"
    if isinstance(node, nodes.strong):
        return f"**{inner}**"
    if isinstance(node, nodes.emphasis):
        return f"*{inner}*"
    return inner


def write_notebook(app, pagename: str, executed: Path, target: Path) -> None:
    """The reader's notebook of an executed page (html-page-context, once the references are resolvable)."""
    notebook = nbformat.read(executed, as_version=4)
    resolver = SphinxResolver(app, pagename, glue_outputs(executed), executed.parents[len(Path(pagename).parts) - 1])
    readable = readable_notebook(notebook, resolver)
    if resolver.base:
        title = app.env.titles[pagename].astext() if pagename in app.env.titles else pagename
        page = resolver.page_uri()
        note = ADDRESS_NOTE.format(title=title, address=site_address(page, page.rpartition("/")[2], resolver.base))
    else:
        note = RELATIVE_NOTE
    readable.cells.insert(0, nbformat.v4.new_markdown_cell(note, id="course-site-note"))
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(readable, target)


def course_files(root: Path, edition: str = editions.FULL) -> list[str]:
    """The course's source files, relative to `root`: those git tracks or would track (untracked files that are
    not ignored, so a build of a working tree packs what it built); without git, every file outside the build
    folders, environments, grading runs and caches. The class edition leaves out the answers
    (`editions.ANSWER_PATHS`)."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                                capture_output=True, check=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        listed = [str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir()]
    files = []
    for name in listed:
        path = root / name
        parts = Path(name).parts
        if (not name or parts[0] in EXCLUDED_TOP or set(parts) & EXCLUDED_PARTS or any(p.endswith(EXCLUDED_SUFFIXES) for p in parts)
                or path.is_symlink() or not path.is_file() or (edition == editions.CLASS and editions.is_answer_path(name))):
            continue
        files.append(Path(name).as_posix())
    return sorted(set(files))


def file_dates(root: Path, files: list[str]) -> dict[str, int]:
    """When each file last changed, in seconds since the epoch: the time of its last commit (`git log -1 --
    <file>`, as course/buildstatus.py asks for a page's date), or its modification time where it has changes not
    committed, is untracked, or git is not there."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, check=True, text=True).stdout

    committed: dict[str, int] = {}
    dirty: set[str] = set(files)
    try:
        if Path(git("rev-parse", "--show-toplevel").strip()).resolve() == root.resolve():
            changed = git("status", "--porcelain", "-z", "--untracked-files=all").split("\0")
            dirty = {entry[3:] for entry in changed if len(entry) > 3}
            for name in files:
                if name not in dirty and (when := git("log", "-1", "--format=%ct", "--", name).strip()):
                    committed[name] = int(when)
    except (OSError, subprocess.CalledProcessError):
        pass
    return {name: committed[name] if name in committed and name not in dirty else int((root / name).stat().st_mtime)
            for name in files}


def write_archive(root: Path, target: Path, edition: str = editions.FULL) -> int:
    """The course as `transformer-course/...` in a tar.gz that is the same bytes for the same files and dates
    (sorted; owners and gzip header fixed; modes 644 or 755; each file dated by `file_dates`). The class edition
    packs no answer (`course_files`) and adds `editions.NOTE_NAME`, dated as the newest file. Returns the number
    of files."""
    files = course_files(root, edition)
    dates = file_dates(root, files)
    contents = {name: (root / name).read_bytes() for name in files}
    if edition == editions.CLASS:
        contents[editions.NOTE_NAME] = editions.CLASS_NOTE.encode()
        dates[editions.NOTE_NAME] = max(dates.values(), default=0)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(contents):
            data = contents[name]
            info = tarfile.TarInfo(f"{ARCHIVE_ROOT}/{name}")
            info.size, info.mtime, info.uid, info.gid, info.uname, info.gname = len(data), dates[name], 0, 0, "", ""
            info.mode = 0o755 if (root / name).is_file() and os.access(root / name, os.X_OK) else 0o644
            tar.addfile(info, io.BytesIO(data))
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
        gz.write(buffer.getvalue())
    return len(contents)

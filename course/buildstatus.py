"""Sphinx extension (listed in _config.yml): when each page's source last changed, for the Build status page.

myst-nb's `{nb-exec-table}` has a column "Modified" that is really the time the page's code was last *run* (the
date of its execution-cache entry), which readers took for the date of the page. This module

- adds the directive `{page-sources}`: a table of every page of the book with the date its source file last
  changed, read when the book is built: the date of the file's last commit (`git log -1 --format=%cs`) when the
  book is built from a git checkout, otherwise (a source archive, no `.git`) the file's modification date,
  marked as such. A file with changes not yet committed says so. The page that holds the directive is read
  again at every build, so the dates never come from a stale doctree;
- renames the execution table's "Modified" column to "Code last run", which is what it shows.
"""

from __future__ import annotations

import datetime
import subprocess
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util.docutils import SphinxDirective

RUN_HEADER = "Code last run"


def git_root(folder: Path) -> Path | None:
    """The checkout's top folder if `folder` is the top of a git checkout, else None (e.g. an unpacked archive,
    even one unpacked inside some other repository)."""
    try:
        out = subprocess.run(["git", "-C", str(folder), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0 or Path(out.stdout.strip()).resolve() != folder.resolve():
        return None
    return folder


def last_change(path: Path, repo: Path | None) -> tuple[str, str]:
    """(date, how it is known) for one source file."""
    file_date = datetime.date.fromtimestamp(path.stat().st_mtime).isoformat()
    if repo is None:
        return file_date, "file date (no git history in this copy)"

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30).stdout.strip()

    committed = git("log", "-1", "--format=%cs", "--", str(path.relative_to(repo)))
    if not committed:
        return file_date, "file date (not committed yet)"
    if git("status", "--porcelain", "--", str(path.relative_to(repo))):
        return file_date, f"file date (changed since its last commit, {committed})"
    return committed, "last commit"


class PageSources(SphinxDirective):
    """`{page-sources}`: one row per page of the book: the page, its source file, when the file last changed."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        self.env.note_reread()  # re-read at every build: the dates change without this page changing
        src = Path(self.env.srcdir)
        repo = git_root(src)
        rows = ["| page | source file | last changed | from |", "|---|---|---|---|"]
        for docname in sorted(self.env.found_docs, key=lambda d: (d != self.config.root_doc, d.replace("/index", "/0"))):
            path = Path(self.env.doc2path(docname))
            self.env.note_dependency(str(path))
            date, how = last_change(path, repo)
            rows.append(f"| {{doc}}`/{docname}` | `{path.relative_to(src)}` | {date} | {how} |")
        container = nodes.container(classes=["course-page-sources"])
        self.state.nested_parse(StringList(rows, source="page-sources"), self.content_offset, container)
        return [container]


class RenameRunColumn(SphinxPostTransform):
    """After myst-nb has built its execution table (priority 8), call its "Modified" column what it is."""

    default_priority = 9

    def run(self, **kwargs) -> None:
        for head in self.document.findall(nodes.thead):
            cells = list(head.findall(nodes.paragraph))
            if "Run Time (s)" not in [cell.astext() for cell in cells]:
                continue  # not the execution table
            for cell in cells:
                if cell.astext() == "Modified":
                    cell.replace_self(nodes.paragraph(text=RUN_HEADER))


def setup(app: Sphinx) -> dict:
    app.add_directive("page-sources", PageSources)
    app.add_post_transform(RenameRunColumn)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

"""Helpers for the book's pages (executed at build time): what a page shows about its chapter's exercises."""

import json
import re
from pathlib import Path

HEADING = re.compile(r"^## \d+\. (.*?) \((\d+) points?\)", re.M)


def _plain(title: str) -> str:
    """A heading's title for a Markdown table cell: keep inline math, escape the pipe."""
    return title.replace("|", "\\|")


def exercise_rows(notebook_path) -> list[tuple[str, list[str], int]]:
    """[(exercise title, [graded function or class names], points)] read from a generated exercise notebook."""
    notebook = json.loads(Path(notebook_path).read_text(encoding="utf-8"))
    rows, current = [], None
    for cell in notebook["cells"]:
        source = "".join(cell["source"])
        heading = HEADING.search(source) if cell["cell_type"] == "markdown" else None
        if heading:
            current = [_plain(heading.group(1)), [], 0]
            rows.append(current)
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if current is None:
            continue
        if meta.get("solution"):
            names = re.findall(r"^(?:def|class) (\w+)", source, re.M)
            current[1].extend(names or [meta["grade_id"]])
        if meta.get("grade"):
            current[2] += meta["points"]
    return [(title, names, points) for title, names, points in rows]


def points_table(notebook_path="exercises.ipynb"):
    """The Markdown table of exercises, what you write, and points (IPython Markdown, for a page cell)."""
    from IPython.display import Markdown

    rows = exercise_rows(notebook_path)
    table = ["| exercise | what you write | points |", "|---|---|---|"]
    table += [f"| {title} | {', '.join(f'`{n}`' for n in names)} | {points:g} |" for title, names, points in rows]
    table += [f"| **total** | | **{sum(points for *_, points in rows):g}** |"]
    return Markdown("\n".join(table))

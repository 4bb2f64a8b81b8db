"""Every name a book page takes from the course's own code exists there.

The book's execution cache (`execute_notebooks: cache`) keys a page on its own code cells, not on the modules they
import: a page that reads `notebook.MAX_NOTEBOOK_BYTES` keeps building from its cache after the constant moves to
another module, and only a fresh clone's build fails. This test reads each page's code cells without running them
and looks every course name up (`from module import name`, `module.name` for a module the page imported), in
seconds, so the rename is caught where it is made.
"""

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COURSE_PACKAGES = ("autograder", "solutions", "course", "scripts")
PAGES = sorted([ROOT / "intro.md", *(ROOT / "chapters").rglob("*.md"), *(ROOT / "guides").glob("*.md")])
CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```\s*$", re.S | re.M)


def code_cells(text: str) -> list[str]:
    """The Python of each {code-cell} of a MyST page: cell options (`:key: value` lines or a `---` block) and IPython
    magics (`%`, `!`) left out."""
    cells = []
    for body in CODE_CELL.findall(text):
        lines = body.splitlines()
        if lines and lines[0].strip() == "---":
            end = next((i for i, line in enumerate(lines[1:], 1) if line.strip() == "---"), 0)
            lines = lines[end + 1:]
        lines = [line for line in lines if not re.match(r"\s*:[\w-]+:", line) or line.startswith((" ", "\t"))]
        lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in lines]
        cells.append("\n".join(lines))
    return cells


def _is_course(module: str) -> bool:
    return module.split(".")[0] in COURSE_PACKAGES


def _has(module_name: str, name: str) -> bool:
    module = importlib.import_module(module_name)
    if hasattr(module, name):
        return True
    try:  # a submodule not imported by its package (`from autograder.grading import sandbox`)
        importlib.import_module(f"{module_name}.{name}")
        return True
    except ModuleNotFoundError:
        return False


def missing_names(source: str) -> list[str]:
    """The course names `source` uses that do not exist: `module.name` for each miss."""
    tree = ast.parse(source)
    aliases = {}  # local name -> course module it is bound to
    missing = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_course(alias.name):
                    importlib.import_module(alias.name)
                    if alias.asname:
                        aliases[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and _is_course(node.module):
            for alias in node.names:
                if alias.name == "*":
                    continue
                if not _has(node.module, alias.name):
                    missing.append(f"{node.module}.{alias.name}")
                    continue
                value = getattr(importlib.import_module(node.module), alias.name, None)
                if value is None or type(value).__name__ == "module":
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            module_name = aliases[node.value.id]
            if not _has(module_name, node.attr):
                missing.append(f"{module_name}.{node.attr}")
    return sorted(set(missing))


def test_the_name_check_reports_a_moved_constant_and_passes_the_names_that_exist():
    stale = "from autograder.grading import notebook, submission\nx = notebook.MAX_NOTEBOOK_BYTES_GONE\n" \
            "y = submission.MAX_NOTEBOOK_BYTES\nfrom solutions.ch02_qkv_attention import no_such_function\n"
    assert missing_names(stale) == ["autograder.grading.notebook.MAX_NOTEBOOK_BYTES_GONE",
                                    "solutions.ch02_qkv_attention.no_such_function"]
    fine = "from solutions import ch10_capstone as cap\nfrom autograder.grading import submission\n" \
           "n = submission.MAX_NOTEBOOK_BYTES\nimport autograder.config as config\nc = config.CELL_TIMEOUT_S\n"
    assert missing_names(fine) == []
    page = "# t\n\n```{code-cell} ipython3\n:tags: [remove-cell]\nfrom autograder import nothing_here\n```\n"
    assert [missing_names(cell) for cell in code_cells(page)] == [["autograder.nothing_here"]]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_course_name_a_page_uses_exists(page):
    cells = code_cells(page.read_text(encoding="utf-8"))
    problems = []
    for number, cell in enumerate(cells, 1):
        try:
            missing = missing_names(cell)
        except SyntaxError as error:
            problems.append(f"code cell {number} does not parse: {error}")
            continue
        problems += [f"code cell {number} uses {name}, which does not exist" for name in missing]
    assert not problems, f"{page.relative_to(ROOT)}: " + "; ".join(problems) + \
        " (the book's execution cache hides this until a fresh build: rename it on the page too)"

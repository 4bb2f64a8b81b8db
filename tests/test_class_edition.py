"""The class edition (course/editions.py, `make class-book`): the site an instructor who grades with the course
publishes, without the answers to the graded exercises.

An answer is what a graded cell's solution region holds in the instructor notebooks (the lines between nbgrader's
`### BEGIN SOLUTION` and `### END SOLUTION`, rendered from solutions/ by autograder/authoring/build.py): the
functions' bodies and the numbers typed by hand. A text leaks an answer when it holds the answer's code lines one
after the other (compared without indentation, comments or blank lines): all of them, or any three in a row of a
longer one. The check reads every file of the class edition's site (its HTML pages, search index, notebooks and
page sources) and of its course archive, and is shown to find the answers in the full edition (its archive
holds solutions/, autograder/ and tests/) and in a notebook that holds one.

The class edition is built once per session (the `class_book` fixture, conftest.py) into
`$COURSE_BUILD_DIR/_build/class`, from the full edition's execution cache: it runs no page.
"""

import functools
import importlib
import html
import io
import re
import tarfile
from pathlib import Path

import nbformat
import pytest

from conftest import BUILD_DIR, CLASS_HTML, ROOT
from course import downloads, editions

HTML = BUILD_DIR / "_build" / "html"
WINDOW = 3  # an answer longer than this leaks when any WINDOW of its lines appear in a row
TEXT_SUFFIXES = {".html", ".js", ".ipynb", ".md", ".txt", ".py", ".json", ".yml", ".toml", ".cfg", ".css"}


def code_lines(text: str) -> list[str]:
    """Lines as compared: stripped, a trailing comment removed, inner spaces collapsed, blank ones dropped."""
    lines = []
    for line in text.splitlines():
        line = re.sub(r"\s+#.*$|^#.*$", "", line).strip()
        line = re.sub(r"\s+", " ", line)
        if line:
            lines.append(line)
    return lines


SOLUTION = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.S)


@functools.lru_cache(1)
def answer_cells() -> dict[str, tuple[list[str], frozenset[str]]]:
    """Every graded cell's answer, `<chapter>/<cell>/<i>`: its solution region's code lines, and the lines the
    learner is given in the same cell (outside the region: a docstring, a signature, the buggy class of note 003
    that chapter 4 asks to fix), which are no answer."""
    from autograder import registry
    from autograder.authoring.build import instructor_notebook

    found = {}
    for chapter in registry.graded_chapters():
        # A solution cell whose answer is the earlier chapters' code (the capstone's parts cell) is guarded as those
        # chapters' answers, under their own keys; later notebooks give some of that code read-only, by design.
        earlier = getattr(importlib.import_module(f"solutions.{registry.module_name(chapter)}"), "EARLIER_CHAPTERS_CELLS", ())
        for cell in instructor_notebook(chapter).cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "?")
            if grade_id in earlier:
                continue
            given = frozenset(code_lines(SOLUTION.sub("", cell.source)))
            for i, m in enumerate(SOLUTION.finditer(cell.source)):
                if lines := code_lines(m.group(1)):
                    found[f"{chapter}/{grade_id}/{i}"] = (lines, given)
    return found


def answers() -> dict[str, list[str]]:
    return {key: lines for key, (lines, _) in answer_cells().items()}


def windows(key: str) -> list[str]:
    """What must not appear: the whole answer, or, for a longer one, each WINDOW of its lines in a row; a window
    counts only if one of its lines is not given to the learner in the same cell."""
    lines, given = answer_cells()[key]
    spans = [lines] if len(lines) <= WINDOW else [lines[i:i + WINDOW] for i in range(len(lines) - WINDOW + 1)]
    return ["\n".join(span) for span in spans if set(span) - given]


NUMBER = re.compile(r"-?\d+\.\d+")


def typed_numbers(lines: list[str]) -> tuple[float, ...] | None:
    """A typed answer (chapter 3's tables worked out by hand, `scores = [[4.00, 1.00, ...]]`) as its numbers, which
    a page could show in a table rather than as code; None for code."""
    text = " ".join(lines)
    if not re.fullmatch(r"\s*\w+\s*=\s*[\[\]\d.,\s-]+", text):
        return None
    return tuple(round(float(x), 2) for x in NUMBER.findall(text))


def leaked(text: str) -> list[str]:
    """The answers a text holds (their keys): a code answer's lines in a row, a typed answer's numbers in a row."""
    haystack = "\n" + "\n".join(code_lines(text)) + "\n"
    numbers = ",".join(f"{round(float(x), 2):.2f}" for x in NUMBER.findall(text))
    found = []
    for key, lines in answers().items():
        typed = typed_numbers(lines)
        if typed is not None:
            if f",{','.join(f'{x:.2f}' for x in typed)}," in f",{numbers},":
                found.append(key)
        elif any(f"\n{w}\n" in haystack for w in windows(key)):
            found.append(key)
    return found


def readable(path_name: str, data: bytes) -> str | None:
    """A file's text as a reader or a search meets it: a notebook's sources and outputs, HTML without its tags
    (code blocks keep their lines), other text as it is; None for a binary file."""
    suffix = Path(path_name).suffix
    if suffix not in TEXT_SUFFIXES and Path(path_name).name not in ("Makefile", "README"):
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if suffix == ".ipynb":
        notebook = nbformat.reads(text, as_version=4)
        parts = []
        for cell in notebook.cells:
            parts.append(cell.source)
            for output in cell.get("outputs", []):
                parts.append("".join(output.get("text", "")))
                for mime in ("text/plain", "text/markdown", "text/html"):
                    value = output.get("data", {}).get(mime, "")
                    parts.append("".join(value) if isinstance(value, list) else value)
        text = "\n".join(parts)
    if suffix in (".html", ".ipynb", ".js"):
        text = re.sub(r"</(td|th|tr|p|div|li|pre|h\d)>|<br\s*/?>", "\n", text)  # cells and blocks apart, spans kept
        text = html.unescape(re.sub(r"<[^>]+>", "", text))
    return text


@functools.lru_cache(1)
def exercise_notebooks() -> dict[bytes, str]:
    """The student notebooks by their bytes: which chapter a served exercises.ipynb is (the site serves them
    under _downloads/<hash>/)."""
    return {p.read_bytes(): p.parent.name for p in ROOT.glob("chapters/[0-9][0-9]-*/exercises.ipynb")}


def not_given(keys: list[str], data: bytes) -> list[str]:
    """The answers found in a file that are not given code: a later chapter's exercise notebook gives earlier
    chapters' graded code in read-only cells, by design (`editions.given_code`), and only that may be there."""
    chapter = exercise_notebooks().get(data)
    return [k for k in keys if chapter is None or k.split("/")[0] >= chapter]


def file_leaks(name: str, data: bytes) -> list[str]:
    text = readable(name, data)
    return not_given(leaked(text), data) if text is not None else []


def site_leaks(html_dir: Path) -> dict[str, list[str]]:
    """The files of a built site that hold an answer (the course archive is read member by member)."""
    found = {}
    for path in sorted(p for p in html_dir.rglob("*") if p.is_file()):
        name = str(path.relative_to(html_dir))
        if path.name.endswith(".tar.gz"):
            found.update({f"{name}:{k}": v for k, v in archive_leaks(path).items()})
        elif keys := file_leaks(name, path.read_bytes()):
            found[name] = keys
    return found


def archive_leaks(archive: Path, allow_given: bool = True) -> dict[str, list[str]]:
    found = {}
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if member.isfile():
                data = tar.extractfile(member).read()
                text = readable(member.name, data)
                keys = leaked(text) if text is not None else []
                if keys := (not_given(keys, data) if allow_given else keys):
                    found[member.name] = keys
    return found


def archive_names(archive: Path) -> set[str]:
    with tarfile.open(archive) as tar:
        return {m.name.removeprefix(f"{downloads.ARCHIVE_ROOT}/") for m in tar.getmembers()}


# --- the check itself ------------------------------------------------------------------------------------------


def test_the_answers_are_read_from_every_graded_chapter():
    from autograder import registry

    keys = answers()
    assert {k.split("/")[0] for k in keys} == set(registry.graded_chapters())
    assert len(keys) >= 40


def test_the_leak_check_finds_typed_answers_shown_as_a_table():
    key, lines = next((k, v) for k, v in answers().items() if k.startswith("03-worked-examples/") and typed_numbers(v))
    table = "<table>" + "".join(f"<tr><td>{x:.2f}</td></tr>" for x in typed_numbers(lines)) + "</table>"
    assert key in leaked(readable("page.html", table.encode()))
    assert key not in leaked(readable("page.html", table.replace("<td>", "<td>1").encode()))


def test_the_leak_check_finds_an_answer_in_a_notebook_and_not_in_its_student_copy():
    key, lines = next((k, v) for k, v in answers().items() if k.startswith("05-masks/") and len(v) >= 1)
    body = "\n".join("    " + line for line in lines)
    with_answer = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"def f(n, device=None):\n{body}  # mine\n")])
    assert key in leaked(readable("x.ipynb", nbformat.writes(with_answer).encode()))
    student = (ROOT / "chapters" / "05-masks" / "exercises.ipynb").read_bytes()
    assert not leaked(readable("exercises.ipynb", student))


def test_given_code_is_allowed_only_in_the_later_chapters_notebooks_that_give_it():
    """Chapter 7's notebook gives chapter 4's MultiHeadAttention (read-only, by design): not a leak there; the same
    code in chapter 4's own notebook, or on any page, is. Note 003's buggy class, given in chapter 4's notebook to
    be fixed, shares lines with the fix and is no answer."""
    ch07 = (ROOT / "chapters" / "07-ffn-layernorm" / "exercises.ipynb").read_bytes()
    assert "04-multi-head/MultiHeadAttention/0" in leaked(readable("exercises.ipynb", ch07))
    assert not file_leaks("exercises.ipynb", ch07)
    assert "04-multi-head/MultiHeadAttention/0" in file_leaks("index.ipynb", ch07.replace(b"Exercises", b"A page"))
    ch04 = (ROOT / "chapters" / "04-multi-head" / "exercises.ipynb").read_bytes()
    assert not file_leaks("exercises.ipynb", ch04)
    assert ("07-ffn-layernorm", ("ch04_multi_head", "MultiHeadAttention")) in [
        (chapter, g) for chapter, given in editions.given_code(ROOT).items() for g in given]


# --- the full edition has them, the class edition none -----------------------------------------------------------


def test_the_full_edition_serves_the_answers(built_book):
    """What the class edition is for: the full site's archive holds every answer (solutions/ and the rest)."""
    found = archive_leaks(HTML / downloads.ARCHIVE, allow_given=False)
    code = {k for k, lines in answers().items() if typed_numbers(lines) is None}
    assert {k for keys in found.values() for k in keys} >= code  # every function's body, as written
    assert any(name.startswith(f"{downloads.ARCHIVE_ROOT}/solutions/") for name in found)
    # the typed answers are computed, not written: by solutions/ch03_worked_examples.py, which the archive holds
    assert "solutions/ch03_worked_examples.py" in archive_names(HTML / downloads.ARCHIVE)


def test_the_class_edition_archive_holds_no_answer(class_book):
    names = archive_names(CLASS_HTML / downloads.ARCHIVE)
    assert not [n for n in names if editions.is_answer_path(n)]
    assert editions.NOTE_NAME in names and "chapters/05-masks/exercises.ipynb" in names and "chapters/05-masks/index.md" in names
    assert names == set(downloads.course_files(ROOT, editions.CLASS)) | {editions.NOTE_NAME}
    assert not archive_leaks(CLASS_HTML / downloads.ARCHIVE)


def test_no_answer_in_the_class_edition_site(class_book):
    """Its HTML pages, search index, notebooks (each page's and each chapter's exercises) and page sources."""
    assert (CLASS_HTML / "searchindex.js").is_file()
    notebooks = list(CLASS_HTML.rglob("*.ipynb"))
    assert len(notebooks) >= 18, notebooks
    assert not site_leaks(CLASS_HTML)


def test_the_class_edition_says_what_runs(class_book):
    """Its run note and introduction speak of this edition; the full edition's say how to build the course."""
    chapter = "chapters/05-masks/index"
    text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", (CLASS_HTML / f"{chapter}.html").read_text(encoding="utf-8"))))
    assert "This is the class edition of the course" in text and "make book" not in text
    intro = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", (CLASS_HTML / "intro.html").read_text(encoding="utf-8")))
    assert "class edition" in intro and "reference solutions and grader" not in intro
    full_intro = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", (HTML / "intro.html").read_text(encoding="utf-8")))
    assert "class edition" not in full_intro and "reference solutions and grader" in full_intro
    downloaded = nbformat.read(CLASS_HTML / "_sources" / f"{chapter}.ipynb", as_version=4)
    assert "This is the class edition of the course" in "\n".join(c.source for c in downloaded.cells)
    with tarfile.open(CLASS_HTML / downloads.ARCHIVE) as tar:
        note = tar.extractfile(f"{downloads.ARCHIVE_ROOT}/{editions.NOTE_NAME}").read().decode()
    assert note == editions.CLASS_NOTE

"""Edits of read-only cells, and earlier drafts of a solution: graded fairly, and said (issue 20, item 2).

The grader runs the course's version of every read-only cell (as nbgrader does), never the learner's edit. That
stays; what these tests ask is that it is SAID: a note per edited cell, with the learner's diff, in the feedback
and in the instructor's reports, and a failure that follows from a discarded edit explained as such (not "run
the cells above"). And an unused earlier draft of a solution (a duplicated solution cell whose first version
called a forbidden built-in, then redefined before anything used it) does not cost the final version its points,
while a draft that IS used, or a final version that calls the built-in, still does.

One batch through the real CLI (chapter 02, and one notebook of chapter 04), then unit tests of the draft rule.
"""

import csv

import nbformat
import pytest

from autograder.authoring import demo
from autograder.grading import notebook
from conftest import run_python

CH02, CH04 = "02-qkv-attention", "04-multi-head"
FULL02, FULL04 = 13.0, 18.0
SOFTMAX_POINTS, SDPA_POINTS, MHA_POINTS = 3.0, 5.0, 6.0
DRAFT = "def stable_softmax(x, dim=-1):\n    return torch.softmax(x, dim)  # first try\n"


def cell_of(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def position(nb, grade_id):
    return next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def edited_imports():
    """The provided imports cell edited to import sqrt (with characters HTML must escape), sqrt used in the solution."""
    nb = demo.filled_submission(CH02)
    cell_of(nb, "imports").source += "\nfrom math import sqrt  # mine: a <b> & c\n"
    sdpa = cell_of(nb, "scaled_dot_product_attention")
    assert "math.sqrt" in sdpa.source, "the reference attention no longer uses math.sqrt: pick another edit"
    sdpa.source = sdpa.source.replace("math.sqrt", "sqrt")
    return nb


def whitespace_only():
    """The imports cell with other line endings and trailing blanks only: not an edit."""
    nb = demo.filled_submission(CH02)
    imports = cell_of(nb, "imports")
    imports.source = "\r\n".join(line + "   " for line in imports.source.split("\n")) + "\r\n\r\n"
    return nb


def duplicated_softmax(first, second, between=None):
    """The stable_softmax cell duplicated (the learner's draft and final version), the first copy holding `first`,
    the second `second`; `between`: a cell the learner added between them."""
    nb = demo.filled_submission(CH02)
    i = position(nb, "stable_softmax")
    copy = nbformat.from_dict(nbformat.v4.new_code_cell(second, metadata=dict(cell_of(nb, "stable_softmax").metadata)))
    nb.cells[i].source = first
    nb.cells.insert(i + 1, copy)
    if between is not None:
        nb.cells.insert(i + 1, nbformat.v4.new_code_cell(between))
    return nb


def draft_in_added_cell():
    """A draft in a cell the learner added above the solution cell, which holds the final version."""
    nb = demo.filled_submission(CH02)
    nb.cells.insert(position(nb, "stable_softmax"), nbformat.v4.new_code_cell("import torch\n" + DRAFT))
    return nb


def edited_helper():
    """Chapter 04's provided attention cell edited to add a helper, which the learner's MultiHeadAttention calls."""
    nb = demo.filled_submission(CH04)
    cell_of(nb, "course_attention").source += "\n\ndef attend(q, k, v, mask=None):\n    return scaled_dot_product_attention(q, k, v, mask)\n"
    mha = cell_of(nb, "MultiHeadAttention")
    call = "heads, weights = scaled_dot_product_attention(q, k, v, mask)"
    assert call in mha.source, "the reference MultiHeadAttention changed: pick another edit"
    mha.source = mha.source.replace(call, "heads, weights = attend(q, k, v, mask)")
    return nb


def reference():
    return demo.filled_submission(CH02)


def corpus():
    """{student: (chapter, notebook, expected score)}."""
    reference_softmax = cell_of(reference(), "stable_softmax").source
    return {
        "edited-imports": (CH02, edited_imports(), FULL02 - SDPA_POINTS),
        "whitespace-only": (CH02, whitespace_only(), FULL02),
        "unused-draft": (CH02, duplicated_softmax(DRAFT, reference_softmax), FULL02),
        "draft-in-added-cell": (CH02, draft_in_added_cell(), FULL02),
        # The draft is called (by a cell in between) before the final version replaces it: it still costs.
        "used-draft": (CH02, duplicated_softmax(DRAFT, reference_softmax, between="print(stable_softmax(torch.zeros(3)))"),
                       FULL02 - SOFTMAX_POINTS),
        # The final version itself calls the built-in: it costs, whatever the draft.
        "final-uses-builtin": (CH02, duplicated_softmax(reference_softmax, DRAFT), FULL02 - SOFTMAX_POINTS),
        "edited-helper": (CH04, edited_helper(), FULL04 - MHA_POINTS),
    }


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("submissions")
    workdir = tmp_path_factory.mktemp("grading")
    notebooks = corpus()
    for student, (chapter, nb, _) in notebooks.items():
        path = root / student / chapter / "exercises.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)
    result = run_python("-m", "autograder", "grade", str(root), "--workdir", str(workdir), "--device", "cpu", "--seed", "11",
                        "--workers", "2", timeout=900)
    rows = {}
    with (workdir / "summary.csv").open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            rows.setdefault(row["student"], {})[row["cell"]] = row
    return dict(workdir=workdir, result=result, rows=rows, corpus=notebooks)


def feedback(batch, student):
    chapter = batch["corpus"][student][0]
    return (batch["workdir"] / "feedback" / student / chapter / "exercises.html").read_text(encoding="utf-8")


def table_line(batch, student):
    return next((line for line in batch["result"].stdout.splitlines() if line.startswith(student + " ")), "")


def test_the_batch_grades_every_notebook(batch):
    result = batch["result"]
    assert result.returncode == 0, f"grading failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert set(batch["rows"]) == set(batch["corpus"]), f"missing from summary.csv: {set(batch['corpus']) - set(batch['rows'])}"


@pytest.mark.parametrize("student", list(corpus()))
def test_scores(batch, student):
    """Read-only edits are still graded with the course's version; an unused draft costs nothing, a used one does."""
    row = batch["rows"][student][""]
    expected = batch["corpus"][student][2]
    cells = {cell: r["message"] for cell, r in batch["rows"][student].items() if cell}
    assert float(row["score"]) == expected, f"{student}: {row['score']} instead of {expected:g}; messages: {cells}"


def test_an_edited_read_only_cell_is_said_with_the_learners_diff(batch):
    row = batch["rows"]["edited-imports"][""]
    assert "your edit of the read-only cell 'imports' was not run" in row["message"], row["message"]
    assert "+from math import sqrt  # mine: a <b> & c" in row["message"], f"the diff is missing from summary.csv: {row['message']}"
    assert "course's version" in row["message"]
    page = feedback(batch, "edited-imports")
    assert "your edit of the read-only cell &#x27;imports&#x27; was not run" in page, "the feedback does not say the edit was discarded"
    assert "+from math import sqrt  # mine: a &lt;b&gt; &amp; c" in page, "the feedback lacks the learner's diff, escaped"
    assert "<b> & c" not in page, "the learner's edit reached the feedback unescaped"


def test_a_failure_from_a_discarded_edit_is_explained_as_such(batch):
    message = batch["rows"]["edited-imports"]["scaled_dot_product_attention_hidden"]["message"]
    assert "NameError: name 'sqrt' is not defined" in message, message
    assert "run the cells above" not in message, f"the hint sends the learner the wrong way: {message}"
    assert "your edit of the read-only cell 'imports'" in message and "`sqrt`" in message and "own answer cell" in message, message
    page = feedback(batch, "edited-imports")
    assert "run the cells above" not in page
    assert "relies on `sqrt`, which only your edit of &#x27;imports&#x27; defines or imports" in page, "the feedback's verdict does not explain the failure"
    line = table_line(batch, "edited-imports")
    assert "read-only cell 'imports'" in line, f"the instructor's table does not name the discarded edit: {line!r}"


def test_an_edited_provided_helper_is_explained_too(batch):
    rows = batch["rows"]["edited-helper"]
    assert "your edit of the read-only cell 'course_attention' was not run (it defines or imports `attend`)" in rows[""]["message"], rows[""]["message"]
    assert "+def attend(q, k, v, mask=None):" in rows[""]["message"]
    message = rows["MultiHeadAttention_hidden"]["message"]
    assert "relies on `attend`, which only your edit of 'course_attention' defines or imports" in message, message
    assert "run the cells above" not in message
    assert "read-only cell 'course_attention'" in table_line(batch, "edited-helper")


def test_line_endings_and_trailing_blanks_are_not_an_edit(batch):
    rows = batch["rows"]["whitespace-only"]
    assert "read-only" not in rows[""]["message"], rows[""]["message"]
    assert "read-only" not in feedback(batch, "whitespace-only")


def test_a_draft_that_is_used_or_a_final_version_with_the_built_in_still_costs(batch):
    for student in ("used-draft", "final-uses-builtin"):
        message = batch["rows"][student]["stable_softmax_hidden"]["message"]
        assert "softmax" in message and "no points" in message, f"{student}: {message}"
    for student in ("unused-draft", "draft-in-added-cell"):
        assert batch["rows"][student]["stable_softmax_hidden"]["message"] == "", batch["rows"][student]["stable_softmax_hidden"]


# --- The draft rule, statement by statement (notebook.unused_drafts) -----------------------------------------


def plan(*sources, probe_at=None):
    """Plan-like cells: learner code cells with these sources, a probe inserted at index `probe_at`."""
    cells = [{"kind": "code", "source": s, "origin": "a cell you added", "learner": True} for s in sources]
    if probe_at is not None:
        cells.insert(probe_at, {"kind": "probe", "source": "", "origin": "the graded check", "learner": False})
    for i, cell in enumerate(cells):
        cell["index"] = i
    return cells


def drafts(cells, ran=None):
    return notebook.unused_drafts("f", cells, {c["index"] for c in cells} if ran is None else ran)


FINAL = "def f(x):\n    return x\n"


def test_a_definition_redefined_before_any_use_is_a_draft():
    assert drafts(plan(DRAFT.replace("stable_softmax", "f"), FINAL)) == {0: {0}}
    assert drafts(plan("import torch\n" + DRAFT.replace("stable_softmax", "f") + FINAL)) == {0: {1}}  # in one cell
    assert drafts(plan("def f(x):\n    return f(x)\n", "def f(x):\n    return 1 if x else f(x - 1)\n")) == {0: {0}}  # recursion is no use


@pytest.mark.parametrize("between", [
    "y = f(1)",  # called
    "g = f",  # an alias keeps the draft alive
    "def g(x):\n    return f(x)\n",  # a function that may call it (conservative: its body reads the name)
    "class M:\n    run = staticmethod(f)\n",
    "keep = globals()['f']",  # named in a string
])
def test_a_definition_read_before_its_redefinition_is_not_a_draft(between):
    assert drafts(plan("def f(x):\n    return x\n", between, FINAL)) == {}


def test_a_check_between_them_or_a_redefinition_that_reads_it_keeps_the_draft():
    assert drafts(plan("def f(x):\n    return x\n", FINAL, probe_at=1)) == {}  # the check called it
    assert drafts(plan("def f(x):\n    return x\n", "@wrap(f)\ndef f(x):\n    return x\n")) == {}  # decorated with it
    assert drafts(plan("def f(x):\n    return x\n", "f = cache(f)\n")) == {}


def test_a_redefinition_in_a_cell_that_did_not_run_to_its_end_does_not_count():
    assert drafts(plan("def f(x):\n    return x\n", FINAL), ran={0}) == {}


# --- What an edit changes, statically (shortcuts.changed_names), which the explanation of a failure rests on ---------


def test_an_edit_changes_only_the_names_it_binds_otherwise():
    from autograder.grading import shortcuts

    course = "import math\n\nimport torch\nfrom torch import Tensor\n\ndef helper(x):\n    return x\n"
    assert shortcuts.changed_names(course, course.replace("import math", "import math, numpy as np")) == {"np"}
    assert shortcuts.changed_names(course, course + "# a comment\n") == set()
    assert shortcuts.changed_names(course, course.replace("return x", "return x + 1")) == {"helper"}
    assert shortcuts.changed_names(course, course + "from math import sqrt\n") == {"sqrt"}
    assert shortcuts.changed_names(course, "def broken(:\n") == set()  # does not parse: nothing to tell

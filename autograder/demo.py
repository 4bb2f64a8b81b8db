"""Filled-in submissions, made from the student notebook and solutions/: the demo folder and the tests' corpus.

A submission is the generated student notebook with its solution cells replaced by the reference
functions, optionally with one typical mistake applied (WRONG_ANSWERS). Nothing here is typed by hand
twice: the reference source comes from solutions/, the mistakes are edits of it.
"""

import copy
import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path

import nbformat

from autograder import course


@dataclass(frozen=True)
class WrongAnswer:
    function: str  # the solution cell (grade_id) it edits
    old: str  # text of the reference source that is replaced
    new: str
    diagnosis: str  # a fragment the grader's message must contain


# The six typical mistakes in chapter 02, as edits of the reference source.
WRONG_ANSWERS = {
    "softmax_wrong_dim": WrongAnswer(
        "scaled_dot_product_attention", "stable_softmax(scores, dim=-1)", "stable_softmax(scores, dim=-2)",
        "softmax over the wrong dimension",
    ),
    "missing_scale": WrongAnswer(
        "scaled_dot_product_attention", "q @ k.transpose(-2, -1) / math.sqrt(d_k)", "q @ k.transpose(-2, -1)",
        "missing scale",
    ),
    "sqrt_d_model": WrongAnswer(
        "self_attention",
        "    return scaled_dot_product_attention(q, k, v, mask)",
        "    scores = q @ k.transpose(-2, -1) / math.sqrt(x.size(-1))\n"
        "    if mask is not None:\n"
        "        scores = scores.masked_fill(~mask, float('-inf'))\n"
        "    weights = stable_softmax(scores, dim=-1)\n"
        "    return weights @ v, weights",
        "sqrt(d_model)",
    ),
    "inverted_mask": WrongAnswer(
        "scaled_dot_product_attention", "scores.masked_fill(~mask,", "scores.masked_fill(mask,", "inverted mask",
    ),
    "mask_after_softmax": WrongAnswer(
        "scaled_dot_product_attention",
        '        scores = scores.masked_fill(~mask, float("-inf"))  # masked keys get zero weight\n'
        "    weights = stable_softmax(scores, dim=-1)  # (..., n, m), each row sums to 1",
        "        pass\n"
        "    weights = stable_softmax(scores, dim=-1)\n"
        "    if mask is not None:\n"
        "        weights = weights.masked_fill(~mask, 0.0)",
        "mask applied after the softmax",
    ),
    "k_not_transposed": WrongAnswer(
        "scaled_dot_product_attention", "q @ k.transpose(-2, -1) / math.sqrt(d_k)", "q @ k / math.sqrt(d_k)",
        "K is not transposed",
    ),
}

# The demo folder: student -> wrong answers applied (None: the untouched, blank notebook).
DEMO_STUDENTS = {
    "alice": [],
    "bob": None,
    "carol": ["missing_scale"],
    "dave": ["inverted_mask"],
}
DEMO_CHAPTER = "02-qkv-attention"
DEMO_DIR = course.ROOT / "autograder" / "demo"


def reference_source(chapter_id: str, function: str) -> str:
    module = importlib.import_module(f"solutions.{course.module_name(chapter_id)}")
    return inspect.getsource(getattr(module, function))


def apply_wrong_answer(source: str, wrong: WrongAnswer) -> str:
    if wrong.old not in source:
        raise ValueError(f"the wrong answer for {wrong.function} no longer applies: {wrong.old!r} is not in its reference source")
    return source.replace(wrong.old, wrong.new, 1)


def filled_submission(chapter_id: str, wrong_answers=(), student_nb=None) -> nbformat.NotebookNode:
    """The student notebook with every solution cell filled in with the reference, plus the given mistakes."""
    nb = copy.deepcopy(student_nb or nbformat.read(course.student_notebook(chapter_id), as_version=4))
    edits = [WRONG_ANSWERS[name] for name in wrong_answers]
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("solution"):
            continue
        source = reference_source(chapter_id, meta["grade_id"])
        for wrong in edits:
            if wrong.function == meta["grade_id"]:
                source = apply_wrong_answer(source, wrong)
        cell.source = source
    return nb


def write_demo(out_dir: Path = DEMO_DIR) -> list[Path]:
    """Write <out_dir>/<student>/<chapter>/exercises.ipynb for every demo student."""
    written = []
    for student, wrong in DEMO_STUDENTS.items():
        if wrong is None:
            nb = nbformat.read(course.student_notebook(DEMO_CHAPTER), as_version=4)
        else:
            nb = filled_submission(DEMO_CHAPTER, wrong)
        target = out_dir / student / DEMO_CHAPTER / f"{course.NOTEBOOK}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
        written.append(target)
    return written

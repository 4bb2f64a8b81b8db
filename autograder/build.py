"""Build the exercise notebooks from their instructor sources.

instructor source (autograder/source/<chapter>/exercises.md, Jinja + MyST Markdown)
  -> instructor notebook (<workdir>/source/<chapter>/exercises.ipynb, solutions filled in from solutions/)
  -> nbgrader generate_assignment -> student notebook (chapters/<chapter>/exercises.ipynb)

Every expected value in a visible check is computed here, from solutions/, when the notebook is built.
"""

import ast
import importlib
import inspect
import json
import math
import pprint
import shutil
from pathlib import Path

import jinja2
import jupytext
import nbformat
import torch

from autograder import course
from autograder.config import nbgrader_api

NBGRADER_SCHEMA = 3


class BuildError(Exception):
    pass


# --- Template helpers ------------------------------------------------------------------------------


def solution_source(module, name: str) -> str:
    """The source of function `name` in `module`, its body (after the docstring) between solution markers."""
    source = inspect.getsource(getattr(module, name))
    lines = source.splitlines()
    func = ast.parse(source).body[0]
    body = func.body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        body = body[1:]  # keep the docstring visible to learners
    if not body:
        raise BuildError(f"{module.__name__}.{name} has no body after its docstring")
    first, last = body[0].lineno - 1, body[-1].end_lineno  # 0-based start, exclusive end
    indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
    return "\n".join(
        lines[:first] + [f"{indent}### BEGIN SOLUTION"] + lines[first:last] + [f"{indent}### END SOLUTION"] + lines[last:]
    )


def tensor(data, dtype=None):
    """A tensor for a template: bools stay bool, numbers default to float64 (dtype='float32' to override)."""
    flat = torch.tensor(data)
    if flat.dtype == torch.bool:
        return flat
    return torch.tensor(data, dtype=getattr(torch, dtype or "float64"))


def _number(x) -> str:
    if math.isnan(x):
        return 'float("nan")'
    if math.isinf(x):
        return 'float("inf")' if x > 0 else 'float("-inf")'
    return f"{x:.8g}" if "e" in f"{x:.8g}" or "." in f"{x:.8g}" else f"{x:.8g}.0"


def literal(t: torch.Tensor, indent: str = "") -> str:
    """Python source that recreates tensor t (values to 8 significant digits); matrices one row per line."""
    dtype = "" if t.dtype == torch.bool else f", dtype=torch.{str(t.dtype).replace('torch.', '')}"

    def nested(v):
        if not isinstance(v, list):
            return str(v) if isinstance(v, bool) else _number(v)
        return "[" + ", ".join(nested(x) for x in v) + "]"

    if t.dim() < 2:
        return f"torch.tensor({nested(t.tolist())}{dtype})"
    rows = "".join(f"{indent}    {nested(row)},\n" for row in t.tolist())
    return f"torch.tensor([\n{rows}{indent}]{dtype})"


def mistakes(reference, variants: dict, *args, index=None, **kwargs) -> str:
    """A dict literal {mistake: what it outputs on these inputs}, for the visible checks' diagnoses.

    Variants that fail on these inputs, or agree with the reference here, are left out (they could not be
    told apart); so are duplicates of an earlier variant.
    """

    def pick(out):
        return out[index] if index is not None else out

    correct = pick(reference(*args, **kwargs))
    seen = [correct]
    entries = []
    for description, fn in variants.items():
        try:
            wrong = pick(fn(*args, **kwargs))
        except Exception:
            continue
        if any(w.shape == wrong.shape and torch.allclose(w, wrong, equal_nan=True, atol=1e-6) for w in seen):
            continue
        seen.append(wrong)
        entries.append(f"    {description!r}: {literal(wrong, indent='    ')},")
    return "{\n" + "\n".join(entries) + "\n}" if entries else "{}"


def render_source(chapter_id: str, template_text: str | None = None) -> str:
    name = course.module_name(chapter_id)
    reference = importlib.import_module(f"solutions.{name}")
    checks = importlib.import_module(f"autograder.checks.{name}")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    if template_text is None:
        template_text = course.instructor_source(chapter_id).read_text(encoding="utf-8")
    template = env.from_string(template_text)
    helpers = (course.ROOT / "autograder" / "nbchecks.py").read_text(encoding="utf-8")
    return template.render(
        check_helpers=helpers.strip(),
        solution=lambda fn_name: solution_source(reference, fn_name),
        answer=lambda grade_id: "### BEGIN SOLUTION\n" + reference.ANSWER_CELLS[grade_id].strip() + "\n### END SOLUTION",
        source=lambda fn_name, module=None: inspect.getsource(getattr(importlib.import_module(f"solutions.{module}") if module else reference, fn_name)).rstrip(),
        tensor=tensor,
        literal=literal,
        mistakes=mistakes,
        pretty=lambda obj: pprint.pformat(obj, width=110, sort_dicts=False),
        ref=reference,
        checks=checks,
        math=math,
        torch=torch,
    )


# --- Notebooks --------------------------------------------------------------------------------------

_KINDS = {
    "solution": dict(grade=False, solution=True, locked=False),
    "tests": dict(grade=True, solution=False, locked=True),
    "readonly": dict(grade=False, solution=False, locked=True),
}


def instructor_notebook(chapter_id: str, template_text: str | None = None) -> nbformat.NotebookNode:
    """The rendered instructor notebook, with nbgrader metadata and deterministic cell ids."""
    nb = jupytext.reads(render_source(chapter_id, template_text), fmt="md:myst")
    nb.metadata = nbformat.from_dict(
        {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
        }
    )
    seen = set()
    for i, cell in enumerate(nb.cells):
        meta = dict(cell.metadata)
        cell.metadata = nbformat.from_dict({})
        kind = meta.pop("kind", None)
        grade_id = meta.pop("grade_id", None)
        points = meta.pop("points", None)
        if meta:
            raise BuildError(f"{chapter_id}: cell {i} has unknown options {sorted(meta)}")
        cell.id = grade_id or f"cell-{i:02d}"
        if kind is None:
            continue
        if kind not in _KINDS or not grade_id:
            raise BuildError(f"{chapter_id}: cell {i} needs :kind: one of {sorted(_KINDS)} and a :grade_id:")
        if grade_id in seen:
            raise BuildError(f"{chapter_id}: duplicated grade_id {grade_id!r}")
        seen.add(grade_id)
        nbgrader = dict(_KINDS[kind], grade_id=grade_id, schema_version=NBGRADER_SCHEMA)
        if kind == "tests":
            if points is None:
                raise BuildError(f"{chapter_id}: tests cell {grade_id!r} needs :points:")
            nbgrader["points"] = points
        cell.metadata["nbgrader"] = nbgrader
    nbformat.validate(nb)
    return nb


def write_instructor_sources(workdir: Path, chapters=None) -> list[str]:
    """Render every chapter's instructor notebook into <workdir>/source/<chapter>/exercises.ipynb."""
    chapters = chapters or course.graded_chapters()
    for chapter_id in chapters:
        target = workdir / "source" / chapter_id / f"{course.NOTEBOOK}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(instructor_notebook(chapter_id), target)
    return chapters


def generate_assignments(workdir: Path, chapters=None, api=None) -> list[str]:
    """Instructor sources -> nbgrader generate_assignment (fills the gradebook) -> <workdir>/release/."""
    chapters = write_instructor_sources(workdir, chapters)
    api = api or nbgrader_api(workdir)
    for chapter_id in chapters:
        result = api.generate_assignment(chapter_id, force=True, create=True)
        if not result["success"]:
            raise BuildError(f"nbgrader generate_assignment failed for {chapter_id}:\n{result['error']}\n{result['log']}")
    return chapters


def normalized_json(nb) -> str:
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def build_student_notebooks(workdir: Path, out_root: Path = course.ROOT, chapters=None) -> list[Path]:
    """Generate the student notebooks and copy them into chapters/<chapter>/exercises.ipynb."""
    written = []
    for chapter_id in generate_assignments(workdir, chapters):
        released = nbformat.read(workdir / "release" / chapter_id / f"{course.NOTEBOOK}.ipynb", as_version=4)
        target = out_root / "chapters" / chapter_id / f"{course.NOTEBOOK}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(normalized_json(released), encoding="utf-8")
        written.append(target)
    return written


def clean_workdir(workdir: Path):
    if workdir.exists():
        shutil.rmtree(workdir)

"""The chapter contract: what every chapter with exercises must keep, as plain functions of its material.

Each function takes a chapter's `harness.Material` (student notebook, instructor notebook, checks, test data,
reference) and raises AssertionError listing every breach, with what to fix. tests/test_chapter_contract.py runs
each of them for every chapter of the registry (a new chapter gets the whole contract by existing), and shows
that a deliberately broken copy of a chapter fails each one.

The items (CONTRACT, in order):
- the reference earns full marks: every cell of the filled-in notebook runs, every visible check passes, every
  hidden check passes on several seeds (a costly check, one that trains a model, on the first seed only; it is run
  for a wrong answer only where the answer says it loses it);
- the untouched student notebook earns 0: every visible and hidden check fails, saying what is missing;
- every catalogued wrong answer is caught by its visible check (or, marked visible=False, is not), costs
  exactly the points of its own cells (`failing_cells`) and is told its diagnosis;
- every category a hidden check grades (values, shape, dtype, device, large, ...) has a visibly caught wrong
  answer of its exercise: green visible checks cannot hide lost points;
- the student notebook hides the solutions and the hidden tests;
- the instructor notebook's solution cells are the reference (solutions/);
- the points announced in the headings equal the graded cells under them, and the graded cells are the checks;
- the visible cells need torch alone (the standard library and torch: no solutions, no autograder);
- the hidden inputs change with the grading seed (every check that draws inputs);
- every valid alternative keeps full marks, visibly and hidden, on several seeds.
"""

import ast
import dataclasses
import inspect
import re
import sys

import torch

import harness
from harness import Material

SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
HIDDEN_MARKERS = ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")
STUB_LINES = {"# YOUR CODE HERE", "raise NotImplementedError()"}  # what nbgrader puts where a solution was
HEADING_POINTS = re.compile(r"^#{1,6} .*\((\d+) points?\)\s*$")


def _require(m: Material, problems: list, what: str):
    if problems:
        raise AssertionError(f"{m.chapter}: {what}:\n" + "\n".join(f"- {p}" for p in problems))


def _short(text, n=400) -> str:
    text = str(text)
    return text if len(text) <= n else text[:n] + " ..."


# --- Scores: reference, blank, wrong answers, valid alternatives ------------------------------------------------


def reference_earns_full_marks(m: Material, seeds=harness.SEEDS):
    """The student notebook filled in with the reference: no cell raises, every graded cell has its visible check
    and that check passes, every hidden check passes on each seed."""
    run = harness.run_notebook(harness.filled(m))
    problems = [f"cell {key} raises {_short(message)}" for key, message in run.failures().items()]
    problems += [f"{gid} has no visible check cell {harness.visible_cell_of(gid)}" for gid in m.checks.CHECKS
                 if harness.visible_cell_of(gid) not in run.outcomes]
    for i, seed in enumerate(seeds):
        problems += [f"{gid} loses its points on seed {seed}: {_short(message)}"
                     for gid, message in harness.lost(harness.hidden(m, run.namespace, seed, _on_seed(m, i))).items()]
    _require(m, problems, "the reference does not earn full marks")


def _cheap(m: Material) -> set:
    """The grade ids of the chapter's checks that are not costly (Check.costly: a check that trains a model)."""
    return {gid for gid, check in m.checks.CHECKS.items() if not check.costly}


def _on_seed(m: Material, i: int):
    """The checks run on the i-th seed of a list: all on the first, the cheap ones on the others (None: all)."""
    return None if i == 0 or len(_cheap(m)) == len(m.checks.CHECKS) else _cheap(m)


def _stub(source: str, name: str | None) -> str | None:
    """What the untouched notebook must be told about a solution cell: 'not defined' for a typed answer (or a cell
    that defines nothing), 'not implemented' for a function or class whose every function raises
    NotImplementedError, None for a cell that hands out code to fix (find-the-bug: it earns 0, told anything)."""
    tree = ast.parse(source)
    definitions = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
    definition = next((node for node in definitions if node.name == name), None)
    if name is not None and definition is None and definitions:
        # The graded function is a course-given driver of what the cell defines (e.g. a class driven through a
        # read-only function): the cell's own definition is what the learner has left to write.
        definition = definitions[0]
    if name is None or definition is None:
        return "not defined"
    functions = [definition] if isinstance(definition, ast.FunctionDef) else [
        node for node in definition.body if isinstance(node, ast.FunctionDef)]

    def raises_not_implemented(fn):
        return any(isinstance(s, ast.Raise) and "NotImplementedError" in ast.unparse(s) for s in fn.body)

    return "not implemented" if functions and all(map(raises_not_implemented, functions)) else None


def blank_notebook_earns_nothing(m: Material):
    """The untouched student notebook: every visible check fails, every hidden check takes all its points, and
    says what is missing ('not implemented' for a stub, 'not defined' for a typed answer)."""
    run = harness.run_notebook(m.student)
    sources = {harness.grade_id(c): c.source for c in harness.solution_cells(m.student)}
    problems = [f"the visible check {harness.visible_cell_of(gid)} passes an untouched notebook"
                for gid in m.checks.CHECKS if run.error(harness.visible_cell_of(gid)) is None]
    for gid, message in harness.hidden(m, run.namespace).items():
        check = m.checks.CHECKS[gid]
        if message is None:
            problems.append(f"{gid} earns its points in an untouched notebook")
            continue
        cell = gid.removesuffix("_hidden")
        said = _stub(sources[cell], check.function) if cell in sources else "not implemented"
        if said and said not in message.lower():
            problems.append(f"{gid} does not say {said!r} to an untouched notebook: {_short(message)}")
    _require(m, problems, "the untouched notebook")


def wrong_answers_are_caught(m: Material, names=None, raw_errors=()):
    """Each catalogued wrong answer (WRONG_ANSWERS), applied to the filled-in notebook: its exercise's visible
    check fails with CheckFailed, a diagnosis, if it is marked visible (and passes if it is not: the mark is
    honest); the hidden checks take exactly the points of its `failing_cells` and no others; their message holds
    its diagnosis. raw_errors: wrong answers whose visible check may show another exception (the learner's own)."""
    cell_points = harness.points(m.instructor)
    problems = []
    for name in m.wrong_answers if names is None else names:
        wrong = m.wrong_answers[name]
        try:
            run = harness.learner_run(m, wrong=(name,))
        except ValueError as exc:
            problems.append(f"{name}: {exc}")
            continue
        visible = f"{wrong.function}_visible"
        error = run.error(visible)
        if visible not in run.outcomes:
            problems.append(f"{name}: the notebook has no visible check {visible}")
        elif wrong.visible and error is None:
            problems.append(f"{name}: its visible check {visible} passes this {wrong.category} mistake")
        elif wrong.visible and type(error).__name__ != "CheckFailed" and name not in raw_errors:
            problems.append(f"{name}: its visible check {visible} shows a raw error, not a diagnosis: {_short(run.message(visible))}")
        elif not wrong.visible and error is not None:
            problems.append(f"{name}: marked visible=False, but {visible} catches it (mark it visible): {_short(run.message(visible))}")
        expected = set(wrong.failing_cells)
        results = harness.hidden(m, run.namespace, grade_ids=_cheap(m) | expected)  # a costly check: where it is said lost
        lost = set(harness.lost(results))
        if lost != expected:
            cost = sum(cell_points[g] for g in lost)
            problems.append(f"{name}: loses {cost} points in {sorted(lost)}, expected {sum(cell_points.get(g, 0) for g in expected)} "
                            f"in {sorted(expected)}: {_short({g: results[g] for g in lost ^ expected}, 800)}")
            continue
        said = " | ".join(results[g] for g in expected)
        if wrong.diagnosis not in said:
            problems.append(f"{name}: the hidden check says {_short(said)!r}, not {wrong.diagnosis!r}")
    _require(m, problems, "catalogued wrong answers")


# A valid answer is graded here on two of harness.SEEDS, and through the real CLI on a third seed by
# tests/test_pipeline.py (CORPUS_SEED): three seeds in all, each notebook run once fewer in-process.
VALID_SEEDS = harness.SEEDS[:2]


def valid_answers_keep_full_marks(m: Material, names=None, seeds=VALID_SEEDS):
    """Each valid alternative (VALID_ANSWERS), in the notebook: no cell raises, and every hidden check, run on
    the notebook's namespace in this process, passes on each seed."""
    problems = []
    for name in m.valid_answers if names is None else names:
        why = m.valid_answers[name].why
        try:
            run = harness.run_notebook(harness.filled(m, valid=[name]))
        except ValueError as exc:
            problems.append(f"{name}: {exc}")
            continue
        problems += [f"{name} ({why}): cell {key} raises {_short(message)}" for key, message in run.failures().items()]
        for i, seed in enumerate(seeds):
            problems += [f"{name} ({why}): {gid} loses its points on seed {seed}: {_short(message)}"
                         for gid, message in harness.lost(harness.hidden(m, run.namespace, seed, _on_seed(m, i))).items()]
    _require(m, problems, "valid alternatives")


def every_graded_category_is_caught_visibly(m: Material):
    """For each hidden check and each category it grades (Check.categories, "shape" included), a wrong answer of
    that category in its exercise is caught by the exercise's visible check (wrong_answers_are_caught proves the
    visible marks)."""
    problems = []
    for gid, check in m.checks.CHECKS.items():
        exercise = gid.removesuffix("_hidden")
        caught = {w.category for w in m.wrong_answers.values() if w.visible and w.function == exercise and gid in w.failing_cells}
        problems += [f"{gid}: {category}" for category in check.categories if category not in caught]
    _require(m, problems, "hidden checks grade these categories with no visibly caught wrong answer of their exercise")


# --- The notebooks ---------------------------------------------------------------------------------------------


def _regions(source: str, markers) -> tuple[list, list]:
    """(lines inside the marked regions, lines outside them), marker lines dropped."""
    inside, outside, within = [], [], False
    for line in source.splitlines():
        if line.strip() == markers[0]:
            within = True
        elif line.strip() == markers[1]:
            within = False
        else:
            (inside if within else outside).append(line)
    return inside, outside


def _reference_source(m: Material, gid: str) -> str:
    """The reference of a solution cell: a function or class of solutions/, or its ANSWER_CELLS text."""
    cells = getattr(m.reference, "ANSWER_CELLS", {})
    return cells[gid] if gid in cells else inspect.getsource(getattr(m.reference, gid))


def student_notebook_hides_the_solutions(m: Material):
    """No marker of nbgrader's, no line of a solution (the instructor's solution regions, the reference source) that
    the learner is not shown anyway, no hidden test: every solution cell is a stub raising NotImplementedError and
    every graded cell holds comments only."""
    shown, secret = set(STUB_LINES), set()
    for cell in m.instructor.cells:
        meta = cell.metadata.get("nbgrader", {})
        markers = SOLUTION_MARKERS if meta.get("solution") else HIDDEN_MARKERS
        inside, outside = _regions(cell.source, markers)
        shown.update(line.strip() for line in outside)
        secret.update(line.strip() for line in inside)
        if meta.get("solution"):
            secret.update(line.strip() for line in _reference_source(m, meta["grade_id"]).splitlines())
    secret = {line for line in secret - shown if re.search(r"\w", line)}
    problems = []
    for cell in m.student.cells:
        gid = harness.grade_id(cell) or cell.id
        leaked = [line.strip() for line in cell.source.splitlines() if line.strip() in secret]
        problems += [f"cell {gid} shows a solution line: {line!r}" for line in leaked[:3]]
        problems += [f"cell {gid} holds {marker!r}" for marker in (*SOLUTION_MARKERS, *HIDDEN_MARKERS) if marker.strip("# ") in cell.source]
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and "raise NotImplementedError()" not in cell.source:
            problems.append(f"solution cell {gid} does not raise NotImplementedError(): is it filled in?")
        if meta.get("grade") and any(line.strip() and not line.lstrip().startswith("#") for line in cell.source.splitlines()):
            problems.append(f"graded cell {gid} holds code (its hidden tests): {_short(cell.source, 200)!r}")
    _require(m, problems, "the student notebook gives solutions away")


def solution_cells_are_the_reference(m: Material):
    """Each solution cell of the instructor notebook, solution markers removed, is the reference source of
    solutions/ (after the code the learner is given to fix, if the cell's solution region starts at its top)."""
    problems = []
    instructor = [harness.grade_id(c) for c in harness.solution_cells(m.instructor)]
    student = [harness.grade_id(c) for c in harness.solution_cells(m.student)]
    if instructor != student:
        problems.append(f"the solution cells differ: instructor {instructor}, student {student}")
    for cell in harness.solution_cells(m.instructor):
        gid, source = harness.grade_id(cell), cell.source
        if f"\n{SOLUTION_MARKERS[0]}\n" in f"\n{source}":  # a top-level region: given code above it, not the solution
            source = source.split(f"{SOLUTION_MARKERS[0]}\n", 1)[1]
        solution = "\n".join(line for line in source.splitlines() if line.strip() not in SOLUTION_MARKERS)
        try:
            reference = _reference_source(m, gid)
        except AttributeError:
            problems.append(f"solution cell {gid} has no reference in {m.reference.__name__}")
            continue
        if solution.strip() != reference.strip():
            problems.append(f"solution cell {gid} drifted from {m.reference.__name__}.{gid}")
    _require(m, problems, "solution cells are not the reference")


def headings_announce_the_graded_points(m: Material):
    """'## 2. ... (5 points)' equals the points of the graded cells under it (up to the next such heading); the
    graded cells are the chapter's checks, with the instructor notebook's points in the student notebook."""
    points = harness.points(m.instructor)
    problems = []
    if harness.points(m.student) != points:
        problems.append(f"graded cells and points differ: instructor {points}, student {harness.points(m.student)}")
    if set(points) != set(m.checks.CHECKS):
        problems.append(f"graded cells {sorted(points)} are not the checks {sorted(m.checks.CHECKS)}")
    sections = []  # [heading, announced points, points of the graded cells under it]
    for cell in m.student.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if heading := HEADING_POINTS.match(line):
                    sections.append([line, int(heading.group(1)), 0])
        elif harness.grade_id(cell) in points:
            if not sections:
                problems.append(f"graded cell {harness.grade_id(cell)} comes before any heading with points")
                continue
            sections[-1][2] += points[harness.grade_id(cell)]
    problems += [f"{heading!r} announces {announced}, its graded cells give {actual}" for heading, announced, actual in sections
                 if announced != actual]
    if not sections:
        problems.append("no heading announces points")
    _require(m, problems, "headings and graded points disagree")


def _imported(tree) -> list:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names.append(node.module or "")
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and ast.unparse(node.func) in ("__import__", "importlib.import_module")):
            names.append(str(node.args[0].value))
    return names


def visible_cells_need_torch_alone(m: Material):
    """Every code cell of the student notebook imports only the standard library and torch: the visible checks
    run in the learner's environment, which has no solutions/ and no autograder."""
    problems = []
    for cell in m.student.cells:
        if cell.cell_type != "code":
            continue
        for name in _imported(ast.parse(cell.source)):
            top = name.split(".")[0]
            if top != "torch" and top not in sys.stdlib_module_names:
                problems.append(f"cell {harness.grade_id(cell) or cell.id} imports {name}")
    _require(m, problems, "the student notebook needs more than torch")


# --- Hidden inputs -----------------------------------------------------------------------------------------------


def _fingerprint(value):
    """A comparable picture of a check's plan: tensors by dtype, shape and bytes, dataclasses by their fields."""
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), tuple(value.shape), value.detach().cpu().contiguous().numpy().tobytes())
    if isinstance(value, torch.Generator):
        return ("generator", value.initial_seed())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, tuple(_fingerprint(getattr(value, f.name)) for f in dataclasses.fields(value)))
    if isinstance(value, dict):
        return tuple(sorted((repr(k), _fingerprint(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_fingerprint(v) for v in value)
    return repr(value)


def hidden_inputs_change_with_the_seed(m: Material, seeds=(3, 1234)):
    """Each check that draws inputs (every check but typed answers, whose plan only reads variables) plans other
    calls on another grading seed: a learner cannot pass by fitting the inputs of one run."""
    problems = []
    for gid, check in m.checks.CHECKS.items():
        plans = [check.plan(seed, harness.DEVICE) for seed in seeds]
        if all(call.variable is not None for call in plans[0]):
            continue
        if _fingerprint(plans[0]) == _fingerprint(plans[1]):
            problems.append(f"{gid}: the same inputs on seeds {seeds}")
    _require(m, problems, "hidden inputs ignore the grading seed")


CONTRACT = [
    reference_earns_full_marks,
    blank_notebook_earns_nothing,
    wrong_answers_are_caught,
    every_graded_category_is_caught_visibly,
    student_notebook_hides_the_solutions,
    solution_cells_are_the_reference,
    headings_announce_the_graded_points,
    visible_cells_need_torch_alone,
    hidden_inputs_change_with_the_seed,
    valid_answers_keep_full_marks,
]

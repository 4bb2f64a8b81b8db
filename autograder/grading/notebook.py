"""Grade one submission: read it defensively, run it in the sandbox, judge it here, write its feedback.

The notebook that runs is rebuilt from the course's own released notebook (trusted): the learner's code
comes only from the solution cells (matched by nbgrader grade id) and from cells the learner added; every
check cell is the course's. So deleted, edited, duplicated or renamed check cells change nothing. An edit of a
read-only cell is not run (as under nbgrader) but said: a note per cell with the learner's diff
(readonly_edits), and a failure that may follow from it says so (explain_discarded_edits). Each
graded cell becomes a "probe" in the sandbox, which only calls the learner's function on the grader's
inputs; the comparison with `solutions/` happens here, in `judge`, on the decoded outputs.

`grade_submission` never raises for anything a submission does: every problem becomes a status and a
message in its result.
"""

import ast
import dataclasses
import difflib
import functools
import hashlib
import hmac
import importlib
import json
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import nbformat
import numpy as np

from autograder import registry
from autograder.grading import sandbox, shortcuts, warm
from autograder.reporting.feedback import write_feedback
from autograder.results import CellScore, Result, Settings, atomic_write
from autograder.checks import PartialCredit, encode_calls, judge_with_replays, runner, visible
from autograder.checks.judge import GRADED_ERRORS
from autograder.grading.submission import read_submission

RESTARTS = 3  # a cell that hangs or kills the process is skipped and the notebook run again, at most this often
SKIP_WHEN_GRADING = ("check_helpers",)  # readonly cells that only serve the visible checks


def _nbgrader(cell) -> dict:
    meta = cell.get("metadata", {}) if isinstance(cell, dict) else {}
    nb = meta.get("nbgrader") if isinstance(meta, dict) else None
    return nb if isinstance(nb, dict) else {}


def _source(cell) -> str:
    src = cell.get("source", "") if isinstance(cell, dict) else ""
    if isinstance(src, list):
        src = "".join(s for s in src if isinstance(s, str))
    return src if isinstance(src, str) else ""


def plan_cells(released, submitted, checks_module):
    """The cells to run, in order, with where each came from; and notes on cells that were missing.

    Returns (cells, notes, solutions): cells are dicts {index, kind: code|probe, source, probe?, origin};
    solutions maps a solution grade id to the learner's source (or None when missing).
    """
    known = {_nbgrader(c).get("grade_id") for c in released.cells if _nbgrader(c).get("grade_id")}
    # The course's own free cells (no nbgrader metadata, e.g. "Your plot here (optional)"), by cell id.
    free = {c.get("id"): _source(c).strip().splitlines()[0] if _source(c).strip() else "an empty cell"
            for c in released.cells if c.cell_type == "code" and not _nbgrader(c)}
    course_sources = {_source(c).strip() for c in released.cells if c.cell_type == "code" and _nbgrader(c) and not _nbgrader(c).get("solution")} - {""}
    learner, extra_after, seen, notes = {}, {None: []}, set(), []
    anchor = None
    for cell in submitted["cells"]:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        gid = _nbgrader(cell).get("grade_id")
        if isinstance(gid, str) and gid in known and gid not in seen:
            seen.add(gid)
            learner[gid] = _source(cell)
            anchor = gid
        else:
            if isinstance(gid, str) and gid in seen:
                notes.append(f"a second cell with id {gid!r} (a copy?) was run as an extra cell")
            cell_id = cell.get("id") if not gid else None
            if _source(cell).strip() in course_sources:
                origin = "the course's own cell (a copy)"  # e.g. the check helpers in a notebook without metadata
            elif cell_id in free:
                origin = f"your code in the notebook's cell '{free[cell_id]}'"
            else:
                origin = "a cell you added"
            extra_after.setdefault(anchor, []).append((_source(cell), origin))

    cells, solutions = [], {}

    def add(kind, source, origin, probe=None):
        cells.append({"index": len(cells), "kind": kind, "source": source, "probe": probe, "origin": origin,
                      "learner": kind == "code" and not origin.startswith("the course's")})

    for source, origin in extra_after.get(None, []):
        add("code", source, origin)
    for cell in released.cells:
        meta = _nbgrader(cell)
        gid = meta.get("grade_id")
        if cell.cell_type != "code" or not gid:
            continue
        if meta.get("solution"):
            solutions[gid] = learner.get(gid)
            if gid not in learner:
                notes.append(f"the solution cell {gid!r} is missing from the notebook (deleted, or its metadata changed)")
            # A missing solution cell runs nothing: a definition from a cell the learner added still counts.
            add("code", learner.get(gid, "pass"), f"your cell {gid!r}")
        elif meta.get("grade"):
            if gid in checks_module.CHECKS:
                add("probe", "", f"the graded check {gid!r}", probe=gid)
        elif gid not in SKIP_WHEN_GRADING and not gid.endswith("_visible"):
            add("code", cell.source, f"the course's cell {gid!r}")
        for source, origin in extra_after.get(gid, []):
            add("code", source, origin)
    return cells, notes, solutions


MAX_DIFF_LINES = 24  # a note's diff of an edited read-only cell: at most this many lines ...
MAX_DIFF_WIDTH = 160  # ... of at most this many characters each


def _comparable(source: str) -> str:
    """A cell's source as compared for edits: line endings and trailing whitespace do not count."""
    lines = source.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "\n".join(line.rstrip() for line in lines).rstrip("\n")


def short_diff(course: str, edited: str) -> str:
    """A unified diff of the learner's edit against the course's cell, bounded in lines and width."""
    lines = list(difflib.unified_diff(_comparable(course).split("\n"), _comparable(edited).split("\n"),
                                      "the course's version", "your version", n=1, lineterm=""))
    shown = [line if len(line) <= MAX_DIFF_WIDTH else line[: MAX_DIFF_WIDTH - 1] + "…" for line in lines[:MAX_DIFF_LINES]]
    if len(lines) > MAX_DIFF_LINES:
        shown.append(f"… ({len(lines) - MAX_DIFF_LINES} more line(s) of the diff not shown)")
    return "\n".join(shown)


def readonly_edits(released, submitted) -> list[dict]:
    """The read-only cells the learner changed: [{cell: grade id, diff, names}], in the notebook's order.

    The grader runs the course's version of every read-only cell (as nbgrader does), never the learner's edit;
    this says which edits that discards. A cell is matched by grade id (its first copy, as plan_cells does);
    line endings and trailing whitespace do not count as an edit. names: what the edit defines or imports that
    the course's version lacks or defines otherwise (shortcuts.changed_names), to explain failures that follow;
    new: those of them the course's version does not define at all; runs: whether the grader runs the course's
    version of this cell (not a check cell)."""
    course = {_nbgrader(c).get("grade_id"): _source(c) for c in released.cells
              if c.cell_type == "code" and _nbgrader(c).get("grade_id") and not _nbgrader(c).get("solution")}
    graded = {_nbgrader(c).get("grade_id") for c in released.cells if _nbgrader(c).get("grade")}
    edits, seen = [], set()
    for cell in submitted["cells"]:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        gid = _nbgrader(cell).get("grade_id")
        if not isinstance(gid, str) or gid in seen or gid not in course:
            continue
        seen.add(gid)
        edited = _source(cell)
        if _comparable(edited) != _comparable(course[gid]):
            names = shortcuts.changed_names(course[gid], edited)
            runs = gid not in graded and gid not in SKIP_WHEN_GRADING and not gid.endswith("_visible")
            edits.append({"cell": gid, "diff": short_diff(course[gid], edited), "names": names,
                          "new": names - set(shortcuts.definitions(course[gid]) or ()), "runs": runs})
    return edits


MAX_EDIT_NOTES = 8  # notes with a diff per notebook; further edited cells are named in one more note


def readonly_edit_notes(edits) -> list[str]:
    """The result's notes on the discarded edits: one per cell (with its diff), the cells past MAX_EDIT_NOTES named
    in one line (a notebook from another release of the course can differ in every cell)."""
    notes = [readonly_edit_note(edit) for edit in edits[:MAX_EDIT_NOTES]]
    if len(edits) > MAX_EDIT_NOTES:
        rest = [repr(edit["cell"]) for edit in edits[MAX_EDIT_NOTES:]]
        notes.append(f"your edits of {len(rest)} more read-only cell(s) were not run either: {', '.join(rest)}")
    return notes


def readonly_edit_note(edit: dict) -> str:
    """The result's note on one discarded edit: a first line for the table, then the learner's diff."""
    names = sorted(edit["names"])
    what = f" (it defines or imports {', '.join(f'`{n}`' for n in names[:6])}{', ...' if len(names) > 6 else ''})" if names else ""
    return (f"your edit of the read-only cell {edit['cell']!r} was not run{what}: the grader runs the course's version of "
            "read-only cells, as nbgrader does; code of your own belongs in your answer cells (or a cell you add). "
            f"Your edit:\n{edit['diff']}")


def _prefix_arrays(spec, prefix):
    """Rename every {"tensor": name} inside a call spec (args, module weights) to prefix+name."""
    if isinstance(spec, dict):
        if isinstance(spec.get("tensor"), str):
            spec["tensor"] = prefix + spec["tensor"]
        for value in spec.values():
            _prefix_arrays(value, prefix)
    elif isinstance(spec, list):
        for value in spec:
            _prefix_arrays(value, prefix)


@functools.lru_cache(maxsize=None)
def implementation_routes(switch_off: tuple, idle_identity: tuple) -> list:
    """runner.implementation_routes, once per grading process and forbidden set: the grader has the sandbox's torch,
    and searching torch for its implementations is most of what arming the guard would otherwise cost each notebook.
    The list travels in job.json, which the sandbox reads before any learner code runs and cannot write."""
    return runner.implementation_routes(switch_off, idle_identity)


def write_job(job_dir: Path, cells, checks_module, settings: Settings, skip: dict, replay=None, only=None):
    """job.json + inputs.npz + runner.py, readable (not writable) by the sandbox's user.
    replay: {probe cell index: {call index: callee table}} for a replay round: only those calls of those
    probes are made (each with its table, see autograder.checks.judge_with_replays); other probes are left out.
    only: the grade ids of the probes to make (a guard group's own run, see guard_groups); other probes are left out.
    Each probe carries its check's forbidden names (what the observers note) and what the sandbox's guard switches
    off for it: their families, expanded here (the runner imports nothing of the course). The runner arms the guard
    with the union over the job's probes, before any cell runs. Without a sandbox (`check`, sandbox mode "plain")
    the job asks for no seccomp walls and no exec block (Linux-only, and the learner's own machine)."""
    from autograder.checks import builtins

    probes, arrays, calls_by_cell = {}, {}, {}
    for cell in cells:
        if cell["kind"] != "probe" or (replay is not None and cell["index"] not in replay):
            continue
        if only is not None and cell["probe"] not in only:
            continue
        check = checks_module.CHECKS[cell["probe"]]
        calls = check.plan(settings.seed, settings.device)
        if replay is not None:
            chosen = sorted(replay[cell["index"]])
            calls = [calls[i] for i in chosen]
        specs, cell_arrays = encode_calls(calls)
        if replay is not None:
            for spec, i in zip(specs, chosen):
                spec["replay"] = replay[cell["index"]][i]
        prefix = f"c{cell['index']}_"
        for spec in specs:
            _prefix_arrays(spec, prefix)
        arrays.update({prefix + k: v for k, v in cell_arrays.items()})
        probes[cell["probe"]] = {"function": check.function, "calls": specs, "forbidden": sorted(check.forbidden), "callees": list(check.callees),
                                 "switch_off": builtins.switched_off(check.forbidden), "idle_identity": builtins.idle_identity(check.forbidden)}
        calls_by_cell[cell["index"]] = calls
    run_cells = [
        {"index": c["index"], "kind": c["kind"], "probe": c["probe"], "source": "pass" if c["index"] in skip else c["source"]}
        if c["kind"] != "probe" or c["probe"] in probes else {"index": c["index"], "kind": "code", "probe": None, "source": "pass"}
        for c in cells
    ]
    job = {"cells": run_cells, "probes": probes}
    switch_off = sorted({name for probe in probes.values() for name in probe["switch_off"]})
    if switch_off:  # torch's Python implementations of them, found here once per run (see runner.arm_guard)
        idle = sorted({name for probe in probes.values() for name in probe["idle_identity"]})
        job["implementations"] = implementation_routes(tuple(switch_off), tuple(idle))
    if settings.sandbox_mode == sandbox.PLAIN:
        job.update(walls=False, block_exec=False)
    (job_dir / "job.json").write_text(json.dumps(job), encoding="utf-8")
    np.savez(job_dir / "inputs.npz", **arrays)
    shutil.copy(Path(runner.__file__), job_dir / "runner.py")
    for path in [job_dir, *job_dir.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return calls_by_cell


def chapter_limits(limits: sandbox.Limits, checks_module) -> sandbox.Limits:
    """The sandbox's limits for a notebook of this chapter: the run's own, with the time the chapter's checks module
    asks for (LIMITS, e.g. {"cell_seconds": 240, "notebook_seconds": 420} for a chapter whose check trains a model).
    A chapter can only raise a limit, never lower one the instructor set; every other chapter is left as it is."""
    wanted = getattr(checks_module, "LIMITS", None) or {}
    unknown = set(wanted) - {"cell_seconds", "notebook_seconds"}
    if unknown:
        raise ValueError(f"{checks_module.__name__}.LIMITS: only cell_seconds and notebook_seconds can be set per chapter, "
                         f"not {sorted(unknown)}")
    return dataclasses.replace(limits, **{k: max(float(v), getattr(limits, k)) for k, v in wanted.items()})


def run_with_restarts(cells, checks_module, settings: Settings, only=None):
    """Run the job; a cell that hangs, kills the process or floods the output is skipped and the run
    repeated (the rest of the notebook still gets graded). Returns (records by cell, skip reasons, calls,
    notes on the run: processes the kernel stopped when the notebook's memory group was full, how the first run's
    sandbox started: warm or cold and why). only: as for write_job."""
    skip, notes, starts = {}, [], []
    for attempt in range(RESTARTS + 1):
        with tempfile.TemporaryDirectory(prefix="course-job-") as tmp:
            job_dir = Path(tmp)
            calls_by_cell = write_job(job_dir, cells, checks_module, settings, skip, only=only)
            if attempt == 0:
                import_for_the_judge_beside(calls_by_cell)
            outcome = warm.run_job(job_dir, settings.sandbox_mode, chapter_limits(settings.limits, checks_module))
        starts.append(outcome.start)
        if outcome.oom_kills and outcome.status == "finished":
            notes.append(f"the notebook's processes together went over their memory limit "
                         f"({settings.limits.group_memory_bytes / 2**30:g} GiB): the kernel stopped {outcome.oom_kills} of them")
        by_cell = {}
        for record in outcome.records:
            if record.get("event") in ("done", "probe") and isinstance(record.get("cell"), int):
                by_cell.setdefault(record["cell"], {})[record["event"]] = record
        if outcome.status == "finished":
            return by_cell, skip, calls_by_cell, notes, starts[0]
        culprit = outcome.cell if outcome.cell is not None else (max(by_cell) + 1 if by_cell else 0)
        if culprit in skip or culprit >= len(cells) or attempt == RESTARTS:
            for cell in cells[culprit:]:
                skip.setdefault(cell["index"], f"not run: the notebook stopped earlier ({outcome.detail})")
            return by_cell, skip, calls_by_cell, notes, starts[0]
        skip[culprit] = f"{cells[culprit]['origin']} was stopped: {outcome.detail}"
    raise AssertionError("unreachable")


def guard_groups(cells, checks_module) -> list[set[str]]:
    """The probes that need a run of their own because the guard of the whole notebook switches off more than their
    exercise's rule: [{grade ids}], one set per distinct list of switched-off built-ins smaller than the union.
    The runner arms the guard once, before any cell, with the union over the job's probes (it cannot be undone, so
    it cannot be armed later or per cell); an exercise whose rule forbids nothing (chapter 03's typed answers) would
    otherwise be graded with another exercise's built-ins switched off."""
    from autograder.checks import builtins

    groups = {}
    for cell in cells:
        if cell["kind"] == "probe":
            forbidden = checks_module.CHECKS[cell["probe"]].forbidden
            groups.setdefault(tuple(builtins.switched_off(forbidden)), set()).add(cell["probe"])
    union = set().union(*map(set, groups)) if groups else set()
    return [gids for names, gids in groups.items() if set(names) != union]


def _guard_refused(by_cell) -> bool:
    """Did the guard refuse anything in this run (a cell or a check stopped by a switched-off built-in)?"""
    return any(runner.GUARD_PREFIX in json.dumps(record) for records in by_cell.values() for record in records.values())


def run_and_judge(cells, checks_module, solutions, points, settings: Settings, edits=()):
    """Run the notebook (run_with_restarts) and judge every graded cell: the one path of `grade` and `check`.
    Where the guard refused something in the run and some exercises' rule forbids less than the union the guard
    switched off (guard_groups), those exercises are run again with only their own rule and judged on that run:
    the rule each exercise states is the rule it is graded by. Returns (scores, by_cell, skip, notes, start) of
    the first run (its records feed the feedback)."""
    by_cell, skip, calls_by_cell, notes, start = run_with_restarts(cells, checks_module, settings)
    groups = guard_groups(cells, checks_module) if _guard_refused(by_cell) else []
    own = set().union(*groups) if groups else set()
    scores = {s.grade_id: s for s in judge(cells, by_cell, skip, calls_by_cell, solutions, checks_module, points, settings, edits,
                                           probes=None if not own else {c["probe"] for c in cells if c["kind"] == "probe"} - own)}
    for gids in groups:
        g_by_cell, g_skip, g_calls, g_notes, _ = run_with_restarts(cells, checks_module, settings, only=gids)
        notes += [n for n in g_notes if n not in notes]
        for s in judge(cells, g_by_cell, g_skip, g_calls, solutions, checks_module, points, settings, edits, probes=gids):
            scores[s.grade_id] = s
    ordered = [scores[c["probe"]] for c in cells if c["kind"] == "probe" and c["probe"] in scores]
    return ordered, by_cell, skip, notes, start


def replay_in_sandbox(cells, cell, indices, tables, checks_module, settings: Settings, skip: dict):
    """A replay round (autograder.checks.judge_with_replays): the notebook run again in a fresh sandbox, with only
    these calls of this probe, each with its callee answering from its table; returns their new records (a call
    the round could not make is a failed record saying why)."""
    replay = {cell["index"]: dict(zip(indices, tables))}
    with tempfile.TemporaryDirectory(prefix="course-replay-") as tmp:
        job_dir = Path(tmp)
        write_job(job_dir, cells, checks_module, settings, skip, replay=replay)
        outcome = warm.run_job(job_dir, settings.sandbox_mode, chapter_limits(settings.limits, checks_module))
    probe = next((r for r in outcome.records if r.get("event") == "probe" and r.get("cell") == cell["index"]), None)
    records = probe.get("calls") if isinstance(probe, dict) else None
    if not isinstance(records, list) or len(records) != len(indices):
        why = f"the second run stopped early ({outcome.detail or outcome.status})"
        return [{"ok": False, "error": f"RuntimeError: {why}", "outputs": None, "forbidden": []} for _ in indices]
    return records


def unused_drafts(function, cells, ran_cleanly) -> dict[int, set[int]]:
    """{cell index: indices of its top-level statements} of the definitions of `function` that are unused drafts.

    The rule (what is fair for an earlier draft of a solution, e.g. a duplicated solution cell whose first version
    called a forbidden built-in): a top-level `def` (or `class`) of the exercise's function is a draft when, in the
    order the notebook runs, it is defined again later and nothing can have used it in between: no statement in
    between reads the name (anywhere, a function's body too, since calling that function would reach the draft;
    the redefinition's own decorators and defaults count, its body does not) and no graded check runs in between
    (a check may call it, directly or through another function). A redefinition counts only in a cell that ran
    to its end without an error. A draft is left out of the static reading for forbidden built-ins; everything
    else of its cell is still read, and the sandbox's guard still switches the built-ins off for any real call."""
    drafts, pending = {}, None
    for cell in cells:
        if cell["kind"] == "probe":
            pending = None
            continue
        tree = shortcuts.parse(cell["source"])
        if tree is None:
            continue  # it does not run (SyntaxError): it neither uses nor redefines anything
        for i, statement in enumerate(tree.body):
            if shortcuts.reads_name(statement, function):
                pending = None
            if function not in shortcuts.bound_by(statement) or cell["index"] not in ran_cleanly:
                continue
            if pending is not None:
                drafts.setdefault(pending[0], set()).add(pending[1])
            defines = isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            pending = (cell["index"], i) if defines and cell.get("learner") else None
    return drafts


def _without_statements(source: str, indices: set[int]) -> str:
    tree = shortcuts.parse(source)
    tree.body = [s for i, s in enumerate(tree.body) if i not in indices]
    return ast.unparse(tree)


def learner_code_findings(function, solutions, cells, checks_module, ran_cleanly=None):
    """What the static reading finds in the learner's code that serves this exercise:
    (forbidden built-ins, private torch machinery). Read: the exercise's solution cell and every added cell
    that (re)defines the function; for private machinery also every added cell that defines no graded
    function (such code acts on the whole run). With ran_cleanly (the indices of the cells that ran to their end
    without an error), an unused earlier draft of the function is not read for forbidden built-ins (see
    unused_drafts); private machinery is looked for everywhere, drafts included."""
    graded = {name for name in solutions}
    own_cell = next((c for c in cells if function and c["origin"] == f"your cell {function!r}"), None)
    added = [c for c in cells if c.get("learner") and not c["origin"].startswith("your cell ")]
    redefining = [c for c in added if function and function in shortcuts.defined_names(c["source"])]
    drafts = unused_drafts(function, cells, ran_cleanly) if function and ran_cleanly is not None else {}
    read = ([own_cell] if own_cell is not None else []) + redefining
    forbidden = []
    if function and own_cell is None:
        forbidden += shortcuts.scan(solutions.get(function) or "", checks_module.SHORTCUT_NAMES)
    for cell in read:
        source = _without_statements(cell["source"], drafts[cell["index"]]) if cell["index"] in drafts else cell["source"]
        forbidden += [f for f in shortcuts.scan(source, checks_module.SHORTCUT_NAMES) if f not in forbidden]
    loose = [c["source"] for c in added if not (shortcuts.defined_names(c["source"]) & graded)]
    private = []
    for source in [c["source"] for c in read] + loose:
        private += [f for f in shortcuts.private_machinery(source) if f not in private]
    return forbidden, private


def judge(cells, by_cell, skip, calls_by_cell, solutions, checks_module, points, settings: Settings, edits=(), probes=None):
    """The score of every graded cell, decided here from the decoded outputs (with replay rounds in the sandbox
    where a check asks for them). edits: the learner's discarded edits of read-only cells (readonly_edits), which a
    failure's message explains where the failure may follow from one (explain_discarded_edits). probes: judge only
    these grade ids (a guard group's own run, see run_and_judge)."""
    from autograder.checks import builtins

    scores, hinted = [], {}
    ran_cleanly = {c["index"] for c in cells if c["index"] not in skip and by_cell.get(c["index"], {}).get("done", {}).get("ok")}
    for cell in cells:
        if cell["kind"] != "probe" or (probes is not None and cell["probe"] not in probes):
            continue
        gid = cell["probe"]
        check = checks_module.CHECKS[gid]
        max_score = points[gid]

        def failed(message, check=check, gid=gid, max_score=max_score):
            return CellScore(gid, 0.0, max_score, explain_discarded_edits(message, check, edits, cells))

        found, hidden = learner_code_findings(check.function, solutions, cells, checks_module, ran_cleanly)
        hints = []
        if builtins.enforced_at_run_time(check.forbidden, checks_module.SHORTCUT_NAMES):
            # Reading that code hides what it calls is a hint: the guard switches the built-ins off, so what is
            # really called is decided at run time (a route to one raises there and earns nothing).
            hints = [f for f in found if shortcuts.hides(f)]
            found = [f for f in found if f not in hints]
            if hints:
                hinted[gid] = (f"Note (no points lost): {check.function or 'this exercise'} {'; '.join(hints)}. What it really calls "
                               "is decided when it runs: a forbidden built-in reached that way is switched off and earns nothing.")
        if found or hidden:
            reasons = []
            if found:
                reasons.append(f"{'; '.join(found)}. This exercise asks you to write it yourself: no points for it.")
            if hidden:
                reasons.append(f"{'; '.join(hidden)}. That machinery can switch off the grader's observation of your code, "
                               "so this exercise earns no points; use public tensor operations only.")
            scores.append(CellScore(gid, 0.0, max_score, f"{check.function or 'this exercise'}: " + " ".join(reasons)))
            continue
        if cell["index"] in skip:
            scores.append(CellScore(gid, 0.0, max_score, skip[cell["index"]]))
            continue
        probe = by_cell.get(cell["index"], {}).get("probe")
        done = by_cell.get(cell["index"], {}).get("done")
        if probe is None:
            why = str((done or {}).get("error") or "the check did not run").splitlines()[-1][:300]
            own = next((c for c in cells if c["origin"] == f"your cell {check.function!r}"), None)
            own_error = by_cell.get(own["index"], {}).get("done", {}).get("error") if own else None
            if own is not None and own["index"] in skip:
                why += f" ({skip[own['index']]})"
            elif own_error:
                why += f" (your cell {check.function!r} stopped with {str(own_error).splitlines()[-1][:300]})"
            scores.append(failed(f"{check.function} could not be checked: {why}"))
            continue
        records = probe.get("calls")
        calls = calls_by_cell[cell["index"]]
        if not isinstance(records, list) or len(records) != len(calls):
            scores.append(failed(f"{check.function}: the check's report is incomplete."))
            continue

        records = [explain_unassigned(call, record, cells, by_cell, skip) for call, record in zip(calls, records)]

        def rerun(indices, tables, cell=cell):
            return replay_in_sandbox(cells, cell, indices, tables, checks_module, settings, skip)

        try:
            judge_with_replays(check, calls, records, rerun, function=check.function)
        except PartialCredit as part:  # the judge's own scale (e.g. the capstone's accuracy), before any failure
            earned = round(max_score * part.fraction, 2)
            scores.append(CellScore(gid, earned, max_score, explain_discarded_edits(str(part)[:2000], check, edits, cells)))
            continue
        except AssertionError as failure:
            scores.append(failed(str(failure)[:2000]))
            continue
        except Exception as exc:  # a report the judge cannot use counts as a failed check, never as a pass
            scores.append(failed(f"{check.function}: its results could not be judged ({type(exc).__name__}: {str(exc)[:200]})"))
            continue
        scores.append(CellScore(gid, max_score, max_score, ""))
    return [dataclasses.replace(s, message="\n".join(filter(None, (s.message, hinted[s.grade_id])))) if s.grade_id in hinted else s
            for s in scores]


def explain_unassigned(call, record, cells, by_cell, skip):
    """A typed answer's record (a variable read, call.variable) that found the variable undefined, explained by the
    learner's cell that assigns it and stopped before it did: that cell's error, in place of "not defined: assign
    it" said to a learner who did assign it. Any other record is returned as it is."""
    name = getattr(call, "variable", None)
    if not name or not isinstance(record, dict) or record.get("ok") or "is not defined" not in str(record.get("error") or ""):
        return record
    for cell in cells:
        if not cell.get("learner") or name not in shortcuts.defined_names(cell["source"]):
            continue
        if cell["index"] in skip:
            why = skip[cell["index"]]
        else:
            why = str(by_cell.get(cell["index"], {}).get("done", {}).get("error") or "").strip()
            why = f"stopped with {why.splitlines()[-1][:300]}" if why else ""
        if why:
            return dict(record, error=f"NameError: {cell['origin']} assigns it but {why}, so `{name}` was never assigned")
    return record


def explain_discarded_edits(message: str, check, edits, cells) -> str:
    """A failed check's message, when the learner edited read-only cells (whose edits the grader does not run).

    Read statically (shortcuts): the names the exercise's code relies on (its solution cell, its callees' solution
    cells, the cells the learner added that define a name they read), the names a NameError in the message names,
    and the exercise's function itself. Where an edit defines, imports or changes one of them, the failure is
    explained as following from the discarded edit (in place of the generic "not defined" hint); otherwise a note
    says the edits were not run, in case the exercise relied on them in a way the static reading cannot see (edits
    that define nothing, of cells the grader does not run as code, such as check cells, get no note here)."""
    if not edits:
        return message
    function = check.function
    own = {f"your cell {name!r}" for name in (function, *check.callees) if name}
    read = set()
    for cell in cells:
        if cell.get("learner") and cell["origin"] in own:
            read |= shortcuts.read_names(cell["source"])
    for cell in cells:
        if cell.get("learner") and not cell["origin"].startswith("your cell ") and shortcuts.defined_names(cell["source"]) & read:
            read |= shortcuts.read_names(cell["source"])
    wanted = read | set(re.findall(r"name '(\w+)' is not defined", message)) | ({function} if function else set())
    linked = [(edit, sorted(edit["names"] & wanted)) for edit in edits if edit["names"] & wanted]
    if not linked:
        relevant = [edit for edit in edits if edit["names"] or edit["runs"]]  # an edit of a check cell alone serves no answer
        if not relevant:
            return message
        which = ", ".join(repr(edit["cell"]) for edit in relevant)
        return (f"{message}\nNote: the grader did not run your edit of the read-only cell(s) {which} (it runs the course's "
                "version of read-only cells); if this exercise relied on that edit, move its code into your own answer cell.")
    parts = []
    for edit, names in linked:
        new = [f"`{n}`" for n in names if n in edit["new"]]
        changed = [f"`{n}`" for n in names if n not in edit["new"]]
        if new:
            parts.append(f"{', '.join(new)}, which only your edit of {edit['cell']!r} defines or imports")
        if changed:
            parts.append(f"{', '.join(changed)} as your edit of {edit['cell']!r} changed it (the course's version ran)")
    which = ", ".join(repr(edit["cell"]) for edit, _ in linked)
    hint = (f"Likely mistake: the grader did not run your edit of the read-only cell {which} (it runs the course's version "
            f"of read-only cells, as nbgrader does), and your code relies on {'; and on '.join(parts)}. Define or import "
            "what your code needs in your own answer cell instead.")
    generic = {f"Likely mistake: {hints['is not defined']}" for hints in (GRADED_ERRORS, visible.COMMON_ERRORS)}
    lines = [line for line in message.splitlines() if line not in generic]
    return "\n".join(lines[:1] + [hint] + lines[1:])


def released_notebook(workdir: Path, chapter: str):
    return nbformat.read(Path(workdir) / "release" / chapter / f"{registry.NOTEBOOK}.ipynb", as_version=4)


def cell_points(workdir: Path, chapter: str) -> dict:
    """Points of each graded cell, from the instructor notebook nbgrader generated (the gradebook's source)."""
    nb = nbformat.read(Path(workdir) / "source" / chapter / f"{registry.NOTEBOOK}.ipynb", as_version=4)
    return {_nbgrader(c)["grade_id"]: float(_nbgrader(c)["points"]) for c in nb.cells if _nbgrader(c).get("grade")}


def inputs_seed(run_seed: int, student: str, chapter: str, cells) -> int:
    """The seed of one notebook's hidden inputs: drawn from the run's seed (kept in the working directory, never
    shown to learners), the student, the chapter and the code that runs. The same notebook gets the same inputs on
    every rerun (its grade is reproducible); another student's, or this student's next version, gets other inputs,
    so inputs printed into one feedback (and answers computed for them elsewhere) are worth nothing anywhere else."""
    code = hashlib.sha256(json.dumps([c["source"] for c in cells]).encode()).hexdigest()
    key = str(run_seed).encode()
    digest = hmac.new(key, json.dumps([student, chapter, code]).encode(), hashlib.sha256).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def prepare_judge():
    """Import now what some judges import on their first call: torch.optim's first optimizer imports torch._dynamo
    (and sympy with it), about 2 s, and chapter 08's train_step and the capstone's training build one. A grading
    worker, which grades many notebooks, does it while the run is prepared instead of in a notebook's grading time.
    (The meta pass does not: the judge takes a meta call's expected shapes from the CPU, judge.shapes_from.) The
    grading process's single notebook (an --only rerun) makes it only for a chapter that needs it, while the sandbox
    runs (import_for_the_judge_beside)."""
    import torch._dynamo  # noqa: F401


def import_for_the_judge_beside(calls_by_cell):
    """Where the judge will run a training step (a call that updates its model: chapter 08's train_step), make
    prepare_judge's import in a background thread while the sandbox runs the notebook, in which time this process
    only waits: the grading process's single notebook (an --only rerun) has not made it (a worker has). Not for other
    chapters: there the import would only compete with the judge for the interpreter."""
    if "torch._dynamo" in sys.modules:
        return
    if any(call.updates_model() for calls in calls_by_cell.values() for call in calls):
        threading.Thread(target=prepare_judge, name="course-judge-imports", daemon=True).start()


def grade_submission(student: str, chapter: str, notebook: Path, settings: Settings) -> Result:
    """Grade one notebook; write its autograded copy and feedback. Never raises for a bad submission."""
    start = time.perf_counter()
    workdir = Path(settings.workdir)
    checks_module = importlib.import_module(f"autograder.checks.{registry.module_name(chapter)}")
    points = cell_points(workdir, chapter)
    result = Result(student, chapter, "graded", max_score=sum(points.values()), seed=settings.seed, device=settings.device, sandbox=settings.sandbox_mode)
    try:
        submitted, raw, read_notes = read_submission(Path(notebook))
    except (ValueError, OSError) as exc:
        result.status, result.error = "invalid", str(exc)
        result.cells = [CellScore(gid, 0.0, p, "not graded: " + str(exc)) for gid, p in points.items()]
        write_feedback(workdir, result, [], {}, {})
        result.seconds = time.perf_counter() - start
        return result
    result.sha256 = hashlib.sha256(raw).hexdigest()
    released = released_notebook(workdir, chapter)
    cells, notes, solutions = plan_cells(released, submitted, checks_module)
    edits = readonly_edits(released, submitted)
    settings = dataclasses.replace(settings, seed=inputs_seed(settings.seed, student, chapter, cells))
    result.cells, by_cell, skip, run_notes, result.start = run_and_judge(cells, checks_module, solutions, points, settings, edits)
    result.notes = (read_notes + notes + readonly_edit_notes(edits) + run_notes
                    + [reason for i, reason in sorted(skip.items()) if not reason.startswith("not run")][:5])
    result.score = sum(c.score for c in result.cells)
    write_autograded(workdir, result, released, submitted, cells, by_cell)
    write_feedback(workdir, result, cells, by_cell, skip)
    result.seconds = time.perf_counter() - start
    return result


def write_autograded(workdir: Path, result: Result, released, submitted, cells, by_cell):
    """autograded/<student>/<chapter>/exercises.ipynb: the course's notebook with the learner's code and,
    in each graded cell, the grader's verdict (what nbgrader's formgrader shows)."""
    nb = nbformat.from_dict(json.loads(json.dumps(released)))
    learner = {}
    for cell in submitted["cells"]:
        gid = _nbgrader(cell).get("grade_id")
        if isinstance(gid, str) and gid not in learner:
            learner[gid] = _source(cell)
    verdicts = {c.grade_id: c for c in result.cells}
    for cell in nb.cells:
        meta = _nbgrader(cell)
        gid = meta.get("grade_id")
        if meta.get("solution") and gid in learner:
            cell.source = learner[gid]
        if gid in verdicts:
            v = verdicts[gid]
            cell.source = f"# Graded by the course's hidden check ({v.max_score:g} points)."
            text = f"{v.score:g}/{v.max_score:g} points" + (f"\n{v.message}" if v.message else "")
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    path = workdir / "autograded" / result.student / result.chapter / f"{registry.NOTEBOOK}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, nbformat.writes(nb))



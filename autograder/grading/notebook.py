"""Grade one submission: read it defensively, run it in the sandbox, judge it here, write its feedback.

The notebook that runs is rebuilt from the course's own released notebook (trusted): the learner's code
comes only from the solution cells (matched by nbgrader grade id) and from cells the learner added; every
check cell is the course's. So deleted, edited, duplicated or renamed check cells change nothing. Each
graded cell becomes a "probe" in the sandbox, which only calls the learner's function on the grader's
inputs; the comparison with `solutions/` happens here, in `judge`, on the decoded outputs.

`grade_submission` never raises for anything a submission does: every problem becomes a status and a
message in its result.
"""

import hashlib
import importlib
import json
import shutil
import tempfile
import time
from pathlib import Path

import nbformat
import numpy as np

from autograder import registry
from autograder.grading import sandbox, shortcuts
from autograder.reporting.feedback import write_feedback
from autograder.results import CellScore, Result, Settings, atomic_write
from autograder.checks import encode_calls, judge_with_replays, runner

MAX_NOTEBOOK_BYTES = 20 * 2**20  # the notebook as graded: its code (outputs are not graded and are removed first)
MAX_FILE_BYTES = 256 * 2**20  # a file larger than this is not even read (outputs or not)
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


def read_submission(path: Path):
    """(notebook dict, raw bytes, notes) or raise ValueError with a message for the instructor and the learner.

    Only code is graded, so a notebook too large only because of its outputs is graded without them (with a note),
    and an nbformat 3 notebook is converted to version 4 (with a note)."""
    if path.is_symlink():
        raise ValueError("the notebook is a symbolic link, not a file; submit the notebook itself")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ValueError(f"the notebook is {size / 2**20:.0f} MiB, more than the {MAX_FILE_BYTES // 2**20} MiB a file may have "
                         "(clear the outputs and resubmit)")
    raw = path.read_bytes()
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"the file is not a valid notebook (not JSON: {str(exc)[:120]})") from None
    notes = []
    if isinstance(data, dict) and data.get("nbformat") == 3 and isinstance(data.get("worksheets"), list):
        try:
            data = json.loads(nbformat.writes(nbformat.reads(raw.decode("utf-8"), as_version=4)))
        except Exception as exc:
            raise ValueError(f"the notebook has nbformat 3 and could not be converted to version 4 ({str(exc)[:120]})") from None
        notes.append("the notebook was in nbformat 3 (an old Jupyter format): it was converted to version 4 and graded")
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise ValueError("the file is JSON but not a notebook (no list of cells)")
    if data.get("nbformat") != 4:
        raise ValueError(f"the notebook has nbformat {data.get('nbformat')!r}; only version 4 (Jupyter's current format) is accepted")
    if size > MAX_NOTEBOOK_BYTES:
        code_only = strip_outputs(data)
        code_size = len(json.dumps(code_only).encode("utf-8"))
        if code_size > MAX_NOTEBOOK_BYTES:
            raise ValueError(f"the notebook's code alone is {code_size / 2**20:.0f} MiB, more than the "
                             f"{MAX_NOTEBOOK_BYTES // 2**20} MiB allowed")
        notes.append(f"the notebook was {size / 2**20:.0f} MiB with its outputs, more than the {MAX_NOTEBOOK_BYTES // 2**20} MiB "
                     "allowed: its outputs were removed (only code is graded) and it was graded")
        data = code_only
    return data, raw, notes


def strip_outputs(data: dict) -> dict:
    """The notebook without outputs, execution counts or attachments: what is graded of it."""
    out = dict(data)
    out["cells"] = []
    for cell in data.get("cells", []):
        if isinstance(cell, dict):
            cell = {k: v for k, v in cell.items() if k != "attachments"}
            if cell.get("cell_type") == "code":
                cell["outputs"], cell["execution_count"] = [], None
        out["cells"].append(cell)
    return out


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


def write_job(job_dir: Path, cells, checks_module, settings: Settings, skip: dict, replay=None):
    """job.json + inputs.npz + runner.py, readable (not writable) by the sandbox's user.
    replay: {probe cell index: {call index: callee table}} for a replay round: only those calls of those
    probes are made (each with its table, see autograder.checks.judge_with_replays); other probes are left out.
    Each probe carries its check's forbidden names (what the observers note) and what the sandbox's guard switches
    off for it: their families, expanded here (the runner imports nothing of the course)."""
    from autograder.checks import builtins

    probes, arrays, calls_by_cell = {}, {}, {}
    for cell in cells:
        if cell["kind"] != "probe" or (replay is not None and cell["index"] not in replay):
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
    (job_dir / "job.json").write_text(json.dumps({"cells": run_cells, "probes": probes}), encoding="utf-8")
    np.savez(job_dir / "inputs.npz", **arrays)
    shutil.copy(Path(runner.__file__), job_dir / "runner.py")
    for path in [job_dir, *job_dir.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return calls_by_cell


def run_with_restarts(cells, checks_module, settings: Settings):
    """Run the job; a cell that hangs, kills the process or floods the output is skipped and the run
    repeated (the rest of the notebook still gets graded). Returns (records by cell, skip reasons, calls,
    notes on the run: processes the kernel stopped when the notebook's memory group was full)."""
    skip, notes = {}, []
    for attempt in range(RESTARTS + 1):
        with tempfile.TemporaryDirectory(prefix="course-job-") as tmp:
            job_dir = Path(tmp)
            calls_by_cell = write_job(job_dir, cells, checks_module, settings, skip)
            outcome = sandbox.run(job_dir, settings.sandbox_mode, settings.limits)
        if outcome.oom_kills and outcome.status == "finished":
            notes.append(f"the notebook's processes together went over their memory limit "
                         f"({settings.limits.group_memory_bytes / 2**30:g} GiB): the kernel stopped {outcome.oom_kills} of them")
        by_cell = {}
        for record in outcome.records:
            if record.get("event") in ("done", "probe") and isinstance(record.get("cell"), int):
                by_cell.setdefault(record["cell"], {})[record["event"]] = record
        if outcome.status == "finished":
            return by_cell, skip, calls_by_cell, notes
        culprit = outcome.cell if outcome.cell is not None else (max(by_cell) + 1 if by_cell else 0)
        if culprit in skip or culprit >= len(cells) or attempt == RESTARTS:
            for cell in cells[culprit:]:
                skip.setdefault(cell["index"], f"not run: the notebook stopped earlier ({outcome.detail})")
            return by_cell, skip, calls_by_cell, notes
        skip[culprit] = f"{cells[culprit]['origin']} was stopped: {outcome.detail}"
    raise AssertionError("unreachable")


def replay_in_sandbox(cells, cell, indices, tables, checks_module, settings: Settings, skip: dict):
    """A replay round (autograder.checks.judge_with_replays): the notebook run again in a fresh sandbox, with only
    these calls of this probe, each with its callee answering from its table; returns their new records (a call
    the round could not make is a failed record saying why)."""
    replay = {cell["index"]: dict(zip(indices, tables))}
    with tempfile.TemporaryDirectory(prefix="course-replay-") as tmp:
        job_dir = Path(tmp)
        write_job(job_dir, cells, checks_module, settings, skip, replay=replay)
        outcome = sandbox.run(job_dir, settings.sandbox_mode, settings.limits)
    probe = next((r for r in outcome.records if r.get("event") == "probe" and r.get("cell") == cell["index"]), None)
    records = probe.get("calls") if isinstance(probe, dict) else None
    if not isinstance(records, list) or len(records) != len(indices):
        why = f"the second run stopped early ({outcome.detail or outcome.status})"
        return [{"ok": False, "error": f"RuntimeError: {why}", "outputs": None, "forbidden": []} for _ in indices]
    return records


def learner_code_findings(function, solutions, cells, checks_module):
    """What the static reading finds in the learner's code that serves this exercise:
    (forbidden built-ins, private torch machinery). Read: the exercise's solution cell and every added cell
    that (re)defines the function; for private machinery also every added cell that defines no graded
    function (such code acts on the whole run)."""
    graded = {name for name in solutions}
    own = [solutions.get(function) or ""] if function else []
    added = [c["source"] for c in cells if c.get("learner") and not c["origin"].startswith("your cell ")]
    redefining = [src for src in added if function and function in shortcuts.defined_names(src)]
    forbidden = []
    for source in own + redefining:
        forbidden += [f for f in shortcuts.scan(source, checks_module.SHORTCUT_NAMES) if f not in forbidden]
    loose = [src for src in added if not (shortcuts.defined_names(src) & graded)]
    private = []
    for source in own + redefining + loose:
        private += [f for f in shortcuts.private_machinery(source) if f not in private]
    return forbidden, private


def judge(cells, by_cell, skip, calls_by_cell, solutions, checks_module, points, settings: Settings):
    """The score of every graded cell, decided here from the decoded outputs (with replay rounds in the sandbox
    where a check asks for them)."""
    scores = []
    for cell in cells:
        if cell["kind"] != "probe":
            continue
        gid = cell["probe"]
        check = checks_module.CHECKS[gid]
        max_score = points[gid]
        found, hidden = learner_code_findings(check.function, solutions, cells, checks_module)
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
            scores.append(CellScore(gid, 0.0, max_score, f"{check.function} could not be checked: {why}"))
            continue
        records = probe.get("calls")
        calls = calls_by_cell[cell["index"]]
        if not isinstance(records, list) or len(records) != len(calls):
            scores.append(CellScore(gid, 0.0, max_score, f"{check.function}: the check's report is incomplete."))
            continue

        def rerun(indices, tables, cell=cell):
            return replay_in_sandbox(cells, cell, indices, tables, checks_module, settings, skip)

        try:
            judge_with_replays(check, calls, records, rerun, function=check.function)
        except AssertionError as failure:
            scores.append(CellScore(gid, 0.0, max_score, str(failure)[:2000]))
            continue
        except Exception as exc:  # a report the judge cannot use counts as a failed check, never as a pass
            scores.append(CellScore(gid, 0.0, max_score, f"{check.function}: its results could not be judged ({type(exc).__name__}: {str(exc)[:200]})"))
            continue
        scores.append(CellScore(gid, max_score, max_score, ""))
    return scores


def released_notebook(workdir: Path, chapter: str):
    return nbformat.read(Path(workdir) / "release" / chapter / f"{registry.NOTEBOOK}.ipynb", as_version=4)


def cell_points(workdir: Path, chapter: str) -> dict:
    """Points of each graded cell, from the instructor notebook nbgrader generated (the gradebook's source)."""
    nb = nbformat.read(Path(workdir) / "source" / chapter / f"{registry.NOTEBOOK}.ipynb", as_version=4)
    return {_nbgrader(c)["grade_id"]: float(_nbgrader(c)["points"]) for c in nb.cells if _nbgrader(c).get("grade")}


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
    by_cell, skip, calls_by_cell, run_notes = run_with_restarts(cells, checks_module, settings)
    result.notes = read_notes + notes + run_notes + [reason for i, reason in sorted(skip.items()) if not reason.startswith("not run")][:5]
    result.cells = judge(cells, by_cell, skip, calls_by_cell, solutions, checks_module, points, settings)
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



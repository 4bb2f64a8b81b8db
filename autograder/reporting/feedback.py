"""The learner's feedback page, feedback/<student>/<chapter>/exercises.html: rendered here and nowhere else.

`write_feedback` writes it when a notebook is graded (the learner's code, outputs and each check's verdict);
`refresh_feedback` rewrites its score parts when the reports know more (manual grades, late penalty, comments).
"""

import html
import re
from pathlib import Path

from autograder import registry
from autograder.results import CellScore, Result, atomic_write


FEEDBACK_CSS = """body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}
pre{background:#f6f8fa;padding:.6rem;overflow-x:auto;white-space:pre-wrap}.pass{color:#1a7f37}.fail{color:#cf222e}
.cell{border-left:4px solid #ddd;padding-left:.8rem;margin:1.2rem 0}.note{background:#fff8c5;padding:.5rem}"""


def write_feedback(workdir: Path, result: Result, cells, by_cell, skip):
    """feedback/<student>/<chapter>/exercises.html: the learner's code, outputs and each check's verdict.
    The hidden checks' code, inputs and expected values are not in it (they never were in the notebook)."""
    e = html.escape
    parts = [f"<!doctype html><meta charset='utf-8'><title>Feedback: {e(result.chapter)}</title><style>{FEEDBACK_CSS}</style>",
             f"<h1>Feedback: {e(result.chapter)}</h1>",
             f"<!--summary-->{feedback_summary(result)}<!--/summary-->"]
    verdicts = {c.grade_id: c for c in result.cells}
    for cell in cells:
        done = by_cell.get(cell["index"], {}).get("done", {})
        if cell["kind"] == "probe":
            v = verdicts[cell["probe"]]
            parts.append(f"<div class='cell'><!--check:{_marker(v.grade_id)}-->{feedback_check(v)}<!--/check--></div>")
            continue
        if cell["origin"].startswith("the course's"):
            continue
        parts.append(f"<div class='cell'><h4>{e(cell['origin'])}</h4><pre>{e(cell['source'])}</pre>")
        if cell["index"] in skip:
            parts.append(f"<p class='fail'>{e(skip[cell['index']])}</p>")
        for stream in ("stdout", "stderr"):
            if done.get(stream):
                parts.append(f"<pre>{e(str(done[stream]))}</pre>")
        if done.get("error"):
            parts.append(f"<pre class='fail'>{e(str(done['error']))}</pre>")
        parts.append("</div>")
    path = workdir / "feedback" / result.student / result.chapter / f"{registry.NOTEBOOK}.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, "\n".join(parts) + "\n")


def _marker(grade_id: str) -> str:
    return html.escape(grade_id).replace("-", "&#45;")  # grade ids are the course's; never "--" inside a comment


def feedback_summary(result: Result, final: dict | None = None) -> str:
    """The feedback's header: student, score, and the notes. `final` (from the reports, after formgrader
    and due dates): score, raw_score, penalty, late, submitted, due, manual (grade ids), comments, notes."""
    e = html.escape
    final = final or {}
    score = final.get("score", result.score)
    parts = [f"<p>Student: <b>{e(result.student)}</b>. Score: <b>{score:g} / {result.max_score:g}</b>.</p>"]
    if final.get("manual"):
        parts.append(f"<p class='note'>Your instructor graded {len(final['manual'])} check(s) by hand "
                     f"({e(', '.join(final['manual']))}); their score replaces the automatic one.</p>")
    if final.get("submitted"):
        when = f"Submitted {e(final['submitted'])}"
        if final.get("due"):
            when += f"; due {e(final['due'])}"
        if final.get("late"):
            when += f": <b>late by {e(final['late'])}</b>"
            if final.get("penalty"):
                when += f", late penalty {final['penalty']:g} (score before it: {final.get('raw_score', result.score):g})"
        parts.append(f"<p>{when}.</p>")
    if result.error:
        parts.append(f"<p class='note'>This notebook could not be graded: {e(result.error)}</p>")
    for note in list(final.get("notes", [])) + list(result.notes):
        first, _, rest = str(note).partition("\n")  # a note's further lines (a diff) keep their layout
        parts.append(f"<p class='note'>{e(first)}</p>" + (f"<pre>{e(rest)}</pre>" if rest else ""))
    for cell, comment in final.get("comments", []):
        parts.append(f"<p class='note'>Comment from your instructor on {e(cell)}:</p><pre>{e(comment)}</pre>")
    return "\n".join(parts)


def feedback_check(v: CellScore, manual: float | None = None) -> str:
    """One check's verdict; with `manual`, the score the instructor gave in its place."""
    e = html.escape
    score = v.score if manual is None else manual
    cls = "pass" if score >= v.max_score else "fail"
    text = f"<h3 class='{cls}'>Check {e(v.grade_id)}: {score:g} / {v.max_score:g}</h3>"
    if manual is not None:
        text += f"<p class='note'>Graded by your instructor (the automatic check gave {v.score:g}).</p>"
    if v.message:
        text += f"<pre>{e(v.message)}</pre>"
    return text


def refresh_feedback(workdir: Path, result: Result, final: dict, manual: dict) -> bool:
    """Rewrite the score parts of an existing feedback file with the final numbers (manual grades, late
    penalty, notes); the learner's code and outputs stay as the grading run wrote them. True if changed."""
    path = Path(workdir) / "feedback" / result.student / result.chapter / f"{registry.NOTEBOOK}.html"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return False
    new = re.sub(r"<!--summary-->.*?<!--/summary-->", lambda m: f"<!--summary-->{feedback_summary(result, final)}<!--/summary-->", text, count=1, flags=re.S)
    for v in result.cells:
        marker = _marker(v.grade_id)
        new = re.sub(rf"<!--check:{re.escape(marker)}-->.*?<!--/check-->",
                     lambda m, v=v, marker=marker: f"<!--check:{marker}-->{feedback_check(v, manual.get(v.grade_id))}<!--/check-->",
                     new, count=1, flags=re.S)
    if new == text:
        return False
    atomic_write(path, new)
    return True

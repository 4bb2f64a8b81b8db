"""The course's exercise tooling: authoring, the check library, grading and reporting (`python -m autograder`).

The package, in rooms (an arrow only points down or sideways to a room below; no cycles):

    __main__.py      the CLI: build, grade, report
    registry.py      the chapters and where each of their pieces lives (ids, titles, sources, test data)
    results.py       Result, CellScore, Skipped, Settings and the one atomic write: no torch, imported by all
    config.py        the course configuration (course.toml) and nbgrader's settings
    checks/          the check library and each chapter's hidden checks:
                       cases.py (what a check calls), wire.py (sandbox <-> judge), judge.py, kinds.py (function,
                       module, typed answer), builtins.py (the forbidden built-ins, by group), runner.py (the
                       sandbox end: runs the calls, switches the built-ins off), visible.py (the visible-check
                       helpers copied into every notebook), chNN_*.py (a chapter's CHECKS and mistakes)
    authoring/       build.py (instructor source -> notebooks), kit.py (build-time helpers for any chapter's
                     visible checks), answers.py (the types of a chapter's test data), demo.py, book.py
    grading/         grade.py (the pipeline: discover -> run in the sandbox -> judge outside -> record),
                     intake.py, cluster.py (Dask), notebook.py (one notebook), sandbox.py, warm.py + template.py (the
                     warm start: a template per worker, forked per notebook), shortcuts.py
    reporting/       reports.py (CSV, summary, table), feedback.py (the learner's HTML), gradebook.py,
                     latepenalty.py

A chapter's exercises: autograder/source/<id>/ (exercises.md, the instructor source; answers.py, its test data),
autograder/checks/chNN_*.py (hidden checks and mistake catalogue), solutions/chNN_*.py (the reference).
"""

import sys

# nbformat validates notebooks with jsonschema, which imports rfc3987_syntax where it is installed (jupyter's
# event schemas pull it in) to offer an "iri" format check that no notebook schema uses; that import compiles
# a grammar, about 1.5 s in every process that imports nbformat (each grading command, each of its workers).
# Marked absent, jsonschema leaves that one format unchecked and validates everything else as before.
sys.modules.setdefault("rfc3987_syntax", None)


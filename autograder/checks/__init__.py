"""The check library: hidden grading checks, split so that nothing in the learner's kernel decides a score.

A check (kinds.Check) grades one graded notebook cell, in two halves:
- plan(seed, device) -> [Call], run in the SANDBOX: the calls of the learner's function (or nn.Module class) on
  inputs drawn at grading time (several shapes, float32 and float64, the grading device, and once on 'meta').
  The grader ships them in (wire.encode_calls), and `runner` makes each call and reports the raw outputs.
- judge(calls, records), run OUTSIDE the sandbox, in the grading process: it decodes the reports (wire.decode_value:
  plain .npy arrays, never pickle), computes the reference from solutions/ on the same inputs, compares, and
  raises AssertionError with a diagnosis (a named mistake where the catalogue knows it) on the first disagreement.

The parts, each importing only those above it (cases <- wire <- judge <- kinds):
    cases.py    what a check calls: Case, ModuleCase, Call, Seeded, Dev, Fn, Model, TOLERANCES and DTYPES, the grading
                seed and device, generator(seed, salt), grader_weights, hidden-input helpers (large_score_inputs)
    wire.py     the format between sandbox and judge: encode_calls, decode_value, Returned, ReportedDevice,
                Unreadable, describe
    judge.py    judging: judge_calls, outcome, explain_error, diagnose*, same_value, the callees' faults,
                composition and replay tables, judge_with_replays (NeedsReplay, MAX_REPLAYS), gradients
    kinds.py    the kinds of check: Check, function_check, module_check, typed_answer_check, reference_plan;
                run_local and run_check (plan, call and judge in this process), chapter_checks, trains_a_model
    runner.py   the sandbox's end (standalone: copied into each job): runs the calls, switches built-ins off
    visible.py  the visible-check helpers copied into every notebook
A chapter's check module (chNN_*.py) defines CHECKS, one Check per graded cell keyed by its grade id, built with
these kinds from solutions/chNN_*.py and its mistake catalogue.

Seed and device. The grading CLI (`python -m autograder grade`, autograder/grading/) does not go through the
environment: it passes its seed and device (--seed, else the working directory's or a fresh one; --device) to
check.plan directly. The environment is read only by run_local/run_check when they are given no seed or device,
i.e. when a notebook's hidden-tests cell runs in the learner's kernel under plain `nbgrader autograde`, and in
the tests:
- COURSE_GRADING_SEED: integer seed for the inputs (default 0); tests/conftest.py's grading_env pins 7,
  scripts/bench_grading.py sets 0 for its plain-nbgrader timing;
- COURSE_DEVICE: "cpu", "cuda", ... (default: cuda when available, else cpu).

What is imported here is the library's public surface (chapter modules, autograder.grading, tests and scripts
import from `autograder.checks`); private helpers stay in their part.
"""

from autograder.checks import runner, visible
from autograder.checks.cases import (
    ALLOWED_DTYPES, DTYPES, TOLERANCES, Call, Case, Dev, Fn, Model, ModuleCase, Optim, Seeded, case_salt, generator, grader_weights, grading_device,
    grading_seed, large_score_inputs,
)
from autograder.checks.wire import ReportedDevice, Returned, Unreadable, decode_value, describe, encode_calls, to_tensors
from autograder.checks.judge import (
    MAX_REPLAYS, CalleeFault, NeedsReplay, PartialCredit, call_float_rel, callee_blame, callee_faults, compose, composed, diagnose,
    diagnose_shapes, expected_gradients, explain_error, judge_calls, judge_with_replays, lost_precision, outcome,
    replay_round, replay_table, same_value,
)
from autograder.checks.kinds import (
    Check, build_reference_module, chapter_checks, trains_a_model, function_check, in_order, module_check, reference_judge, reference_plan,
    run_check, run_local, typed_answer_check,
)

__all__ = [
    "runner", "visible",
    # cases
    "ALLOWED_DTYPES", "DTYPES", "TOLERANCES", "Call", "Case", "Dev", "Fn", "Model", "ModuleCase", "Optim", "Seeded", "case_salt", "generator", "grader_weights",
    "grading_device", "grading_seed", "large_score_inputs",
    # wire
    "ReportedDevice", "Returned", "Unreadable", "decode_value", "describe", "encode_calls", "to_tensors",
    # judge
    "MAX_REPLAYS", "PartialCredit", "CalleeFault", "NeedsReplay", "call_float_rel", "callee_blame", "callee_faults", "compose", "composed",
    "diagnose", "diagnose_shapes", "expected_gradients", "explain_error", "judge_calls", "judge_with_replays", "lost_precision",
    "outcome", "replay_round", "replay_table", "same_value",
    # kinds
    "Check", "build_reference_module", "chapter_checks", "trains_a_model", "function_check", "in_order", "module_check", "reference_judge",
    "reference_plan", "run_check", "run_local", "typed_answer_check",
]

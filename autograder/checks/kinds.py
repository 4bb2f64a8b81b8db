"""The kinds of hidden check, and running one in this process.

A Check pairs a plan (which calls, made in the sandbox) with a judge (run outside it). function_check builds one
for a graded function, module_check for a graded nn.Module class (the grader draws the weights), typed_answer_check
for numbers a learner typed; reference_plan is the plan they share. run_local plans, calls and judges in this
process; run_check(chapter, grade id, namespace) is what every notebook's hidden-tests cell runs.
"""

import importlib
import sys
from dataclasses import dataclass, field
from typing import Callable

import torch

from autograder import registry
from autograder.checks import runner
from autograder.checks.cases import DTYPES, Call, Case, Model, case_salt, generator, grader_weights, grading_device, grading_seed
from autograder.checks.judge import judge_calls, judge_with_replays
from autograder.checks.wire import Returned, Unreadable, decode_value, encode_calls


@dataclass
class Check:
    """The hidden check of one graded cell: which function, how to call it, how to judge the results.

    callees: other graded functions of the notebook that `function` calls. While it is checked, the runner
    records what the learner's callees were given and returned; when the output differs from the reference,
    the judge compares it with the reference composed with those recorded results (see `composed`), so a
    mistake in a callee costs points only in the callee's own exercise. Nothing of the reference enters the
    sandbox: the composition happens here, and the recorded inputs must equal the reference's own.
    categories: what the hidden check grades (values, shape, dtype, device, large, generator, gradient,
    weights, typed); the learner-trial tests require a visible check for each."""

    function: str | None
    plan: Callable  # (seed, device) -> [Call]
    judge: Callable  # (calls, records) -> None, raises AssertionError
    forbidden: dict = field(default_factory=dict)  # torch function name -> how the learner would write it
    callees: tuple = ()
    categories: tuple = ("values", "shape", "dtype", "device")
    reference_call: Callable | None = None  # (call, inputs=None) -> the reference's outputs (trusted, in-process)
    # The catalogue the check was built with ({description: wrong function or class}), kept for the test that
    # every catalogued mistake is told apart from every other on the cases where it is named
    # (tests/test_mistake_catalogues.py); the judge has its own copy.
    mistakes: dict = field(default_factory=dict)
    shape_mistakes: dict = field(default_factory=dict)
    gradient_mistakes: dict = field(default_factory=dict)
    # Functions the check's calls pass by name (Fn) that the notebook defines in a read-only cell: in the sandbox they
    # come from the notebook; run in this process on a namespace without them (a test), these are used.
    given: dict = field(default_factory=dict)
    # A check that trains a model (seconds, where the others take milliseconds): the chapter contract runs it on one
    # seed, and for a catalogued wrong answer only where the answer says it loses it (tests/chapter_contract.py).
    # Grading runs it like any other check.
    costly: bool = False


# --- Plans: which calls a hidden check makes ------------------------------------------------------


def reference_plan(cases_fn, meta=True, dtypes=DTYPES):
    """A plan: every case in each of `dtypes` on the grading device, then each case once on 'meta' (meta=False:
    no meta pass, for functions of plain values). dtypes=None: each case once as it is, for inputs with no
    float dtype to vary (e.g. a mask builder's sizes). Cases with grad_wrt get a gradient probe (in float64
    only, not on meta); cases that must raise are called once, on the grading device, after all the others."""

    def plan(seed, device):
        cases = cases_fn(seed)
        calls = []
        raising = []  # called last: invalid inputs are judged after the valid ones
        for i, c in enumerate(cases):
            if c.raises is not None:
                dtype = None if dtypes is None else dtypes[0]
                moved = c if dtypes is None else c.to(dtype)
                raising.append(Call(f"{c.label}, device {device}", moved.args, moved.kwargs, device, dtype, raises=c.raises, why=c.why))
                continue
            if dtypes is None:
                calls.append(Call(f"{c.label}, device {device}", c.args, c.kwargs, device, None,
                                  grad_wrt=c.grad_wrt, grad_seed=seed * 100 + i))
                continue
            probed = torch.float64 if torch.float64 in dtypes else dtypes[-1]  # gradients: in float64 (see Case)
            for d in dtypes:
                moved = c.to(d)
                calls.append(Call(f"{c.label}, {str(d).replace('torch.', '')}, device {device}", moved.args, moved.kwargs, device, d,
                                  grad_wrt=c.grad_wrt if d == probed else (), grad_seed=seed * 100 + i))
        if meta:
            for c in (c for c in cases if c.raises is None):
                m = c if dtypes is None else c.to(torch.float32)
                calls.append(Call(f"{c.label}, on device 'meta'", m.args, m.kwargs, "meta", None if dtypes is None else torch.float32))
        return calls + raising

    return plan


def function_check(reference, cases_fn, names, mistakes=None, error_hints=None, forbidden=None, callees=(), meta=True,
                   categories=None, function=None, *, dtypes=DTYPES, keyed=False, shape_mistakes=None, gradient_mistakes=None,
                   extra=None, builds=()):
    """The hidden check of a graded function: cases from `cases_fn(seed)` in each of `dtypes` (float32 and
    float64; None: once as given) on the grading device (and on meta unless meta=False), each output compared
    with `reference` on the same inputs. Outputs may be tensors (values, shape, dtype, device), ints and bools
    (exactly), floats, or tuples of them; keyed=True: a dict whose keys are `names` (e.g. the steps of a
    computation), read in that order (a missing key, or another kind of result, is named as such).
    callees: names of other graded functions of the notebook that this one calls (graded in isolation).
    Known mistakes ({description: function with the mistake}) are named in the feedback when the learner's
    outputs equal theirs: `mistakes` by values, `shape_mistakes` by the (wrong) shapes they give whatever their
    values, `gradient_mistakes` by their gradients (for cases with grad_wrt).
    extra(call, record, got, expected): a further check of each call, before the comparison (its own message).
    builds: classes of other exercises that the function may build (a parameter count building MultiHeadAttention):
    the runner reports what each build gave, and a count is graded apart from those classes' mistakes (judge_calls)."""
    forbidden = forbidden or {}
    functions = vars(sys.modules[reference.__module__])
    catalogue = (dict(mistakes or {}), dict(shape_mistakes or {}), dict(gradient_mistakes or {}))  # as given (dicts for keyed)
    if keyed:
        reference = in_order(reference, names)
        mistakes, shape_mistakes, gradient_mistakes = ({d: in_order(f, names) for d, f in (m or {}).items()}
                                                       for m in (mistakes, shape_mistakes, gradient_mistakes))

    def reference_call(call, inputs=None):
        args, kwargs = inputs or call.inputs(functions)
        return call.run(reference, args, kwargs)

    reference_call.__module__ = reference.__module__

    def run_mistake(wrong, call):
        args, kwargs = call.inputs(functions)
        return call.run(wrong, args, kwargs)

    def judge(calls, records, function=function or reference.__name__):
        if keyed:
            records = _keyed_records(records, names, function)
        judge_calls(calls, records, function, names, reference_call, mistakes or {}, error_hints or {}, forbidden, run_mistake,
                    extra, callees=tuple(callees), shape_mistakes=shape_mistakes, gradient_mistakes=gradient_mistakes,
                    builds=tuple(builds))

    plan = reference_plan(cases_fn, meta=meta, dtypes=dtypes)
    if keyed:
        def plan(seed, device, plan=plan):
            calls = plan(seed, device)
            if any(c.grad_wrt for c in calls):
                raise ValueError(f"{reference.__name__}: gradient probes (grad_wrt) are not supported for a function that returns a dict")
            return calls

    return Check(function or reference.__name__, plan, judge, forbidden, (*callees, *builds),
                 categories or (("values", "shape", "dtype", "device") if meta else ("values",)), reference_call, *catalogue)


def in_order(fn, names):
    """fn, with the dict it returns given as a tuple in `names` order (what the judge compares)."""

    def ordered(*args, **kwargs):
        out = fn(*args, **kwargs)
        return tuple(out[k] for k in names)

    ordered.__name__, ordered.__module__, ordered.__wrapped__ = fn.__name__, fn.__module__, fn
    return ordered


def _kind(encoded):
    """What a reported result is, in words (for a result that should have been a dict)."""
    if not isinstance(encoded, dict):
        return "nothing readable"
    if "tuple" in encoded:
        return f"a tuple of {len(encoded['tuple'])}"
    if "tensor" in encoded:
        return "a single tensor"
    if "value" in encoded and encoded["value"] is None:
        return "None (is the `return` missing?)"
    return f"a {encoded.get('other') or next(iter(encoded), 'value')}"


def _keyed_records(records, names, function):
    """The records of a function that returns a dict keyed by `names`, with that dict reported as a tuple in
    `names` order. The first call that ran but returned no such dict fails the check, saying what it returned
    (unless an earlier call failed in another way: its message comes first)."""
    ordered = []
    for record in records:
        if not isinstance(record, dict) or not record.get("ok") or record.get("forbidden"):
            ordered.append(record)
            continue
        out = record.get("outputs")
        entries = out.get("dict") if isinstance(out, dict) else None
        missing = [k for k in names if k not in entries] if isinstance(entries, dict) else None
        if missing is None or missing:
            if not any(not isinstance(r, dict) or not r.get("ok") or r.get("forbidden") for r in ordered):
                got = f"a dict without {', '.join(missing)}" if missing else _kind(out)
                raise AssertionError(f"{function} should return a dict with the keys {', '.join(names)}; it returned {got}.")
            ordered.append(record)
            continue
        ordered.append({**record, "outputs": {"tuple": [entries[k] for k in names]}})
    return ordered


def reference_judge(reference, names, mistakes=None, error_hints=None, forbidden=None):
    """A judge comparing each output with `reference` on the same inputs (values, shape, dtype, device).
    (function_check builds a whole Check around it, with callees isolated.)"""
    return function_check(reference, lambda seed: [], names, mistakes, error_hints, forbidden).judge


# --- Module exercises ----------------------------------------------------------------------------


def build_reference_module(cls, call):
    """The reference module for a call: built with the same init, the grader's weights, dtype and mode (the
    layer's dtype, which a ModuleCase with input_dtype makes differ from the inputs', call.dtype)."""
    module = cls(**call.module["init"])
    dtype = call.module.get("dtype") or call.dtype or torch.float32
    module.to(dtype)
    module.load_state_dict({k: v.to(dtype) for k, v in call.module["state"].items()}, strict=False)
    module.train(bool(call.module.get("train")))
    return module


def module_check(reference_cls, cases_fn, names, mistakes=None, error_hints=None, forbidden=None, callees=(), meta=True,
                 categories=None, salt=50):
    """The hidden check of a graded nn.Module class. For each ModuleCase the grader builds reference_cls(**init),
    draws its parameters from the grading seed and sends them; the sandbox builds the learner's class with the
    same init, loads those weights (nn.Module.load_state_dict; parameter names must match, the message lists
    both), sets train()/eval(), and calls it on the inputs (float32 and float64, the grading device, and meta).
    mistakes: {description: a wrong nn.Module class with the same parameter names}."""
    forbidden = forbidden or {}
    functions = vars(sys.modules[reference_cls.__module__])

    def plan(seed, device):
        calls = []
        cases = cases_fn(seed)
        for i, c in enumerate(cases):
            state = grader_weights(reference_cls(**c.init), generator(seed, case_salt(salt, i)))
            # train(): dropout masks drawn by the grader from one seed, the same for the learner and the reference
            masks = seed * 1009 + i if c.train else None
            for d in DTYPES:
                given = c.input_dtype or d  # the inputs' dtype (the call's, for its tolerance); the layer is in d
                moved = Case(c.label, c.inputs, c.kwargs).to(given)
                dtypes = (str(d).replace('torch.', '') if given == d else
                          f"the layer in {str(d).replace('torch.', '')}, the inputs in {str(given).replace('torch.', '')}")
                calls.append(Call(f"{c.label}, {dtypes}, device {device}", moved.args, moved.kwargs, device, given,
                                  module={"init": c.init, "state": {k: v.to(d) for k, v in state.items()}, "train": c.train,
                                          "dtype": d},
                                  dropout_seed=masks))
            if meta:
                moved = Case(c.label, c.inputs, c.kwargs).to(torch.float32)
                calls.append(Call(f"{c.label}, on device 'meta'", moved.args, moved.kwargs, "meta", torch.float32,
                                  module={"init": c.init, "state": {k: v.float() for k, v in state.items()}, "train": c.train,
                                          "dtype": torch.float32},
                                  dropout_seed=masks))
        return calls

    def run_class(cls, call, inputs=None):
        module = build_reference_module(cls, call)
        args, kwargs = inputs or call.inputs(functions)
        if call.device == "meta":
            module.to("meta")
        with runner.seeded_dropout(call.dropout_seed):
            return module(*args, **kwargs)

    def reference_call(call, inputs=None):
        return run_class(reference_cls, call, inputs)

    reference_call.__module__ = reference_cls.__module__

    def weights_kept(call, record, got, expected):
        if record.get("weights_kept") is False and call.device != "meta":
            raise AssertionError(
                f"{function}: after load_state_dict its parameters are not the weights it was given, on {call.label}. "
                "Keep every weight in an nn.Parameter (or nn.Linear) with the names the exercise gives, and do not "
                "re-initialise or replace them in forward()."
            )

    def judge(calls, records, function=reference_cls.__name__):
        judge_calls(calls, records, function, names, reference_call, mistakes or {}, error_hints or {}, forbidden, run_class, weights_kept, tuple(callees))

    function = reference_cls.__name__
    return Check(function, plan, judge, forbidden, tuple(callees),
                 categories or ("values", "shape", "dtype", "device", "weights"), reference_call, dict(mistakes or {}))


# --- Typed answers -------------------------------------------------------------------------------


def typed_answer_check(expected: dict, tolerance=0.01, mistakes=None, categories=("typed",)):
    """The hidden check of an answer cell: variables the learner typed (numbers worked out by hand), each
    compared with `expected[name]` (a tensor computed from solutions/) entry by entry within `tolerance`.
    The message says which entries are off, never their right values. mistakes: {description: {name: the
    values that mistake gives}}, named when the learner's numbers match them."""
    names = list(expected)

    def plan(seed, device):
        return [Call(name, (), {}, "cpu", torch.float64, variable=name) for name in names]

    def judge(calls, records, function="your answers"):
        problems, got_all = [], {}
        for call, record in zip(calls, records, strict=True):
            name, want = call.variable, expected[call.variable].to(torch.float64)
            if not isinstance(record, dict) or not record.get("ok"):
                problems.append(f"`{name}`: {str((record or {}).get('error') or 'no answer').split(': ', 1)[-1]}")
                continue
            try:
                got = decode_value(record.get("outputs"))
            except Unreadable as exc:
                problems.append(f"`{name}`: could not be read ({exc})")
                continue
            if not isinstance(got, Returned) or got.values is None:
                problems.append(f"`{name}`: expected numbers")
                continue
            values = got.values.to(torch.float64)
            if tuple(values.shape) != tuple(want.shape):
                problems.append(f"`{name}` has shape {tuple(values.shape)}, expected {tuple(want.shape)} ({_shape_words(want)})")
                continue
            got_all[name] = values
            off = ((values - want).abs() > tolerance) | values.isnan()
            if off.any():
                where = [_index(name, idx) for idx in off.nonzero().tolist()]
                shown = ", ".join(where[:6]) + (f" and {len(where) - 6} more" if len(where) > 6 else "")
                problems.append(f"`{name}`: {len(where)} of {values.numel()} entries are off by more than {tolerance:g}: {shown}")
        if problems:
            # The first line names the answer and what is wrong with it (the feedback table shows that line).
            message = problems[0] + (".\nAlso:\n- " + "\n- ".join(problems[1:]) if len(problems) > 1 else ".")
            for description, values in (mistakes or {}).items():
                matched = [n for n in values if n in got_all and got_all[n].shape == values[n].shape
                           and ((got_all[n] - values[n].to(torch.float64)).abs() <= tolerance).all()
                           and not ((got_all[n] - expected[n].to(torch.float64)).abs() <= tolerance).all()]
                if matched:
                    message += f"\nLikely mistake: {description} (this is what {', '.join(f'`{n}`' for n in matched)} would be then)."
                    break
            raise AssertionError(message)

    return Check(None, plan, judge, {}, (), categories)


def _index(name, idx):
    return name + "".join(f"[{i}]" for i in idx)


def _shape_words(t):
    return "a single number" if t.dim() == 0 else f"{t.shape[0]} numbers" if t.dim() == 1 else f"{t.shape[0]} rows of {t.shape[1]}" if t.dim() == 2 else "nested lists"


# --- Running a check in this process --------------------------------------------------------------


def run_local(check: Check, fn, seed=None, device=None, namespace=None):
    """Plan, call and judge in this process (unit tests; in-kernel grading with plain nbgrader), with the same
    replay rounds as the sandbox (run here). namespace: where Fn arguments, callees and typed answers are looked
    up (default: fn's globals)."""
    seed = grading_seed() if seed is None else seed
    calls = check.plan(seed, device or grading_device())
    specs, arrays = encode_calls(calls)
    if namespace is None:
        namespace = getattr(fn, "__globals__", None) or getattr(sys.modules.get(getattr(fn, "__module__", "")), "__dict__", {})
    # Classes that Model arguments name and the namespace lacks (a test passing the function alone): the reference's.
    models = {a.name: a.reference or vars(sys.modules[check.reference_call.__module__]).get(a.name)
              for c in calls for a in (*c.args, *c.kwargs.values()) if isinstance(a, Model)}
    # Only names the namespace lacks are added; a notebook namespace that lacks none is used as it is, since a
    # course-given class in it reads the notebook's globals, where the callee recorders are installed.
    extra = {k: v for k, v in {**models, **check.given}.items() if v is not None and k not in namespace}
    if extra:
        namespace = {**extra, **namespace}
    records = [runner.run_call(fn, spec, arrays, tuple(check.forbidden), namespace, check.callees) for spec in specs]

    def rerun(indices, tables):
        return [runner.run_call(fn, {**specs[i], "replay": table}, arrays, tuple(check.forbidden), namespace, check.callees)
                for i, table in zip(indices, tables)]

    judge_with_replays(check, calls, records, rerun, function=getattr(fn, "__name__", check.function))


def chapter_checks(chapter_id: str):
    """The check module of a chapter (autograder.checks.chNN_...): its CHECKS by grade id, its catalogues."""
    return importlib.import_module(f"autograder.checks.{registry.module_name(chapter_id)}")


def trains_a_model(chapter_id: str) -> bool:
    """Does one of the chapter's hidden checks train a model (Check.costly: the capstone, seconds a notebook)?"""
    return any(check.costly for check in chapter_checks(chapter_id).CHECKS.values())


def run_check(chapter_id: str, grade_id: str, answer, seed=None, device=None):
    """Run the hidden check of one graded cell in this process: what every notebook's hidden-tests cell does
    (`run_check("02-qkv-attention", "stable_softmax_hidden", globals())` under plain `nbgrader autograde`), and
    how the tests run a check. `answer` is the notebook's namespace (a dict: the graded function or class is
    looked up by the check's name, typed answers are read from it), or the graded function or class itself."""
    check = chapter_checks(chapter_id).CHECKS[grade_id]
    if isinstance(answer, dict):
        namespace = answer
        fn = namespace.get(check.function) if check.function else None
        if check.function and fn is None:
            raise AssertionError(f"{check.function} is not defined: run its cell (and the cells above it) first.")
    else:
        fn, namespace = answer, None
    run_local(check, fn, seed=seed, device=device, namespace=namespace)

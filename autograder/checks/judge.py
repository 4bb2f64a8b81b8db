"""The judge: what the sandbox reported, compared with the reference from solutions/, outside the sandbox.

judge_calls is the shared loop (values, shapes, dtypes, devices, the meta pass, then gradients); outcome and
explain_error turn a failed call into words; diagnose* name a catalogued mistake whose outputs equal the
learner's; callee_faults, compose and replay_table grade a function apart from the other graded functions it
calls (judge_calls' rule), and judge_with_replays runs the replay rounds that rule asks for (NeedsReplay).
"""

import contextlib
import inspect
import math
import re
import sys
from dataclasses import dataclass, replace
from unittest import mock

import torch

from autograder.checks import runner, visible
from autograder.checks.cases import TOLERANCES, Model
from autograder.checks.wire import ReportedDevice, Returned, Unreadable, decode_value, describe, to_tensors


# --- Replay rounds: a caller graded apart from its callees' proven mistakes ----------------------------


MAX_REPLAYS = 2  # further rounds for a caller whose callee is proven wrong (see judge_calls, rule 3)


class PartialCredit(AssertionError):
    """A judge's verdict of part of the points: `fraction` (0 < fraction < 1) of the cell's points, with the message
    that says why not all. It is an AssertionError, so whatever does not know about partial credit (plain nbgrader's
    hidden-tests cell, a test's expectations of a failed check) sees a failed check, never a pass."""

    def __init__(self, fraction: float, message: str):
        if not 0 < fraction < 1:
            raise ValueError(f"a partial credit is strictly between 0 and 1, got {fraction!r}")
        super().__init__(message)
        self.fraction = float(fraction)


class NeedsReplay(Exception):
    """Some calls can be graded apart from a callee's proven mistake only by running them again with the callee
    answering from the reference: tables = {call index: [{"name", "args", "out"}, ...]} (replay_table)."""

    def __init__(self, tables):
        super().__init__(f"{len(tables)} call(s) to run again")
        self.tables = tables


def replay_round(record) -> int:
    """Which round produced this record: 0 for the first run (set by judge_with_replays, never by the sandbox)."""
    return int(record.get("replayed") or 0) if isinstance(record, dict) else 0


def _replayed_note(record) -> str:
    return ("\n(It was run again with the right results of the functions it calls in place of yours, and this is what it "
            "gave then.)") if replay_round(record) else ""


def judge_with_replays(check, calls, records, rerun, function=None):
    """check.judge, with the rounds it asks for (NeedsReplay): rerun(indices, tables) runs those calls again
    (each with its callee table) and returns their new records. Raises AssertionError as check.judge does."""
    own = ("replayed", "replay_table")  # set here only: what the sandbox reports under these keys is dropped
    records = [{k: v for k, v in r.items() if k not in own} if isinstance(r, dict) else r for r in records]
    for round_number in range(1, MAX_REPLAYS + 2):
        try:
            return check.judge(calls, records, function=function or check.function)
        except NeedsReplay as replay:
            if round_number > MAX_REPLAYS:
                raise AssertionError(f"{function or check.function}: could not be graded apart from the functions it calls.") from None
            indices = sorted(replay.tables)
            fresh = rerun(indices, [replay.tables[i] for i in indices])
            for i, record in zip(indices, fresh, strict=True):
                clean = {k: v for k, v in record.items() if k not in own} if isinstance(record, dict) else {}
                records[i] = {**clean, "replayed": round_number, "replay_table": replay.tables[i]}


# --- One call's outcome, and the known mistakes it matches ---------------------------------------------

# Hints that differ when graded: the notebook is then run from the top in a fresh process, with the course's
# version of every read-only cell, so "run the cells above" (the learner's own Jupyter's hint) would mislead.
GRADED_ERRORS = {
    "is not defined": "a name your code uses is defined nowhere in the notebook as graded (run from the top, with "
                      "the course's version of every read-only cell): define or import it in your own answer cell.",
}


def explain_error(name, error, label, error_hints, error_in=None):
    """A learner's exception, in words: not implemented, a recognised mistake, or the raw error.
    error_in: the innermost notebook function the error came from, when it is not `name` itself."""
    if error_in and (error_in == name or error_in.startswith(f"{name}.")):
        error_in = None  # name itself, one of its methods, or a function nested in it
    if error_in and error_in.startswith("course:"):  # the course's model the grader passed: what name gave it is at fault
        given = error_in.split(":", 1)[1]
        hint = next((h for f, h in (error_hints or {}).items() if f in error), None)
        return (f"{name} raised {error} on {label}.\nThe error comes from `{given}`, the course's model that {name} is "
                f"given: look at what {name} passes to it." + (f"\nLikely mistake: {hint}" if hint else ""))
    if error.strip() in ("NotImplementedError", "NotImplementedError:"):
        where = f" (`{error_in}`, which {name} calls)" if error_in and error_in != name else ""
        return f"{name} is not implemented yet{where}: replace `raise NotImplementedError()`."
    if error_in and error_in != name:
        return f"{name} raised {error} on {label}.\nThe error comes from `{error_in}`, which {name} calls: fix that one first."
    if error.startswith("LookupError: parameter names differ"):
        return (f"{name}'s parameters do not have the names the exercise gives, so the grader cannot load its weights "
                f"({error.split(': ', 2)[-1]}). Name the layers as the exercise says.")
    for fragment, hint in list((error_hints or {}).items()) + list(GRADED_ERRORS.items()) + list(visible.COMMON_ERRORS.items()):
        if fragment in error:
            return f"{name} raised {error} on {label}.\nLikely mistake: {hint}"
    return f"{name} raised {error} on {label}."


def outcome(record, name, label, error_hints, forbidden):
    """The decoded outputs of one call, or AssertionError saying why there are none."""
    if not isinstance(record, dict):
        raise AssertionError(f"{name}: no result for {label}.")
    used = list(dict.fromkeys(forbidden.get(f, f) for f in record.get("forbidden") or [] if f in forbidden))
    switched_off = re.findall(r"course-guard: `(\w+)` is switched off", str(record.get("error") or ""))
    used += [forbidden.get(f, f) for f in switched_off if forbidden.get(f, f) not in used]  # the sandbox's guard
    if used:
        raise AssertionError(
            f"{name} calls {', '.join(used)}, the built-in this exercise asks you to write yourself: "
            "no points for it. Write it with basic tensor operations."
        )
    if not record.get("ok"):
        raise AssertionError(explain_error(name, str(record.get("error")), label, error_hints, record.get("error_in")))
    if record.get("mutated"):
        raise AssertionError(f"{name} changed its input tensors in place on {label}; work on new tensors instead (e.g. q = q / s, not q /= s).")
    try:
        out = decode_value(record.get("outputs"))
    except (Unreadable, ValueError, TypeError) as exc:
        raise AssertionError(f"{name}: its result on {label} could not be read ({exc}).") from None
    return out if isinstance(out, tuple) else (out,)


def _as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def _close(a, b, dtype):
    """Within the tolerance of the call's dtype; for a call run as given (dtype None: dtypes=None), of the expected
    value's own dtype, so that a float64 result computed in float32 and cast is caught there too."""
    if dtype is None and b.dtype in TOLERANCES:
        dtype = b.dtype
    return torch.allclose(a, b, equal_nan=True, **TOLERANCES.get(dtype, TOLERANCES[torch.float32]))


def _matches(got, wrong, dtype):
    """Do the reported outputs equal these (a mistake's) outputs?"""
    wrong = _as_tuple(wrong)
    if len(got) != len(wrong):
        return False
    for o, w in zip(got, wrong):
        if isinstance(w, torch.Tensor):
            if not (isinstance(o, Returned) and o.values is not None and o.shape == tuple(w.shape)):
                return False
            if not _close(o.values.to(w.dtype) if w.dtype != torch.bool else o.values, w.detach(), dtype):
                return False
        elif _plain(o) != w:
            return False
    return True


def diagnose(call, got, mistakes, dtype, run=None):
    """Name the first known mistake whose output equals the learner's on this call, or None.
    run(wrong, call) computes a mistake's output (default: call it on the call's inputs)."""
    for description, wrong_fn in mistakes.items():
        try:
            with torch.no_grad():
                wrong = run(wrong_fn, call) if run else wrong_fn(*call.inputs()[0], **call.inputs()[1])
        except Exception:
            continue
        if _matches(got, wrong, dtype):
            return description
    return None


def diagnose_shapes(call, got, shape_mistakes, expected, run=None):
    """Name the first mistake of `shape_mistakes` whose outputs have exactly the learner's (wrong) shapes, or None:
    for mistakes recognised by the shapes they give, whatever their values (e.g. a time-major output)."""
    shapes = [getattr(o, "shape", None) for o in got]
    if shapes == [tuple(e.shape) if isinstance(e, torch.Tensor) else None for e in expected]:
        return None
    for description, wrong_fn in shape_mistakes.items():
        try:
            with torch.no_grad():
                wrong = _as_tuple(run(wrong_fn, call) if run else wrong_fn(*call.inputs()[0], **call.inputs()[1]))
        except Exception:
            continue
        if [tuple(w.shape) if isinstance(w, torch.Tensor) else None for w in wrong] == shapes:
            return description
    return None


def _plain(value):
    """A reported scalar as a Python number (a one-element tensor counts as its value)."""
    if isinstance(value, Returned) and value.values is not None and value.values.numel() == 1:
        return value.values.item()
    return value


# --- Callees: graded in isolation (proven faults, composition, replay tables) --------------------------


def _same_argument(given, recorded, dtype):
    if isinstance(given, torch.Tensor):
        if not isinstance(recorded, Returned) or tuple(given.shape) != recorded.shape:
            return False
        if given.device.type == "meta" or recorded.values is None:
            return given.device.type == "meta" and recorded.values is None
        if given.dtype == torch.bool or not given.is_floating_point():
            return torch.equal(given.cpu(), recorded.values.to(given.dtype))
        return _close(recorded.values.to(given.dtype), given.detach().cpu(), dtype)
    if isinstance(given, (tuple, list)):
        return isinstance(recorded, tuple) and len(given) == len(recorded) and all(_same_argument(g, r, dtype) for g, r in zip(given, recorded))
    if isinstance(recorded, ReportedDevice):
        return isinstance(given, (torch.device, str)) and torch.device(given).type == "meta" if recorded.local().type == "meta" \
            else isinstance(given, (torch.device, str)) and torch.device(given).type != "meta"
    return given == recorded


def same_value(got, want, dtype) -> bool:
    """Is a decoded reported value `got` the same as the reference's `want`? Tensors (shape, dtype, values
    within the dtype's tolerance, NaNs in the same places; meta: shape and dtype), dicts (same keys, each the
    same), tuples and lists (element by element), ints (an int, exactly: a float is not an int), floats,
    bools and None. Used to PROVE that a learner's callee was wrong before anything blames it."""
    if isinstance(want, torch.Tensor):
        if not isinstance(got, Returned) or got.shape != tuple(want.shape) or got.dtype != str(want.dtype).replace("torch.", ""):
            return False
        if want.device.type == "meta" or got.values is None:
            return want.device.type == "meta" and got.values is None and not got.unreadable
        want = want.detach().cpu()
        if want.dtype == torch.bool or not want.is_floating_point():
            return torch.equal(got.values.to(want.dtype), want)
        return _close(got.values.to(want.dtype), want, dtype)
    if isinstance(want, dict):
        return isinstance(got, dict) and set(got) == set(want) and all(same_value(got[k], want[k], dtype) for k in want)
    if isinstance(want, (tuple, list)):
        got = got if isinstance(got, tuple) else None
        return got is not None and len(got) == len(want) and all(same_value(g, w, dtype) for g, w in zip(got, want))
    value = _plain(got) if not isinstance(want, bool) else got
    if isinstance(want, bool) or want is None:
        return value is want
    if isinstance(want, int):
        return isinstance(value, int) and not isinstance(value, bool) and value == want
    if isinstance(want, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool) and (
            value == want or (math.isnan(want) and math.isnan(value)) or math.isclose(value, want, rel_tol=1e-6, abs_tol=1e-12))
    return False


@dataclass
class CalleeFault:
    """One recorded call of a learner's callee that is proven wrong: the reference callee, run here on the
    same recorded inputs, gives something else (or does not raise where the learner's raised), or the call
    changed its inputs in place, or used a forbidden built-in (as the runner reports it)."""

    name: str
    why: str  # "raised ...", "returns wrong results", "changes its input in place", "calls ..."
    raised: bool = False
    mutated: bool = False  # a side effect on the caller's tensors, which no composition of outputs can model


def callee_faults(record, callees, module_name, dtype) -> list:
    """Every recorded callee call of this record that is PROVEN wrong (see CalleeFault), recomputing the
    reference callee here on the recorded inputs. A call that was not recorded (inside a torch transform,
    past the record limit) or that raised without its inputs recorded proves nothing and is not listed."""
    module = sys.modules.get(module_name)
    faults = []
    for entry in (record.get("callees") or []) if isinstance(record, dict) else []:
        if not isinstance(entry, dict) or entry.get("name") not in callees or module is None:
            continue
        name = entry["name"]
        reference = getattr(module, name, None)
        if not callable(reference) or not isinstance(entry.get("args"), dict):
            continue
        try:
            given = {k: to_tensors(decode_value(v)) for k, v in entry["args"].items()}
        except (Unreadable, ValueError, TypeError):
            continue
        if any(isinstance(v, torch.Tensor) and v.device.type == "meta" for v in given.values()) and "raised" in entry:
            continue  # raising on meta inputs proves nothing about values (see the meta pass)
        try:
            with torch.no_grad():
                want = reference(**given)
            reference_raised = None
        except Exception as exc:
            want, reference_raised = None, exc
        if entry.get("forbidden"):
            faults.append(CalleeFault(name, f"calls {', '.join(map(str, entry['forbidden']))[:100]}, a built-in its exercise forbids"))
        elif "raised" in entry:
            if reference_raised is None:
                faults.append(CalleeFault(name, f"raised {str(entry['raised'])[:200]}", raised=True))
        elif entry.get("mutated"):
            faults.append(CalleeFault(name, "changes its input tensors in place", mutated=True))
        elif reference_raised is None and "out" in entry:
            try:
                got = decode_value(entry["out"])
            except (Unreadable, ValueError, TypeError):
                continue
            if not same_value(got, want, dtype):
                faults.append(CalleeFault(name, "returns wrong results"))
    return faults


def replay_table(record, callees, module_name) -> list:
    """For a replay round (judge_calls rule 3, judge_with_replays): for each recorded callee call,
    {"name", "args": its recorded (encoded) inputs, "out": the REFERENCE callee's output on them, encoded as
    the runner encodes values}. Run again with its callee answering from this table, the learner's caller
    could be judged directly against the reference caller, even when it calls a wrong callee in another
    pattern. Only the callee's outputs on the learner's own inputs would enter that round's sandbox."""
    module = sys.modules.get(module_name)
    table = []
    for entry in (record.get("callees") or []) if isinstance(record, dict) else []:
        if not isinstance(entry, dict) or entry.get("name") not in callees or not isinstance(entry.get("args"), dict) or module is None:
            continue
        try:
            given = {k: to_tensors(decode_value(v)) for k, v in entry["args"].items()}
            with torch.no_grad():
                out = getattr(module, entry["name"])(**given)
        except Exception:
            continue
        table.append({"name": entry["name"], "args": entry["args"], "out": runner.encode_value(out)})
    return table


def callee_blame(record, callees, module_name, dtype):
    """A sentence naming the learner's callee when one of its recorded calls is proven wrong (callee_faults),
    or ''. Nothing is blamed without that proof."""
    faults = callee_faults(record, callees, module_name, dtype)
    if not faults:
        return ""
    fault = faults[0]
    if fault.raised:
        return f"\nThis comes from your `{fault.name}`, which {fault.why}: fix that exercise first."
    return f"\nYour `{fault.name}` {fault.why} here (its own exercise loses points for that); this may be why: fix it first."


def compose(call, record, reference_call, callees, module_name):
    """(outputs, complete): the reference's outputs for this call with each callee call replaced by the
    learner's recorded result when the reference gives that callee the same inputs (compared here), and
    whether the composition is complete: every callee call the reference made found a recorded twin and
    every recorded call (none unrecorded) was used. An incomplete composition means the learner's caller
    calls its callee in another pattern (a per-head loop, slices, a transform): then the composed outputs
    are not what a correct caller gives with the learner's callee. outputs is None when nothing was recorded
    or the reference failed."""
    entries, unrecorded = [], False
    for entry in (record.get("callees") or []) if isinstance(record, dict) else []:
        if not isinstance(entry, dict) or entry.get("name") not in callees:
            continue
        if isinstance(entry.get("args"), dict) and "out" in entry:
            try:
                entries.append((entry["name"], {k: decode_value(v) for k, v in entry["args"].items()}, decode_value(entry["out"])))
            except (Unreadable, ValueError, TypeError):
                unrecorded = True
        else:
            unrecorded = True
    if not entries:
        return None, False
    module = sys.modules[module_name]
    used, missed = set(), []

    def replay(name, original):
        signature = inspect.signature(original)

        def callee(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            for i, (entry_name, given, out) in enumerate(entries):
                if entry_name == name and set(given) == set(bound.arguments) and all(
                    _same_argument(bound.arguments[k], given[k], call.dtype) for k in given if not (k == "self" and "." in name)
                ):
                    used.add(i)
                    return to_tensors(out)
            missed.append(name)
            return original(*args, **kwargs)

        return callee

    patches = {name: replay(name, getattr(module, name)) for name in callees if "." not in name and callable(getattr(module, name, None))}
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.dict(module.__dict__, patches))
        for name in (n for n in callees if "." in n):  # a method of a class, e.g. a sublayer's forward
            owner_name, attr = name.split(".", 1)
            owner = getattr(module, owner_name, None)
            if isinstance(owner, type) and callable(getattr(owner, attr, None)):
                stack.enter_context(mock.patch.object(owner, attr, replay(name, getattr(owner, attr))))
        stack.enter_context(torch.no_grad())
        try:
            outputs = _as_tuple(reference_call(call))
        except Exception:
            return None, False
    return outputs, not missed and not unrecorded and len(used) == len(entries)


def built_parameters(record, builds, module_name):
    """A count graded apart from the module it builds: (learner's total, reference's total) of the parameters of
    every module of the classes `builds` (other exercises' modules, e.g. MultiHeadAttention) that the learner's
    function built, the reference's being the reference class built here (on the meta device: shapes only) with
    the same constructor arguments. None when nothing was built or a build could not be read or redone."""
    module = sys.modules[module_name]
    learner = reference = 0
    built = False
    for entry in (record.get("callees") or []) if isinstance(record, dict) else []:
        if not isinstance(entry, dict) or entry.get("name") not in builds:
            continue
        out, given = entry.get("out"), entry.get("args")
        if not isinstance(given, dict) or not isinstance(out, dict) or not isinstance(out.get("module"), dict):
            return None  # a build that raised or was not recorded: nothing to grade the count against
        cls = getattr(module, entry["name"], None)
        try:
            kwargs = {k: to_tensors(decode_value(v)) for k, v in given.items()}
            with torch.device("meta"):
                made = cls(**kwargs)
            reference += sum(p.numel() for p in made.parameters())
            learner += sum(math.prod(int(d) for d in shape) for _, shape in out["module"]["parameters"])
        except Exception:
            return None
        built = True
    return (learner, reference) if built else None


def shapes_from(call):
    """The call whose reference outputs the judge compares a call's results with: the call itself, except on the
    meta pass, which compares shapes only. There the reference runs on the same inputs on the CPU: the shapes are
    the same, and torch's meta kernels, Python decompositions whose first call imports torch._dynamo (about 2 s in
    every grading process), are left to the learner's code in the sandbox."""
    return replace(call, device="cpu") if call.device == "meta" else call


def composed(call, record, reference_call, callees, module_name):
    """The outputs of compose() (None when nothing was recorded)."""
    return compose(call, record, reference_call, callees, module_name)[0]


# --- The judging loop ----------------------------------------------------------------------------------


def _expect(where, g, e, call, mistakes_run):
    """Compare one reported output g with the expected e (tensor, number, bool, None); raise with a diagnosis."""
    dtype = call.dtype
    if isinstance(e, torch.Tensor):
        if not isinstance(g, Returned):
            raise AssertionError(f"{where}: expected a tensor, got {describe(g)}.")
        if g.shape != tuple(e.shape):
            raise AssertionError(f"{where}: shape {g.shape}, expected {tuple(e.shape)}." + mistakes_run())
        if g.dtype != str(e.dtype).replace("torch.", ""):
            keep = (" (keep the input's dtype)" if e.is_floating_point()
                    else " (an integer tensor: counts and indices are whole numbers)" if e.dtype != torch.bool else "")
            raise AssertionError(f"{where}: dtype {g.dtype}, expected {e.dtype}{keep}.")
        if g.device.split(":")[0] != call.device.split(":")[0]:
            raise AssertionError(f"{where}: on device {g.device}, expected {call.device}.")
        if call.device == "meta":
            return
        e = e.detach()
        if g.values is None:
            raise AssertionError(f"{where}: its values could not be read ({g.unreadable or 'none were reported'}).")
        values = g.values.to(e.dtype) if e.dtype != torch.bool else g.values
        if e.is_floating_point():
            values = visible.masked_rows_as_expected(values, e)  # the course's rule for rows with no allowed key
        if not _close(values, e, dtype):
            if e.dtype == torch.bool:
                raise AssertionError(f"{where}: wrong entries ({int((g.values != e).sum())} of {e.numel()} differ)." + mistakes_run())
            named = mistakes_run()
            if not named and dtype == torch.float64 and lost_precision(values, e):
                named = ("\nLikely mistake: computed in float32 (or another lower precision) and cast back: keep the "
                         "input's dtype throughout (no .float(), and new tensors with dtype=x.dtype).")
            raise AssertionError(f"{where}: wrong values ({visible.difference_in_words(values, e)})." + named)
        return
    value = _plain(g)
    if isinstance(e, bool) or e is None:
        if value is not e and value != e:
            if isinstance(e, bool) and isinstance(value, bool):  # the other bool: not right (as a wrong number is)
                raise AssertionError(f"{where}: got {value}, which is not right." + mistakes_run())
            raise AssertionError(f"{where}: got {describe(value)}, expected {'a bool' if isinstance(e, bool) else 'None'}." + mistakes_run())
        return
    if isinstance(e, (int, float)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise AssertionError(f"{where}: expected a number ({type(e).__name__}), got {describe(value)}.")
        if isinstance(e, int) and not isinstance(value, int):
            # One rule for every integer answer: a count is an int; 12.0 is a float, not an int.
            raise AssertionError(f"{where}: got {describe(value)}; an int is expected (a whole number such as 12, "
                                 "not 12.0: use // and int arithmetic, or int(...))." + (mistakes_run() if value != e else ""))
        if isinstance(e, int) and value != e:
            raise AssertionError(f"{where}: got {value!r}, which is not right." + mistakes_run())
        if isinstance(e, float) and not math.isclose(value, e, rel_tol=call_float_rel(call), abs_tol=1e-12):
            raise AssertionError(f"{where}: got {value!r}, which is not right." + mistakes_run())
        return
    raise AssertionError(f"{where}: cannot compare a {type(e).__name__}.")


def lost_precision(values, expected) -> bool:
    """Does a wrong float64 result look computed in float32 and cast back? Every finite value is exactly a
    float32 number (while the reference's are not), and the difference is within float32 rounding."""
    finite = values.isfinite() & expected.isfinite()
    if not finite.any():
        return False
    v, e = values[finite], expected[finite]
    if not torch.equal(v, v.float().double()) or torch.equal(e, e.float().double()):
        return False
    relative = ((v - e).abs().max() / e.abs().max().clamp_min(1e-30)).item()
    return relative < 1e-3


def call_float_rel(call):
    return 1e-6 if call.dtype in (None, torch.float64) else 1e-4


def judge_calls(calls, records, function, names, reference_call, mistakes, error_hints, forbidden, run_mistake=None, extra=None, callees=(),
                shape_mistakes=None, gradient_mistakes=None, builds=()):
    """The shared judging loop: for each call, the reference's outputs (reference_call(call)) and the learner's
    reported ones, compared output by output; gradients too when the call asks for them.
    extra(call, record, got, expected): a further check of one call (e.g. a module that did not keep its weights).
    mistakes name wrong values, shape_mistakes wrong shapes, gradient_mistakes wrong gradients (see function_check).
    Gradients are judged after every call's values: a wrong value is the more basic mistake, and which of the two
    a learner hears about first must not depend on the machine's last-bit rounding.

    Callees (other graded functions the learner's function calls) are graded in isolation, by this rule:
    1. The learner's outputs equal the reference's: right.
    2. Else they equal the reference composed with the learner's recorded callee results (see compose): right
       (the callee's mistake is charged in its own exercise only).
    3. Else, when the composition is incomplete (the caller calls its callee in another pattern than the
       reference: a per-head loop, slices, inside a torch transform) or the caller raised, and some recorded
       callee call is PROVEN wrong (callee_faults: the reference callee, run here on the recorded inputs,
       gives something else; or it raised where the reference does not; or it changed its inputs in place,
       a side effect no composition of outputs models), the call is run again (NeedsReplay, a second sandbox
       round; see judge_with_replays) with the learner's callee answering from a table: for each input the
       learner's caller gave it, the REFERENCE callee's output on that input (computed here; only those values
       enter the sandbox). The caller is then judged directly against the reference: a right caller keeps its
       points, a wrong one loses them, whatever pattern it calls its callee in. Up to MAX_REPLAYS rounds (a
       caller that, given right answers, calls its callee on new inputs gets those answered too); after that
       the failure stands, naming the callee. A wrong caller with a right callee always loses its points (no
       proven fault: judged as in 1-2), and so does a wrong caller whose callee is wrong but called in the
       reference's pattern (the composition is complete).
    4. Else the caller's own mistake stands; the message names the callee only when it is proven wrong.
    builds: classes of other exercises that a count may build (e.g. MultiHeadAttention for its parameter count).
    A count that differs from the reference is right when it is the number of parameters of the modules it built,
    those modules are proven wrong (the reference class, built with the same arguments, has other parameters)
    and the reference class built that way gives the reference count (the count asked for the right module):
    the module's mistake is charged in its own exercise only (built_parameters).
    The meta pass (inputs on device 'meta', shapes only) costs points only for a device mistake it can prove:
    tensors of two devices meeting (an error saying so, or the runner seeing an op mix them) or a result on
    another device. Code that needs values (.item(), .tolist(), int(t), boolean indexing) cannot run on meta:
    that proves nothing and costs nothing."""
    with_gradients, pending = [], {}
    module_name = reference_call.__module__
    for index, (call, record) in enumerate(zip(calls, records, strict=True)):
        if call.raises is not None:
            _judge_raises(call, record, function, error_hints, forbidden)
            continue
        with torch.no_grad():
            expected = _as_tuple(reference_call(shapes_from(call)))
        known = {}

        def faults(record=record, call=call, known=known):
            """The proven faults of the learner's callees on this call (computed once, when needed)."""
            if "faults" not in known:
                known["faults"] = callee_faults(record, callees, module_name, call.dtype) if callees else []
            return known["faults"]

        if call.device == "meta":
            if isinstance(record, dict) and _device_mistake_of_a_callee(record, callees):
                continue  # a callee mixes devices (or hands back a tensor off 'meta'): its own check takes the points
            try:
                got = outcome(record, function, call.label, error_hints, forbidden)
            except AssertionError as failure:
                if not _forbidden_used(record, forbidden) and any(
                        isinstance(e, dict) and e.get("name") in callees and "raised" in e and e.get("devices") == ["meta"]
                        for e in record.get("callees") or []):
                    continue  # the learner's callee fails on 'meta' inputs (not implemented, a built-in switched off, ...):
                    # its own check takes the points, not this one
                if "calls " in str(failure) or "not implemented" in str(failure):
                    raise
                error = str(record.get("error") or "") if isinstance(record, dict) else ""
                if record.get("device_mix"):  # e.g. meta values written into a tensor created on the CPU
                    error += f" (in {', '.join(map(str, record['device_mix']))[:80]}, where a tensor on the CPU meets the inputs)"
                elif not visible.meta_failure_is_device_mistake(error):
                    continue  # needs values (or fails otherwise on shapes only): no device mistake proven
                raise AssertionError(
                    f"{function} mixes devices: with its inputs on device 'meta' ({call.label}) it raised {error}\n"
                    "Likely mistake: a tensor created without device=... (e.g. torch.ones(n, n) instead of "
                    "torch.ones(n, n, device=x.device)); on a GPU the same code fails the same way."
                ) from None
            if isinstance(record, dict) and record.get("device_mix"):
                raise AssertionError(
                    f"{function} combines its inputs with a tensor on another device ({', '.join(map(str, record['device_mix']))[:120]}), "
                    f"on {call.label} with inputs on device 'meta'. On a GPU this fails.\nLikely mistake: a tensor created "
                    "without device=... (e.g. torch.eye(n) instead of torch.eye(n, device=x.device))."
                )
            alternative = None
            for i, (what, g, e) in enumerate(zip(names, got, expected)):
                if not isinstance(e, torch.Tensor):
                    continue
                if isinstance(g, Returned) and g.device.startswith("meta") and g.shape != tuple(e.shape) and callees:
                    # The shape the reference gives when composed with what the learner's callee returned: the
                    # callee's mistake (e.g. its outputs transposed), left to the callee's own check.
                    alternative = alternative or composed(call, record, reference_call, callees, module_name) or ()
                    if i < len(alternative) and isinstance(alternative[i], torch.Tensor) and g.shape == tuple(alternative[i].shape):
                        continue
                    if faults():
                        continue  # a callee proven to give wrong shapes, called in another pattern: its own check
                if not isinstance(g, Returned) or not g.device.startswith("meta"):
                    raise AssertionError(
                        f"{what} of {function} on {call.label}: with inputs on device 'meta' the result should be a "
                        f"meta tensor of shape {tuple(e.shape)}; got {describe(g)}."
                        "\nLikely mistake: a tensor created without device=... (e.g. torch.ones(n, n) instead of torch.ones(n, n, device=x.device))."
                    )
                if g.shape != tuple(e.shape):
                    raise AssertionError(f"{what} of {function} on {call.label}: shape {g.shape}, expected {tuple(e.shape)}.")
            continue
        mutated_by_callee = any(isinstance(e, dict) and e.get("mutated") for e in (record.get("callees") or [])) if isinstance(record, dict) else False
        shown = record
        if isinstance(record, dict) and str(record.get("error_in") or "").split(".")[0] in callees and not faults():
            shown = {**record, "error_in": None}  # a callee that raised as the reference would: not its fault
        elif isinstance(record, dict) and str(record.get("error_in") or "").split(".")[0] in {
                a.name for a in (*call.args, *call.kwargs.values()) if isinstance(a, Model)}:
            shown = {**record, "error_in": "course:" + str(record["error_in"])}  # a course model the call passed: never "fix it first"
        try:
            got = outcome({**shown, "mutated": False} if mutated_by_callee else shown, function, call.label, error_hints, forbidden)
        except AssertionError as failure:
            if isinstance(record, dict) and not record.get("ok") and faults() and not _forbidden_used(record, forbidden):
                if replay_round(record) < MAX_REPLAYS:  # rule 3: run it again with a right callee in its place
                    pending[index] = list(record.get("replay_table") or []) + replay_table(record, callees, module_name)
                    continue
            raise AssertionError(str(failure) + callee_blame(record, callees, module_name, call.dtype) + _replayed_note(record)) from None
        if len(got) != len(expected):
            raise AssertionError(f"{function} should return {len(expected)} value(s) ({', '.join(names)}), got {len(got)}.")

        def named_mistake(call=call, got=got, expected=expected, record=record):
            mistake = diagnose(call, got, mistakes, call.dtype, run_mistake) if mistakes else None
            if mistake is None and mistakes and callees:
                # The mistake composed with the learner's recorded callee results, as the reference is (rule 2):
                # in train() mode a recorded sublayer draws its dropout masks apart (runner.seeded_dropout), so a
                # mistake in the caller's own code matches only with the callee answering as it did for the learner.
                def composed_mistake(wrong_fn, c, record=record):
                    run = (lambda cc: run_mistake(wrong_fn, cc)) if run_mistake else (lambda cc: wrong_fn(*cc.inputs()[0], **cc.inputs()[1]))
                    out = compose(c, record, run, callees, module_name)[0]
                    if out is None:
                        raise LookupError("no recorded callee result to compose with")
                    return out

                mistake = diagnose(call, got, mistakes, call.dtype, composed_mistake)
            if mistake is None and shape_mistakes:
                mistake = diagnose_shapes(call, got, shape_mistakes, expected, run_mistake)
            hidden = _unrecorded_callees(record, callees)
            if hidden:  # its callee ran where its results cannot be seen: a mistake there looks like the caller's own
                where = (f"your `{hidden[0]}`, which it calls inside a torch transform (torch.func, vmap) where the grader "
                         f"cannot see what `{hidden[0]}` returned: if `{hidden[0]}` loses points in its own exercise, fix it first")
                return f"\nLikely mistake: {mistake}, or a mistake in {where}." if mistake else f"\nThe cause may be {where}."
            return f"\nLikely mistake: {mistake}." if mistake else ""

        if extra:
            extra(call, record, got, expected)
        try:
            for what, g, e in zip(names, got, expected):
                _expect(f"{what} of {function} on {call.label}", g, e, call, named_mistake)
        except AssertionError as failure:
            # Graded on its own: right if it is the reference composed with what the learner's callees returned.
            alternative, complete = compose(call, record, reference_call, callees, module_name) if callees else (None, False)
            blame = callee_blame(record, callees, module_name, call.dtype) if callees else ""
            counted = built_parameters(record, builds, module_name) if builds else None
            if counted is not None and counted[0] != counted[1] and len(got) == len(expected) == 1 and counted[1] == expected[0]:
                alternative = (counted[0],)  # the count of the (wrong) module it built, asked for the right module
            if alternative is not None and len(alternative) == len(got):
                try:
                    for what, g, e in zip(names, got, alternative):
                        _expect(f"{what} of {function} on {call.label}", g, e, call, lambda: "")
                    alternative_matches = True
                except AssertionError:
                    alternative_matches = False
                if alternative_matches:
                    if call.grad_wrt:
                        with_gradients.append((call, record))
                    continue
            if faults() and (not complete or any(f.mutated for f in faults())) and replay_round(record) < MAX_REPLAYS:
                # rule 3: another call pattern over (or a side effect of) a callee proven wrong: run it again
                pending[index] = list(record.get("replay_table") or []) + replay_table(record, callees, module_name)
                continue
            raise AssertionError(str(failure) + blame + _replayed_note(record)) from None
        if call.grad_wrt:
            with_gradients.append((call, record))
    if pending:
        raise NeedsReplay(pending)
    for call, record in with_gradients:
        _judge_gradients(call, record, function, reference_call, gradient_mistakes)


def _unrecorded_callees(record, callees) -> list:
    """The learner's callees whose calls on this record could not be recorded (inside a torch transform)."""
    names = [e.get("name") for e in (record.get("callees") or []) if isinstance(e, dict) and "unrecorded" in e and e.get("name") in callees]
    return list(dict.fromkeys(names))


def _device_mistake_of_a_callee(record, callees) -> bool:
    """On the meta pass: did one of the learner's callees mix devices while it ran (the runner marks such an op
    "op (in callee)"), or return a tensor that is not on 'meta' for 'meta' inputs? Then what follows in the
    caller is the callee's mistake, charged by the callee's own check. Not when the caller handed a callee a
    tensor off 'meta' (a mask made on the CPU): that mistake is the caller's own."""
    entries = [e for e in record.get("callees") or [] if isinstance(e, dict) and e.get("name") in callees]
    given_meta = []  # the entries whose callee was given a meta tensor or device
    for entry in entries:
        given = [str(d) for d in entry.get("devices") or []]
        try:
            decoded = [decode_value(a) for a in (entry.get("args") or {}).values()]
            given += [v.device for v in decoded if isinstance(v, Returned) and v.shape]
            given += [v.name for v in decoded if isinstance(v, ReportedDevice)]  # a device= argument counts as given
        except (Unreadable, ValueError, TypeError):
            pass
        if any(not d.startswith("meta") for d in given):
            return False  # the caller gave its callee a tensor on another device
        if given:
            given_meta.append(entry)
    if any(str(m).endswith(f"(in {name})") for m in record.get("device_mix") or [] for name in callees):
        return True
    # A callee given no tensor and no device (sizes only, e.g. a table built on the CPU in a constructor before the
    # grader moves the module to meta) may rightly return a CPU tensor: only one given meta inputs is blamed.
    for entry in given_meta:
        if "out" not in entry:
            continue
        try:
            outs = _as_tuple(decode_value(entry["out"]))
        except (Unreadable, ValueError, TypeError):
            continue
        flat = [v for o in outs for v in (o.values() if isinstance(o, dict) else [o])]
        if any(isinstance(o, Returned) and not o.device.startswith("meta") for o in flat):
            return True
    return False


def _forbidden_used(record, forbidden):
    return any(f in forbidden for f in (record.get("forbidden") or []))


def _judge_raises(call, record, function, error_hints, forbidden):
    """A call on invalid inputs must raise call.raises (by its name; a learner's own message is welcome)."""
    name = call.raises.__name__
    why = f": {call.why}" if call.why else ""
    if not isinstance(record, dict):
        raise AssertionError(f"{function}: no result for {call.label}.")
    if record.get("ok"):
        outcome(record, function, call.label, error_hints, forbidden)  # a forbidden built-in is named first
        raise AssertionError(f"{function} on {call.label} should raise {name}{why}. It returned a result instead.")
    error = str(record.get("error") or "")
    if error.split(":", 1)[0].strip() != name:
        raise AssertionError(explain_error(function, error, call.label, error_hints, record.get("error_in")) + f" It should raise {name}{why}.")


# --- Gradients -----------------------------------------------------------------------------------------


def _judge_gradients(call, record, function, reference_call, gradient_mistakes=None):
    """Compare the reported gradients with the reference's, for the same seeded projection of the outputs;
    a wrong gradient that one of `gradient_mistakes` gives exactly is named."""
    expected = expected_gradients(call, reference_call)

    def named_mistake():
        for description, wrong in (gradient_mistakes or {}).items():
            try:
                with torch.enable_grad():
                    args, kwargs = call.inputs(_functions_of(reference_call))
                    out = wrong(*args, **kwargs)
                    theirs = runner.gradients(list(args), list(call.grad_wrt), out, call.grad_seed)
            except Exception:
                continue
            if len(theirs) == len(reported) and all(_gradient_equals(r, t, call.dtype) for r, t in zip(reported, theirs)):
                return f"\nLikely mistake: {description}."
        return ""

    reported = record.get("grads")
    if not isinstance(reported, list) or len(reported) != len(expected):
        raise AssertionError(f"{function}: its gradients on {call.label} could not be computed (is the output cut off from autograd by .detach(), .item() or torch.tensor(...)?).")
    for i, enc, e in zip(call.grad_wrt, reported, expected):
        if e is None:
            continue
        try:
            g = decode_value(enc)
        except Unreadable as exc:
            raise AssertionError(f"{function}: its gradient on {call.label} could not be read ({exc}).") from None
        where = f"the gradient of {function}'s output with respect to argument {i + 1} on {call.label}"
        if not isinstance(g, Returned) or g.values is None:
            raise AssertionError(f"{where}: missing: the output does not depend on this input through autograd (a .detach(), .item() or torch.tensor(...) on the way?)."
                                 + named_mistake())
        if g.shape != tuple(e.shape) or not _close(g.values.to(e.dtype), e, call.dtype):
            diff = (g.values.to(e.dtype) - e).abs().max().item() if g.shape == tuple(e.shape) else float("inf")
            raise AssertionError(f"{where}: wrong values (largest difference {diff:.3g}): the output depends on this input in the wrong way."
                                 + named_mistake())


def _gradient_equals(encoded, expected, dtype):
    """Is a reported gradient (encoded) the same as `expected` (None: no gradient, or an all-zero one)?"""
    try:
        got = decode_value(encoded)
    except Exception:
        return False
    if expected is None:
        return not isinstance(got, Returned) or got.values is None or not got.values.any()
    return (isinstance(got, Returned) and got.values is not None and got.shape == tuple(expected.shape)
            and _close(got.values.to(expected.dtype), expected.detach(), dtype))


def expected_gradients(call, reference_call):
    """The reference's gradients for a call with grad_wrt (the same seeded projection as the runner's)."""
    with torch.enable_grad():
        args, kwargs = call.inputs(_functions_of(reference_call))
        out = reference_call(call, inputs=(args, kwargs))
        grads = runner.gradients(list(args), list(call.grad_wrt), out, call.grad_seed)
    return [None if g is None else g.detach() for g in grads]


def _functions_of(reference_call):
    return vars(sys.modules[reference_call.__module__]) if getattr(reference_call, "__module__", None) in sys.modules else {}

"""Hidden grading checks, split so that nothing in the learner's kernel decides a score.

A check has two halves:
- `plan(seed, device) -> [Call]`: the calls of the learner's function on inputs drawn at grading time
  (several shapes, float32 and float64, the grading device, and once on the `meta` device). The grader
  sends them into the sandbox, where `autograder.runner` makes each call and reports the raw outputs.
- `judge(calls, records)`: runs in the grading process. It decodes the reported outputs (plain .npy
  arrays, never pickle), computes the reference from `solutions/` on the same inputs, compares, and raises
  AssertionError with a diagnosis on the first disagreement.

A chapter's check module (e.g. `autograder.checks.ch02_qkv_attention`) defines `CHECKS`, one `Check` per
graded notebook cell (keyed by the cell's grade id), and a `check_<name>(fn)` per graded function that runs
plan, calls and judge in this process (what the unit tests and a plain `nbgrader autograde` use).

Grading-time settings come from the environment, set by the grading CLI:
- COURSE_GRADING_SEED: integer seed for the inputs (the CLI draws a fresh one per run and prints it);
- COURSE_DEVICE: "cpu", "cuda", ... (default: cuda when available, else cpu).
"""

import base64
import io
import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from autograder import runner

# Tolerances per dtype, for compositions of a few matmuls and a softmax on O(1) values.
# float32 keeps ~7 significant digits; summing a few dozen products loses about one more.
TOLERANCES = {
    torch.float32: dict(atol=1e-5, rtol=1e-4),
    torch.float64: dict(atol=1e-10, rtol=1e-8),
}
DTYPES = (torch.float32, torch.float64)
ALLOWED_DTYPES = {"float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"}


def grading_seed() -> int:
    return int(os.environ.get("COURSE_GRADING_SEED", "0"))


def grading_device() -> str:
    name = os.environ.get("COURSE_DEVICE", "").strip()
    if name:
        return name
    return "cuda" if torch.cuda.is_available() else "cpu"


def generator(seed: int, salt: int) -> torch.Generator:
    """A CPU generator seeded from the grading seed; `salt` separates the checks of one notebook."""
    return torch.Generator().manual_seed(seed * 1000 + salt)


@dataclass(frozen=True)
class Seeded:
    """An argument that is a torch.Generator seeded with `seed` (made fresh for each call)."""

    seed: int


@dataclass
class Case:
    """One set of inputs for a graded function: positional args (tensors or plain values) and a label."""

    label: str
    args: tuple
    kwargs: dict = field(default_factory=dict)

    def to(self, dtype):
        """A copy with floating tensors in `dtype` (on the CPU; the runner moves them to the device)."""

        def move(a):
            if isinstance(a, torch.Tensor):
                return a.to(dtype=dtype if a.is_floating_point() else a.dtype).clone()
            return a

        return Case(self.label, tuple(move(a) for a in self.args), {k: move(v) for k, v in self.kwargs.items()})


@dataclass
class Call:
    """One call of the learner's function: CPU inputs, and the device the runner puts them on."""

    label: str
    args: tuple
    kwargs: dict
    device: str
    dtype: torch.dtype | None = None

    def inputs(self):
        """Fresh copies of the inputs as the learner's function saw them (meta tensors for device 'meta')."""

        def make(a):
            if isinstance(a, Seeded):
                return torch.Generator().manual_seed(a.seed)
            if isinstance(a, torch.Tensor):
                return torch.empty(a.shape, dtype=a.dtype, device="meta") if self.device == "meta" else a.clone()
            return a

        return tuple(make(a) for a in self.args), {k: make(v) for k, v in self.kwargs.items()}


@dataclass
class Check:
    """The hidden check of one graded cell: which function, how to call it, how to judge the results."""

    function: str
    plan: Callable  # (seed, device) -> [Call]
    judge: Callable  # (calls, records) -> None, raises AssertionError
    forbidden: dict = field(default_factory=dict)  # torch function name -> how the learner would write it


# --- Shipping calls to the runner and results back ----------------------------------------------------


def encode_calls(calls):
    """[Call] -> (JSON-able call specs, {name: numpy array}) for job.json and inputs.npz."""
    arrays = {}

    def spec(a, device):
        if isinstance(a, Seeded):
            return {"generator": a.seed}
        if isinstance(a, torch.Tensor):
            if device == "meta":
                return {"meta": {"shape": list(a.shape), "dtype": str(a.dtype).replace("torch.", "")}}
            name = f"a{len(arrays)}"
            arrays[name] = a.detach().cpu().numpy()
            return {"tensor": name}
        if a is None or isinstance(a, (bool, int, float, str)):
            return {"value": a}
        raise TypeError(f"cannot send a {type(a).__name__} to the sandbox")

    specs = [
        {"device": c.device, "args": [spec(a, c.device) for a in c.args], "kwargs": {k: spec(v, c.device) for k, v in c.kwargs.items()}}
        for c in calls
    ]
    return specs, arrays


@dataclass
class Returned:
    """A tensor the learner's function returned, as reported: metadata, and its values unless on meta."""

    dtype: str
    shape: tuple
    device: str
    values: torch.Tensor | None


class Unreadable(Exception):
    """What the runner reported does not decode; the grader treats the call as failed."""


def decode_value(enc, depth=0):
    """The inverse of runner.encode_value, for untrusted input: only .npy data, checked dtype and shape."""
    if not isinstance(enc, dict) or depth > 4:
        raise Unreadable("malformed output record")
    if "tensor" in enc:
        info = enc["tensor"]
        dtype, shape, device = str(info.get("dtype")), tuple(int(s) for s in info.get("shape", ())), str(info.get("device"))[:40]
        values = None
        if "npy" in info:
            if dtype not in ALLOWED_DTYPES:
                raise Unreadable(f"unexpected dtype {dtype!r}")
            array = np.load(io.BytesIO(base64.b64decode(info["npy"], validate=True)), allow_pickle=False)
            if tuple(array.shape) != shape:
                raise Unreadable("tensor data and shape disagree")
            values = torch.from_numpy(array.copy())
        return Returned(dtype, shape, device, values)
    if "tuple" in enc:
        return tuple(decode_value(v, depth + 1) for v in enc["tuple"])
    if "float" in enc:
        return float(enc["float"])
    if "value" in enc:
        return enc["value"]
    if "other" in enc:
        return f"<a {enc['other']}>"
    raise Unreadable("malformed output record")


def run_local(check: Check, fn, seed=None, device=None):
    """Plan, call and judge in this process (unit tests; in-kernel grading with plain nbgrader)."""
    seed = grading_seed() if seed is None else seed
    calls = check.plan(seed, device or grading_device())
    specs, arrays = encode_calls(calls)
    records = [runner.run_call(fn, spec, arrays, tuple(check.forbidden)) for spec in specs]
    check.judge(calls, records, function=getattr(fn, "__name__", check.function))


# --- Judging ------------------------------------------------------------------------------------------


def explain_error(name, error, label, error_hints):
    """A learner's exception, in words: not implemented, a recognised mistake, or the raw error."""
    if error.startswith("NotImplementedError"):
        return f"{name} is not implemented yet: replace `raise NotImplementedError()`."
    for fragment, hint in (error_hints or {}).items():
        if fragment in error:
            return f"{name} raised {error} on {label}.\nLikely mistake: {hint}"
    return f"{name} raised {error} on {label}."


def outcome(record, name, label, error_hints, forbidden):
    """The decoded outputs of one call, or AssertionError saying why there are none."""
    if not isinstance(record, dict):
        raise AssertionError(f"{name}: no result for {label}.")
    used = [forbidden.get(f, f) for f in record.get("forbidden") or [] if f in forbidden]
    if used:
        raise AssertionError(
            f"{name} calls {', '.join(used)}, the built-in this exercise asks you to write yourself: "
            "no points for it. Write it with basic tensor operations."
        )
    if not record.get("ok"):
        raise AssertionError(explain_error(name, str(record.get("error")), label, error_hints))
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
    return torch.allclose(a, b, equal_nan=True, **TOLERANCES[dtype])


def diagnose(call, got, mistakes, dtype):
    """Name the first known mistake whose output equals the learner's on this call, or None."""
    args, kwargs = call.inputs()
    for description, wrong_fn in mistakes.items():
        try:
            wrong = _as_tuple(wrong_fn(*args, **kwargs))
        except Exception:
            continue
        if all(
            isinstance(o, Returned) and o.values is not None and o.shape == tuple(w.shape) and _close(o.values.to(w.dtype), w, dtype)
            for o, w in zip(got, wrong)
        ):
            return description
    return None


def reference_plan(cases_fn):
    """A plan: every case in each dtype on the grading device, then the first case once on 'meta'."""

    def plan(seed, device):
        cases = cases_fn(seed)
        calls = [Call(f"{c.label}, {str(d).replace('torch.', '')}, device {device}", c.to(d).args, c.to(d).kwargs, device, d) for c in cases for d in DTYPES]
        for c in cases:
            meta = c.to(torch.float32)
            calls.append(Call(f"{c.label}, on device 'meta'", meta.args, meta.kwargs, "meta", torch.float32))
        return calls

    return plan


def reference_judge(reference, names, mistakes=None, error_hints=None, forbidden=None):
    """A judge comparing each output with `reference` on the same inputs (values, shape, dtype, device)."""
    mistakes, error_hints, forbidden = mistakes or {}, error_hints or {}, forbidden or {}

    def judge(calls, records, function="your function"):
        for call, record in zip(calls, records, strict=True):
            args, kwargs = call.inputs()
            expected = _as_tuple(reference(*args, **kwargs))
            if call.device == "meta":
                try:
                    got = outcome(record, function, call.label, error_hints, forbidden)
                except AssertionError as failure:
                    if "calls " in str(failure) or "not implemented" in str(failure):
                        raise
                    raise AssertionError(
                        f"{function} failed when its inputs are on another device ('meta'), on {call.label}: "
                        f"{record.get('error') if isinstance(record, dict) else ''}\nLikely mistake: a tensor created without device=... "
                        "(e.g. torch.ones(n, n) instead of torch.ones(n, n, device=x.device)) or a call to .item()."
                    ) from None
                for what, g, e in zip(names, got, expected):
                    if not isinstance(g, Returned) or not g.device.startswith("meta") or g.shape != tuple(e.shape):
                        raise AssertionError(
                            f"{what} of {function} on {call.label}: with inputs on device 'meta' the result should be a "
                            f"meta tensor of shape {tuple(e.shape)}; got {g if not isinstance(g, Returned) else f'a tensor on {g.device}, shape {g.shape}'}."
                        )
                continue
            got = outcome(record, function, call.label, error_hints, forbidden)
            if len(got) != len(expected):
                raise AssertionError(f"{function} should return {len(expected)} value(s) ({', '.join(names)}), got {len(got)}.")
            dtype = call.dtype
            for what, g, e in zip(names, got, expected):
                where = f"{what} of {function} on {call.label}"
                if not isinstance(g, Returned):
                    raise AssertionError(f"{where}: expected a tensor, got {type(g).__name__ if not isinstance(g, str) else g}.")
                if g.shape != tuple(e.shape):
                    raise AssertionError(f"{where}: shape {g.shape}, expected {tuple(e.shape)}.")
                if g.dtype != str(e.dtype).replace("torch.", ""):
                    raise AssertionError(f"{where}: dtype {g.dtype}, expected {e.dtype} (keep the input's dtype).")
                if g.device.split(":")[0] != call.device.split(":")[0]:
                    raise AssertionError(f"{where}: on device {g.device}, expected {call.device}.")
                if g.values is None or not _close(g.values, e, dtype):
                    mistake = diagnose(call, got, mistakes, dtype)
                    diff = float("inf") if g.values is None else (g.values - e).abs().nan_to_num(nan=float("inf")).max().item()
                    message = f"{where}: wrong values (largest difference {diff:.3g})."
                    if mistake:
                        message += f"\nLikely mistake: {mistake}."
                    raise AssertionError(message)

    return judge

"""Hidden grading checks: learners' functions against `solutions/` on inputs drawn at grading time.

A chapter's check module (e.g. `autograder.checks.ch02_qkv_attention`) exposes one `check_<name>(fn)`
per graded function. Each runs the learner's function on seeded random inputs of several shapes, in
float32 and float64, on the grading device, and once on the `meta` device; it raises AssertionError
with a diagnosis on the first disagreement.

Grading-time settings come from the environment, set by the grading CLI:
- COURSE_GRADING_SEED: integer seed for the inputs (the CLI draws a fresh one per run and prints it);
- COURSE_DEVICE: "cpu", "cuda", ... (default: cuda when available, else cpu).
"""

import os
from dataclasses import dataclass, field

import torch

from autograder import nbchecks

# Tolerances per dtype, for compositions of a few matmuls and a softmax on O(1) values.
# float32 keeps ~7 significant digits; summing a few dozen products loses about one more.
TOLERANCES = {
    torch.float32: dict(atol=1e-5, rtol=1e-4),
    torch.float64: dict(atol=1e-10, rtol=1e-8),
}
DTYPES = (torch.float32, torch.float64)


def grading_seed() -> int:
    return int(os.environ.get("COURSE_GRADING_SEED", "0"))


def grading_device() -> torch.device:
    name = os.environ.get("COURSE_DEVICE", "").strip()
    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def generator(salt: int) -> torch.Generator:
    """A CPU generator seeded from the grading seed; `salt` separates the checks of one notebook."""
    return torch.Generator().manual_seed(grading_seed() * 1000 + salt)


@dataclass
class Case:
    """One set of inputs for a graded function: positional args (tensors or plain values) and a label."""

    label: str
    args: tuple
    kwargs: dict = field(default_factory=dict)

    def to(self, device, dtype):
        """A copy on `device`, floating tensors in `dtype`; always fresh tensors, so in-place edits stay local."""

        def move(a):
            if isinstance(a, torch.Tensor):
                return a.to(device=device, dtype=dtype if a.is_floating_point() else a.dtype).clone()
            return a

        return Case(self.label, tuple(move(a) for a in self.args), {k: move(v) for k, v in self.kwargs.items()})


def _as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def _close(a, b, dtype):
    return torch.allclose(a, b, equal_nan=True, **TOLERANCES[dtype])


def run_learner(fn, case, error_hints):
    """Call the learner's fn on a case (through the notebooks' own `call`), naming the case on failure."""
    try:
        return nbchecks.call(fn, *case.args, error_hints=error_hints, **case.kwargs)
    except nbchecks.CheckFailed as failure:
        raise AssertionError(f"On {case.label}: {failure}") from None
    except Exception as exc:
        name = getattr(fn, "__name__", "your function")
        raise AssertionError(f"{name} raised {type(exc).__name__} on {case.label}: {exc}") from None


def diagnose(case, outputs, mistakes, dtype):
    """Name the first known mistake whose output equals the learner's on this case, or None."""
    for description, wrong_fn in mistakes.items():
        try:
            wrong = _as_tuple(wrong_fn(*case.args, **case.kwargs))
        except Exception:
            continue
        if all(
            isinstance(o, torch.Tensor) and o.shape == w.shape and _close(o.detach().to(w.dtype), w, dtype)
            for o, w in zip(outputs, wrong)
        ):
            return description
    return None


def compare_with_reference(fn, reference, cases, names, mistakes=None, error_hints=None):
    """Run fn and reference on every case, in each dtype, on the grading device and on meta.

    names: what each output is called, in order (e.g. ("output", "weights")).
    """
    mistakes = mistakes or {}
    error_hints = error_hints or {}
    device = grading_device()
    fn_name = getattr(fn, "__name__", "your function")
    for base in cases:
        for dtype in DTYPES:
            case = base.to(device, dtype)
            expected = _as_tuple(reference(*case.args, **case.kwargs))
            got = _as_tuple(run_learner(fn, base.to(device, dtype), error_hints))
            if len(got) != len(expected):
                raise AssertionError(f"{fn_name} should return {len(expected)} value(s) ({', '.join(names)}), got {len(got)}.")
            for what, g, e in zip(names, got, expected):
                where = f"{what} of {fn_name} on {case.label}, {str(dtype).replace('torch.', '')}, device {device}"
                if not isinstance(g, torch.Tensor):
                    raise AssertionError(f"{where}: expected a tensor, got {type(g).__name__}.")
                if g.shape != e.shape:
                    raise AssertionError(f"{where}: shape {tuple(g.shape)}, expected {tuple(e.shape)}.")
                if g.dtype != e.dtype:
                    raise AssertionError(f"{where}: dtype {g.dtype}, expected {e.dtype} (keep the input's dtype).")
                if g.device != e.device:
                    raise AssertionError(f"{where}: on device {g.device}, expected {e.device}.")
                if not _close(g.detach(), e, dtype):
                    mistake = diagnose(case, got, mistakes, dtype)
                    diff = (g.detach() - e).abs().nan_to_num(nan=float("inf")).max().item()
                    message = f"{where}: wrong values (largest difference {diff:.3g})."
                    if mistake:
                        message += f"\nLikely mistake: {mistake}."
                    raise AssertionError(message)
        check_on_meta(fn, reference, base, names)


def check_on_meta(fn, reference, case, names):
    """Run once on the meta device: code that creates tensors on the CPU next to its inputs fails here."""
    meta = case.to("meta", torch.float32)
    fn_name = getattr(fn, "__name__", "your function")
    expected = _as_tuple(reference(*meta.args, **meta.kwargs))
    try:
        got = _as_tuple(fn(*meta.args, **meta.kwargs))
    except Exception as exc:
        raise AssertionError(
            f"{fn_name} failed when its inputs are on another device ('meta'), on {case.label}: "
            f"{type(exc).__name__}: {exc}\nLikely mistake: a tensor created without device=... "
            "(e.g. torch.ones(n, n) instead of torch.ones(n, n, device=x.device)) or a call to .item()."
        ) from None
    for what, g, e in zip(names, got, expected):
        if not isinstance(g, torch.Tensor) or g.device.type != "meta" or g.shape != e.shape:
            raise AssertionError(
                f"{what} of {fn_name} on {case.label}: with inputs on device 'meta' the result should be a meta tensor "
                f"of shape {tuple(e.shape)}; got {type(g).__name__} on {getattr(g, 'device', '?')}."
            )

"""Runs one submission inside the grading sandbox: a standalone script, no imports from the course.

The grader copies this file into a read-only job folder with `job.json` and `inputs.npz`, and starts
`python -I runner.py /job` in the sandbox. The runner executes the learner's code cells in order, and for
each graded cell calls the learner's function on the grader's inputs ("probe") and reports what came out.
It never sees a reference answer, a tolerance or a hidden check: the grading process compares.

Everything the runner reports is one JSON object per line on its original standard output:
  {"event": "start", "cell": i}                          a cell begins (the grader's per-cell timer starts)
  {"event": "done", "cell": i, "ok": bool, "error": ..., "stdout": ..., "stderr": ...}
  {"event": "probe", "cell": i, "calls": [ {"ok", "error", "outputs", "mutated", "forbidden"} ... ]}
  {"event": "end"}
The learner's own prints are captured (capped) and the process's file descriptors 1 and 2 point to
/dev/null while learner code runs, so nothing the learner prints is mistaken for a report. A hostile
notebook can still find and write to the report channel; that is harmless by design: reports carry raw
outputs only, never a verdict, and the grader judges them against references it computes itself.

The grader also imports this module to run the same probes in-process (`run_call`), so the visible path
and the sandboxed path share one implementation.
"""

import base64
import io
import json
import os
import sys
import time
import traceback

STREAM_CAP = 8_000  # characters of a cell's stdout / stderr kept for the report


class CappedStream(io.TextIOBase):
    """A text stream that keeps the first `cap` characters and counts the rest."""

    def __init__(self, cap=STREAM_CAP):
        self.cap, self.parts, self.size, self.dropped = cap, [], 0, 0

    def writable(self):
        return True

    def write(self, text):
        text = str(text)
        room = self.cap - self.size
        if room > 0:
            self.parts.append(text[:room])
            self.size += min(len(text), room)
        self.dropped += max(0, len(text) - max(room, 0))
        return len(text)

    def getvalue(self):
        value = "".join(self.parts)
        return value + (f"\n... [{self.dropped} more characters not kept]" if self.dropped else "")


# --- Values in and out ------------------------------------------------------------------------------


def decode_arg(spec, arrays, device, namespace=None):
    """A call argument from its JSON spec: a tensor (from inputs.npz), a meta tensor, a generator, the call's
    device, a function of the notebook (by name), or a plain value."""
    import torch

    if "tensor" in spec:
        t = torch.from_numpy(arrays[spec["tensor"]].copy())
        return t.to(device) if device not in ("cpu", "meta") else t
    if "meta" in spec:
        return torch.empty(spec["meta"]["shape"], dtype=getattr(torch, spec["meta"]["dtype"]), device="meta")
    if "generator" in spec:
        return torch.Generator().manual_seed(int(spec["generator"]))
    if "device" in spec:
        return torch.device(device)
    if "dtype" in spec:
        return getattr(torch, spec["dtype"])
    if "function" in spec:
        fn = (namespace or {}).get(spec["function"])
        if not callable(fn):
            raise NameError(f"{spec['function']} is not defined (did its cell run without errors?)")
        return fn
    if "optimizer" in spec:
        return _PendingOptimizer(spec["optimizer"])  # built by bind_optimizers, once its model is built
    if "model" in spec:
        name = spec["model"]["class"]
        cls = (namespace or {}).get(name)
        if not callable(cls):
            raise NameError(f"{name} is not defined (did its cell run without errors?)")
        module, _ = _build_module(cls, spec["model"], arrays, device)
        return module
    return spec["value"]


OPTIMIZERS = ("SGD", "Adam", "AdamW")  # what an Optim argument may name (cases.Optim)


class _PendingOptimizer:
    def __init__(self, spec):
        self.spec = spec


def bind_optimizers(args, kwargs):
    """args, kwargs with each optimizer argument built: torch.optim.<name>(parameters of the model that is
    positional argument `model`, **settings) (see cases.Optim)."""
    import torch

    def build(a):
        if not isinstance(a, _PendingOptimizer):
            return a
        name, settings, index = a.spec["name"], dict(a.spec["settings"]), int(a.spec["model"])
        if name not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {name}")
        return getattr(torch.optim, name)(args[index].parameters(), **settings)

    return [build(a) for a in args], {k: build(v) for k, v in kwargs.items()}


def _state_after(out, call, args, kwargs):
    """(out, *parameters after the call, then model.training) for the Model arguments marked state_after
    (mode_after) (see cases.Model.with_state_after, the judge's side)."""
    specs = list(zip(call["args"], args)) + [(call["kwargs"][k], kwargs[k]) for k in call["kwargs"]]
    extra = []
    for spec, built in specs:
        if isinstance(spec, dict) and spec.get("model", {}).get("state_after"):
            params = dict(built.named_parameters())
            extra += [params[name].detach() if name in params else None for name in spec["model"]["state"]]
        if isinstance(spec, dict) and spec.get("model", {}).get("mode_after"):
            extra.append(bool(getattr(built, "training", None)))
    if not extra:
        return out
    return (*(out if isinstance(out, tuple) else (out,)), *extra)


def _transformed(value):
    """Is this tensor one that torch.func / vmap wraps (batched, or tracked by grad/jacrev): it has no storage
    of its own, so its values cannot be read outside the transform."""
    import torch

    functorch = getattr(torch._C, "_functorch", None)
    try:
        return bool(functorch is not None and functorch.is_functorch_wrapped_tensor(value))
    except Exception:
        return False


MAX_PARAMETERS = 512  # parameters of a built module whose shapes are reported (see encode_value)
MAX_ITEMS = 64  # items of a returned tuple that are reported (a training step returns its loss and every parameter)


def encode_value(value, depth=0):
    """What came out of a learner's function, as JSON: tensors as base64 .npy (never pickle). A tensor whose
    values cannot be read (a torch.func transform's wrapped tensor, or anything else that refuses) is
    reported with its dtype and shape and "unreadable" instead of values; encoding never raises."""
    import numpy as np
    import torch

    if depth > 3:
        return {"other": "nested too deeply"}
    if isinstance(value, torch.Tensor):
        try:
            info = {"dtype": str(value.dtype).replace("torch.", ""), "shape": list(value.shape), "device": str(value.device)}
        except Exception:
            return {"other": "tensor"}
        if _transformed(value):
            info["unreadable"] = "inside a torch transform"
            return {"tensor": info}
        if value.device.type != "meta" and value.numel() <= 1_000_000 and not value.is_complex():
            try:
                data = value.detach().to("cpu")
                if data.dtype in (torch.float16, torch.bfloat16):
                    data = data.float()
                buffer = io.BytesIO()
                np.save(buffer, data.numpy(), allow_pickle=False)
                info["npy"] = base64.b64encode(buffer.getvalue()).decode("ascii")
            except Exception as exc:
                info["unreadable"] = f"{type(exc).__name__}"[:100]
        return {"tensor": info}
    if isinstance(value, (tuple, list)):
        return {"tuple": [encode_value(v, depth + 1) for v in value[:MAX_ITEMS]]}
    if isinstance(value, dict):  # e.g. a dict of named steps (chapter 03's attention_steps)
        return {"dict": {str(k)[:100]: encode_value(v, depth + 1) for k, v in list(value.items())[:32]}}
    if isinstance(value, torch.device):  # e.g. a callee's device= argument
        return {"device": str(value)[:40]}
    if isinstance(value, torch.dtype):  # e.g. a callee's dtype= argument
        return {"dtype": str(value).replace("torch.", "")}
    if value is None or isinstance(value, (bool, int, float, str)):
        if isinstance(value, str):
            value = value[:200]
        if isinstance(value, float) and value != value:
            return {"float": "nan"}
        if isinstance(value, float) and value in (float("inf"), float("-inf")):
            return {"float": "inf" if value > 0 else "-inf"}
        return {"value": value}
    return {"other": type(value).__name__[:100]}


def moved_off_meta(func, args, kwargs):
    """On the meta pass: when func moves a 'meta' tensor to another device (x.cpu(), x.to("cpu"), x.to(other)),
    a tensor of zeros of its shape on that device (else None). The move itself cannot run on 'meta' (there are no
    values to copy), but it is not a mistake by itself (lengths.cpu().tolist() is fine on a GPU): where the moved
    tensor then meets the meta inputs, the device-mix observer sees it, as a GPU would fail there.
    (autograder/checks/visible.py keeps a copy for the visible checks, which run without this file.)"""
    import torch

    name = getattr(func, "__name__", "")
    if name not in ("cpu", "to") or not args or not isinstance(args[0], torch.Tensor) or args[0].device.type != "meta":
        return None
    target, dtype = (torch.device("cpu"), None) if name == "cpu" else (None, None)
    for value in list(args[1:]) + list((kwargs or {}).values()):
        if isinstance(value, torch.dtype):
            dtype = value
        elif isinstance(value, torch.Tensor):
            target, dtype = value.device, value.dtype
        elif isinstance(value, (str, torch.device)):
            try:
                target = torch.device(value)
            except (RuntimeError, TypeError):
                pass
    if target is None or target.type == "meta":
        return None
    return torch.zeros(args[0].shape, dtype=dtype or args[0].dtype, device=target)


class _NoObserver:
    """Stands in for an observer of the forbidden built-ins when a call asks for none (Call.observe=False)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _forbidden_modes(names, active=None, meta=False):
    """Two observers of the forbidden built-ins: a torch function mode (Python-level calls such as
    torch.softmax, F.scaled_dot_product_attention) and a dispatch mode (ATen ops such as aten._softmax,
    reached however the Python side was called). Both only record; the grader decides (the sandbox's guard
    has switched the built-ins themselves off). A use while one of the learner's callees runs (`active`, kept by
    the callee recorder) is the callee's, not the caller's: it is left out. meta=True: on the meta pass a move
    off 'meta' gives zeros on the target device (moved_off_meta)."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    def note(name):
        if name in names and name not in seen and not active:
            seen.append(name)

    class Tripwire(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            note(getattr(func, "__name__", ""))
            if meta:
                moved = moved_off_meta(func, args, kwargs)
                if moved is not None:
                    return moved
            return func(*args, **(kwargs or {}))

    mixed = []

    def devices(value, found):
        if isinstance(value, torch.Tensor):
            if value.dim() > 0:  # 0-dim CPU tensors mix with any device, as Python numbers do
                found.add(value.device.type)
        elif isinstance(value, (list, tuple)):
            for v in value:
                devices(v, found)
        elif isinstance(value, dict):
            for v in value.values():
                devices(v, found)
        return found

    class AtenTripwire(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = getattr(getattr(func, "overloadpacket", None), "__name__", "")
            note(name)
            # Some ops (matmul among them) silently combine a 'meta' tensor with a CPU one; on a GPU the same
            # code fails. Seen here, the mix is reported so the meta pass catches a tensor made without device=.
            found = devices(args, set()) | devices(kwargs or {}, set())
            if "meta" in found and len(found) > 1:
                where = f"{name} (in {active[-1]})" if active else name  # inside a callee: the callee's mistake
                if where not in mixed:
                    mixed.append(where)
            return func(*args, **(kwargs or {}))

    return Tripwire(), AtenTripwire(), seen, mixed


CALLEE_RECORDS = 32  # calls of a callee recorded per graded call


def _devices(args, kwargs):
    """The devices of the tensors among a call's arguments (never raises)."""
    import torch

    found = set()
    for a in list(args) + list(kwargs.values()):
        try:
            if isinstance(a, torch.Tensor):
                found.add(str(a.device))
        except Exception:
            continue
    return sorted(found)


def _any_transformed(value, depth=0):
    """Does a value (tensors, nested in tuples, lists, dicts) hold a tensor wrapped by a torch transform?"""
    import torch

    if depth > 3:
        return False
    if isinstance(value, torch.Tensor):
        return _transformed(value)
    if isinstance(value, (tuple, list)):
        return any(_any_transformed(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return any(_any_transformed(v, depth + 1) for v in value.values())
    return False


def _recording(fn, name, log, active=None):
    """fn, wrapped so that what each call was given and returned is reported (the grader then grades the
    caller against the reference composed with these results: no double penalty for a callee's mistake).

    The recorder never raises and never changes what fn does: it calls fn exactly as the caller did and
    returns (or re-raises) exactly what fn gave. Each entry of `log` is one of
      {"name", "args", "out"[, "mutated": True]}   a call: its inputs as given (encoded BEFORE the call),
                                                   its output, and whether fn changed an input in place;
      {"name", "raised", "devices"[, "args"]}      a call that raised;
      {"name", "unrecorded": why}                  a call that could not be recorded (e.g. inside
                                                   torch.func.vmap / grad / jacrev, whose wrapped tensors have
                                                   no readable values): the grader judges the caller on its
                                                   outputs alone for it.
    active: a list the recorder pushes `name` onto while fn runs (and pops after), so that the observers
    of forbidden built-ins can tell a callee's use from the caller's own."""
    import functools
    import inspect

    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        signature = None

    def given_of(args, kwargs):
        """(encoded inputs or None, snapshots for the in-place check), or (None, None, why) when not recordable."""
        import torch

        if _any_transformed(args) or _any_transformed(kwargs):
            return None, [], "called inside a torch transform (torch.func, vmap)"
        try:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            given = {k: encode_value(v) for k, v in bound.arguments.items()}
        except Exception:
            return None, [], "its arguments could not be read"
        snapshots = []
        for a in list(args) + list(kwargs.values()):
            if isinstance(a, torch.Tensor) and a.device.type != "meta" and a.numel() <= 1_000_000:
                snapshots.append((a, a.detach().clone()))
        return given, snapshots, None

    def recorder(*args, **kwargs):
        recording = len(log) < CALLEE_RECORDS
        given, snapshots, why = None, [], None
        if recording:
            try:
                given, snapshots, why = given_of(args, kwargs)
            except Exception:
                given, snapshots, why = None, [], "its arguments could not be read"
        if active is not None:
            active.append(name)
        try:
            out = fn(*args, **kwargs)
        except Exception as exc:
            if recording:
                try:
                    entry = {"name": name, "raised": f"{type(exc).__name__}: {str(exc)[:200]}", "devices": _devices(args, kwargs)}
                    if given is not None:
                        entry["args"] = given
                    log.append(entry)
                except Exception:
                    pass
            raise
        finally:
            if active is not None and active:
                active.pop()
        if recording:
            try:
                if given is None or _any_transformed(out):
                    log.append({"name": name, "unrecorded": why or "its result could not be read"})
                else:
                    entry = {"name": name, "args": given, "out": encode_built(out) if isinstance(fn, type) else encode_value(out)}
                    if any(not _unchanged(before, a) for a, before in snapshots):
                        entry["mutated"] = True
                    log.append(entry)
            except Exception:
                pass
        return out

    # A class (a module another exercise defines, built by a count): its constructor calls are recorded and what
    # they built is reported as its parameters' shapes (encode_value); its own attributes are not copied over.
    functools.update_wrapper(recorder, fn, updated=() if isinstance(fn, type) else functools.WRAPPER_UPDATES)
    return recorder


def encode_built(value):
    """What a recorded class callee built (a module a parameter count builds): its parameters' names and shapes,
    {"module": {"class", "parameters": [[name, shape], ...]}}; anything else as encode_value gives it."""
    import torch

    if not isinstance(value, torch.nn.Module):
        return encode_value(value)
    try:
        shapes = [[str(n)[:100], [int(d) for d in p.shape]] for n, p in list(value.named_parameters())[:MAX_PARAMETERS]]
    except Exception:
        return {"other": "module"}
    return {"module": {"class": type(value).__name__[:100], "parameters": shapes}}


def decode_reported(enc, device=None):
    """A value in encode_value's format (the grader's replay tables), as the learner's code would see it: tensors
    (on `device` when given), tuples, dicts, devices and plain values. Raises ValueError on anything else."""
    import numpy as np
    import torch

    if not isinstance(enc, dict):
        raise ValueError("not an encoded value")
    if "tensor" in enc:
        info = enc["tensor"]
        if "npy" not in info:
            raise ValueError("a tensor without values")
        array = np.load(io.BytesIO(base64.b64decode(info["npy"])), allow_pickle=False)
        tensor = torch.from_numpy(array.copy()).to(getattr(torch, str(info.get("dtype"))))
        return tensor.to(device) if device is not None else tensor
    if "tuple" in enc:
        return tuple(decode_reported(v, device) for v in enc["tuple"])
    if "dict" in enc:
        return {k: decode_reported(v, device) for k, v in enc["dict"].items()}
    if "device" in enc:
        return torch.device(enc["device"])
    if "float" in enc:
        return float(enc["float"])
    if "value" in enc:
        return enc["value"]
    raise ValueError("an encoded value of an unknown kind")


def _same_input(value, enc):
    """Is the argument `value` the one recorded as `enc` (a tensor: same shape, dtype and entries, NaNs equal)?"""
    import torch

    if isinstance(value, torch.Tensor):
        try:
            recorded = decode_reported(enc)
        except Exception:
            return False
        if not isinstance(recorded, torch.Tensor) or value.device.type == "meta" or tuple(value.shape) != tuple(recorded.shape):
            return False
        now = value.detach().to("cpu")
        if now.dtype != recorded.dtype:
            return False
        return bool(torch.equal(now, recorded) or (now.is_floating_point() and torch.allclose(now, recorded, rtol=1e-12, atol=0, equal_nan=True)))
    return encode_value(value) == enc


def _answering(fn, name, table):
    """fn, answering from the grader's table where the inputs are ones it lists (a replay round: the reference's
    results for the inputs the learner's caller gave this callee before) and calling fn itself elsewhere."""
    import functools
    import inspect
    import torch

    entries = [(e.get("args"), e.get("out")) for e in table if isinstance(e, dict) and e.get("name") == name and isinstance(e.get("args"), dict)]
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return fn

    @functools.wraps(fn)
    def stand_in(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
        except TypeError:
            return fn(*args, **kwargs)
        device = next((a.device for a in bound.arguments.values() if isinstance(a, torch.Tensor)), None)
        for given, out in entries:
            if set(given) == set(bound.arguments) and all(_same_input(bound.arguments[k], given[k]) for k in given):
                try:
                    return decode_reported(out, device)
                except Exception:
                    break
        return fn(*args, **kwargs)

    return stand_in


def _unchanged(before, tensor):
    """Is `tensor` (as it is now) still equal to its snapshot `before` (NaNs in the same places count as equal)?"""
    import torch

    now = tensor.detach()
    if now.shape != before.shape or now.dtype != before.dtype:
        return False
    return bool(torch.equal(now, before) or (before.is_floating_point() and torch.equal(now.isnan(), before.isnan())
                                             and torch.equal(now.nan_to_num(), before.nan_to_num())))


class seeded_dropout:
    """Within this context, F.dropout (what nn.Dropout calls) draws its masks on the CPU and moves them to the
    input's device: the grader's own dropout, the same in the sandbox and in the judge, on any device. The k-th
    call on a tensor of a given shape draws from a generator seeded by (seed, shape, k): a module compared in
    train() mode with the reference under the same seed gets the same masks wherever its structure is right
    (dropout on the same tensors, in the same order), and different ones where it drops the wrong tensor or
    reuses one mask; a sublayer replaced by its recorded result (a callee, see judge.compose) does not shift the
    masks of tensors of other shapes. Nothing here is the built-in dropout kernel, so it runs where the guard
    switches that off. seed None: F.dropout unchanged.
    active: the learner's callees running now (run_call's list). A draw made while a callee runs is keyed by that
    callee's name and counted apart, so a callee that drops other tensors (or more of them) than the reference
    leaves its caller's own masks as they are: composed with the callee's recorded result (judge.compose), the
    reference draws the caller's masks exactly as the learner's caller did (no double penalty in train() mode)."""

    def __init__(self, seed, active=None):
        self.seed, self.original, self.active = seed, None, active

    def __enter__(self):
        if self.seed is None:
            return self
        import torch
        import torch.nn.functional as F

        import zlib

        seed, drawn, active = int(self.seed), {}, self.active  # (scope, shape) -> how many masks were drawn there

        def dropout(input, p=0.5, training=True, inplace=False):
            if not training or p == 0:
                return input
            shape = tuple(input.shape)
            scope = active[-1] if active else None  # the callee running now, if any
            k = drawn[scope, shape] = drawn.get((scope, shape), -1) + 1
            key = seed
            for n in (*shape, len(shape), k, *((zlib.crc32(str(scope).encode()),) if scope else ())):
                key = (key * 1000003 + n) % (1 << 61)
            g = torch.Generator().manual_seed(key)
            keep = torch.rand(shape, generator=g, dtype=torch.float64) >= p  # (same shape as input), CPU
            out = input * keep.to(device=input.device, dtype=input.dtype) / (1 - p) if p < 1 else input * 0
            if inplace:
                return input.copy_(out)
            return out

        self.original = F.dropout
        F.dropout = dropout
        return self

    def __exit__(self, *exc):
        if self.original is not None:
            import torch.nn.functional as F

            F.dropout, self.original = self.original, None
        return False


def _build_module(cls, spec, arrays, device):
    """The learner's nn.Module, built with the grader's constructor arguments and weights."""
    import torch

    init = {k: decode_arg(a, arrays, "cpu") for k, a in spec["init"].items()}
    module = cls(**init)
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"{getattr(cls, '__name__', 'it')}(...) did not give an nn.Module (got {type(module).__name__})")
    expected = list(spec["state"])
    found = [name for name, _ in module.named_parameters()]
    if sorted(found) != sorted(expected):
        raise LookupError("parameter names differ: expected " + ", ".join(expected) + "; found " + (", ".join(found) or "no parameters"))
    dtype = getattr(torch, spec.get("dtype") or "float32")
    module.to(dtype)
    state = {name: decode_arg(a, arrays, "cpu") for name, a in spec["state"].items()}
    torch.nn.Module.load_state_dict(module, state, strict=False)
    kept = all(torch.equal(p.detach().cpu(), state[n].to(p.dtype)) for n, p in module.named_parameters() if n in state)
    module.to(device)
    module.train(bool(spec.get("train")))
    return module, kept


def gradients(args, grad_wrt, out, seed):
    """d(sum_j <out_j, R_j>)/d(args[i]) for the float outputs out_j and seeded random R_j (a gradient probe)."""
    import torch

    outs = [o for o in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(o, torch.Tensor) and o.is_floating_point()]
    leaves = [args[i] for i in grad_wrt]
    if not outs or not any(o.requires_grad for o in outs):
        return [None for _ in leaves]
    total = 0
    for j, o in enumerate(outs):
        r = torch.randn(tuple(o.shape), generator=torch.Generator().manual_seed(seed + j), dtype=torch.float64)
        total = total + (o * r.to(o.device, o.dtype)).sum()
    grads = torch.autograd.grad(total, leaves, allow_unused=True)
    return list(grads)


def _innermost_learner_function(exc):
    """The qualified name of the innermost function defined in a notebook cell in exc's traceback (or None):
    e.g. 'stable_softmax', or 'MultiHeadAttention.forward' for a method."""
    tb, name = exc.__traceback__, None
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename.startswith("<cell") or code.co_filename.startswith("<ipython") or "ipykernel" in code.co_filename:
            name = getattr(code, "co_qualname", code.co_name) if code.co_name != "<module>" else name
        tb = tb.tb_next
    return name


_ABSENT = object()  # a method a class inherits rather than defines (restored by deleting the patch)


def run_call(fn, call, arrays, forbidden=(), namespace=None, callees=()):
    """Call the learner's fn once as the grader planned it; report outputs, errors, input edits, forbidden
    calls, and (when asked) gradients, whether a module kept its weights, and what the learner's `callees`
    (other graded functions it calls) were given and returned.
    `call["variable"]` instead reads a variable of the notebook (a typed answer)."""
    import torch

    namespace = namespace if namespace is not None else getattr(fn, "__globals__", {})
    device = call.get("device", "cpu")
    record = {"ok": False, "error": None, "outputs": None, "mutated": False, "forbidden": []}
    if "variable" in call:
        name = call["variable"]
        try:
            if name not in namespace:
                raise NameError(f"{name} is not defined: assign it in the answer cell (e.g. {name} = [[...], ...])")
            value = namespace[name]
            if value is Ellipsis or value is None:
                raise ValueError(f"{name} is still empty: type your numbers")
            record["outputs"] = encode_value(torch.as_tensor(value if not isinstance(value, torch.Tensor) else value.detach().cpu(), dtype=torch.float64))
            record["ok"] = True
        except Exception as exc:
            record["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        return record
    grad_wrt = list(call.get("grad_wrt") or [])
    patched, log, methods = {}, [], []
    active = []  # the learner's callees running now (their forbidden built-ins are theirs, not the caller's)
    observe_fn, observe_aten, seen, mixed = _forbidden_modes(set(forbidden), active, meta=device == "meta")
    if call.get("observe") is False:  # a training run (Call.observe): the guard alone stands for the built-ins
        observe_fn = observe_aten = _NoObserver()
    start = time.perf_counter()
    try:
        args = [decode_arg(a, arrays, device, namespace) for a in call["args"]]
        kwargs = {k: decode_arg(a, arrays, device, namespace) for k, a in call["kwargs"].items()}
        args, kwargs = bind_optimizers(args, kwargs)
        for i in grad_wrt:
            args[i] = args[i].detach().clone().requires_grad_(True)
        before = [a.detach().clone() if isinstance(a, torch.Tensor) and a.device.type != "meta" else None for a in args]
        if not grad_wrt:
            for name in callees:
                if "." in name:  # a method of a notebook class, e.g. "FeedForward.forward" (a module's sublayer)
                    owner_name, attr = name.split(".", 1)
                    owner = namespace.get(owner_name)
                    original = getattr(owner, attr, None) if isinstance(owner, type) else None
                    if callable(original):
                        methods.append((owner, attr, owner.__dict__.get(attr, _ABSENT)))
                        answered = _answering(original, name, call["replay"]) if call.get("replay") else original
                        setattr(owner, attr, _recording(answered, name, log, active))
                elif callable(namespace.get(name)):
                    patched[name] = namespace[name]
                    answered = _answering(patched[name], name, call["replay"]) if call.get("replay") else patched[name]
                    namespace[name] = _recording(answered, name, log, active)
        target = fn
        if "module" in call:
            target, record["weights_kept"] = _build_module(fn, call["module"], arrays, device)
        with observe_fn, observe_aten, seeded_dropout(call.get("dropout_seed"), active):
            out = target(*args, **kwargs)
            grads = gradients(args, grad_wrt, out, int(call.get("grad_seed", 0))) if grad_wrt else None
        out = _state_after(out, call, args, kwargs)
        record["outputs"] = encode_value(out)
        if grads is not None:
            record["grads"] = [encode_value(g) for g in grads]
        record["ok"] = True
        record["mutated"] = any(b is not None and not torch.equal(b, a.detach()) for b, a in zip(before, args))
    except Exception as exc:  # the learner's error is data here; the grader explains it
        record["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
        record["error_in"] = _innermost_learner_function(exc)
    finally:
        namespace.update(patched)
        for owner, attr, own in reversed(methods):
            if own is _ABSENT:
                delattr(owner, attr)
            else:
                setattr(owner, attr, own)
    record["forbidden"] = list(seen)
    if mixed:
        record["device_mix"] = list(mixed)
    if log:
        record["callees"] = log
    record["seconds"] = round(time.perf_counter() - start, 4)
    return record


# --- The guard: forbidden built-ins switched off, out of the learner's reach -----------------------------

GUARD_PREFIX = "course-guard: "
# Dispatch keys that only wrap another kernel (they redispatch below themselves): the guard leaves them and
# replaces every kernel that computes.
_WRAPPER_KEYS = ("Autograd", "Tracer", "FuncTorch", "Functionalize", "ADInplaceOrView", "Autocast", "Python", "BackendSelect",
                 "Batched", "VmapMode", "PreDispatch", "Named", "Conjugate", "Negative", "ZeroTensor")
# Audit events refused once the guard is armed: reaching the grader's objects (gc), running a fresh interpreter
# without the guard (exec, spawn), raw memory (ctypes, /proc/<pid>/mem), tracing the grader's frames.
_REFUSED_EVENTS = ("gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys.settrace", "sys.setprofile",
                   "os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.startfile", "subprocess.Popen", "pty.spawn")


def _dispatch_keys(qualified):
    """The dispatch keys with a kernel of this operator that computes (not a wrapper), plus the usual backends."""
    import torch

    keys = {"CPU", "CUDA", "Meta"}
    for line in torch._C._dispatch_dump(qualified).splitlines():
        key = line.split(":", 1)[0].split("[", 1)[0].split(" (", 1)[0].strip()
        if key and " " not in key and key not in ("name", "schema", "debug", "alias analysis kind") and not key.startswith(_WRAPPER_KEYS):
            keys.add(key)
    return sorted(keys)


def _block_exec():
    """A seccomp filter in this process (and every process it forks): execve and execveat fail with EPERM, so no
    fresh interpreter without the guard can be started. Returns whether it holds (Linux x86-64, i386, arm64, arm)."""
    blocked = {
        0xC000003E: (59, 322, 0x40000000 | 520, 0x40000000 | 545),  # x86-64 (and its x32 numbers)
        0x40000003: (11, 358),  # i386
        0xC00000B7: (221, 281),  # arm64
        0x40000028: (11, 387),  # arm
    }
    LD_W_ABS, JEQ_K, RET_K = 0x20, 0x15, 0x06
    ALLOW, DENY = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    program = [(LD_W_ABS, 0, 0, 4)]  # the architecture
    blocks = []
    for arch, numbers in blocked.items():
        block = [(LD_W_ABS, 0, 0, 0)]  # the system call number
        block += [(JEQ_K, len(numbers) - i, 0, nr) for i, nr in enumerate(numbers)]
        block += [(RET_K, 0, 0, ALLOW), (RET_K, 0, 0, DENY)]
        blocks.append((arch, block))
    # One test per architecture, then ALLOW for an unknown one, then the blocks (jump offsets are relative).
    tests = len(blocks)
    offset = tests - 1 + 1  # past the remaining tests and the ALLOW
    for i, (arch, block) in enumerate(blocks):
        program.append((JEQ_K, offset - i, 0, arch))
        offset += len(block)
    program.append((RET_K, 0, 0, ALLOW))
    for _, block in blocks:
        program += block
    return _install_filter(program)


# The walls: system calls a notebook never needs that reach what other sandboxes share, refused in every graded
# notebook (with or without the guard): the kernel's keyrings (per user: one notebook's key would be the next one's),
# new namespaces and mounts (a way around the sandbox's own), and every foreign-ABI call (x32, 32-bit) that would
# reach the same under other numbers.
_WALLS = {  # machine: (audit arch, {name: number})
    "x86_64": (0xC000003E, {"add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272, "setns": 308,
                            "mount": 165, "umount2": 166, "pivot_root": 155, "clone": 56}),
    "aarch64": (0xC00000B7, {"add_key": 217, "request_key": 218, "keyctl": 219, "unshare": 97, "setns": 268,
                             "mount": 40, "umount2": 39, "pivot_root": 41, "clone": 220}),
}
_NEW_MOUNT_API = (428, 429, 430, 431, 432, 433, 442)  # open_tree, move_mount, fsopen, fsconfig, fsmount, fspick, mount_setattr
_CLONE3 = 435
_CLONE_NEW_FLAGS = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET


def _install_filter(program):
    """Install a seccomp filter (a list of (code, jt, jf, k) BPF instructions) in this process and every process it
    forks; False if the kernel refused it."""
    import ctypes
    import struct

    raw = b"".join(struct.pack("HBBI", *ins) for ins in program)
    buffer = ctypes.create_string_buffer(raw)

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = Program(len(program), ctypes.addressof(buffer))
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    return libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) == 0


def build_walls(machine):
    """The walls' BPF program for `machine` (platform.machine()), or None for a machine it does not know."""
    if machine not in _WALLS:
        return None
    arch, numbers = _WALLS[machine]
    LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
    ALLOW, EPERM, ENOSYS = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    refused = [n for name, n in numbers.items() if name != "clone"] + list(_NEW_MOUNT_API)
    # Instructions with symbolic targets, resolved below: ("deny" | "enosys" | "flags").
    body = [(LD_W_ABS, 0, 0, 4), (JEQ_K, 0, "deny", arch), (LD_W_ABS, 0, 0, 0)]
    if machine == "x86_64":
        body.append((JGE_K, "deny", 0, 0x40000000))  # the x32 ABI's numbers
    body += [(JEQ_K, "deny", 0, n) for n in refused]
    body += [(JEQ_K, "enosys", 0, _CLONE3), (JEQ_K, "flags", 0, numbers["clone"]), (RET_K, 0, 0, ALLOW)]
    labels = {"flags": len(body)}
    body += [(LD_W_ABS, 0, 0, 16), (JSET_K, "deny", 0, _CLONE_NEW_FLAGS), (RET_K, 0, 0, ALLOW)]
    labels["deny"], labels["enosys"] = len(body), len(body) + 1
    body += [(RET_K, 0, 0, EPERM), (RET_K, 0, 0, ENOSYS)]
    program = []
    for i, (code, jt, jf, k) in enumerate(body):
        jt = labels[jt] - i - 1 if isinstance(jt, str) else jt
        jf = labels[jf] - i - 1 if isinstance(jf, str) else jf
        program.append((code, jt, jf, k))
    return program


def install_walls():
    """Refuse the walls' system calls in this process and all it starts (before any learner code). Returns whether
    they hold (a machine the table does not know runs without them, and says so in its guard record)."""
    import platform

    program = build_walls(platform.machine())
    if program is None:
        return False
    try:
        return _install_filter(program)
    except Exception:
        return False


# torch's Python-level implementations of an op: where torch keeps them (its reference implementations, its
# decompositions and their tables, its higher-order operators' eager paths, its nn modules and distributions).
# Functions and classes there named after a switched-off op, and every function a table registers for one, are
# switched off in place with the kernels (see python_implementations).
IMPLEMENTATION_PACKAGES = ("torch._refs", "torch._decomp", "torch._prims", "torch._meta_registrations", "torch._higher_order_ops",
                           "torch.nn", "torch.ao.nn", "torch.distributions")
# Loaded before the walk where a switched-off name lives in a module `import torch` does not load.
_LAZY_MODULES = {"flex_attention": "torch.nn.attention.flex_attention", "flex_attention_backward": "torch.nn.attention.flex_attention"}
FINGERPRINT_MIN_BYTES = 44  # shorter code (an accessor, `raise NotImplementedError`) recurs in other libraries


def _functions_of(obj):
    """The Python functions behind a callable (its __wrapped__ chain; a class's methods and properties)."""
    import types

    found, seen = [], set()

    def add(f):
        while f is not None and id(f) not in seen:
            seen.add(id(f))
            if isinstance(f, (staticmethod, classmethod)):
                f = f.__func__
                continue
            if isinstance(f, property):
                for part in (f.fget, f.fset, f.fdel):
                    add(part)
                return
            if isinstance(f, types.FunctionType):
                found.append(f)
            try:  # read from the instance's own dict: getattr on torch's op objects would look an op up
                f = None if isinstance(f, type) else vars(f).get("__wrapped__")
            except TypeError:
                f = None

    if isinstance(obj, type):
        for value in vars(obj).values():
            add(value)
    else:
        add(obj)
    return found


def _code_names(code):
    """Every global or attribute name a code object (and the code nested in it) reads."""
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _code_names(const)
    return names


def _switched(obj, found):
    """Is every function of obj (a function with what it wraps, a class's methods) in `found`?"""
    functions = _functions_of(obj) if obj is not None else []
    return bool(functions) and all(f in found for f in functions)


def _readers_in_source(module, candidates):
    """{helper: the top-level functions and classes of the module whose code names it (None among them: module-level
    code does)}, read from the module's source (much faster than walking every code object of torch._refs)."""
    import re

    try:
        with open(module.__file__, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError, TypeError):
        return {}
    pattern = re.compile(r"\b(" + "|".join(sorted(map(re.escape, candidates))) + r")\b")
    top = re.compile(r"(?:async\s+)?(?:def|class)\s+(\w+)")
    closers = ("#", ")", "]", "}", '"' * 3, "'" * 3)
    users, current = {}, None
    for line in lines:
        if line and not line[0].isspace():
            found = top.match(line)
            if found:
                current = found.group(1)
            elif not line.startswith(closers):
                current = None  # module-level code (a decorator, an assignment) until the next def or class
        for name in pattern.findall(line.split("#", 1)[0]):
            users.setdefault(name, set()).add(current)
    return users


def python_implementations(names, idle_identity=(), routes=None):
    """{function: op name} of torch's Python-level implementations of the ops and classes `names`, found in torch itself:
    - every function a decomposition or meta table registers for one of the ops, unless the same function also
      serves an op that stays on (a shared helper: switching it off would switch that op off);
    - the eager kernels of a higher-order operator of that name (flex attention's);
    - a function or class of that name in IMPLEMENTATION_PACKAGES' modules (torch._refs.softmax, the decompositions'
      lstm_cell, nn.TransformerDecoderLayer and every method it defines, the quantizable LSTMCell), a function along
      with every function it wraps; for the ops in `idle_identity`, the public F.<name> stays (its kernel computes
      nothing when idle, and nn.Dropout in eval relies on that);
    - a module's private helpers (a leading underscore; in a higher-order operator's module, any helper: its eager
      math is a public function there) that only these functions of that module use.
    routes: a dict to fill with {function: how to find it again in another process with the same torch} (see
    implementation_routes)."""
    import sys
    import types

    import torch

    names = set(names)
    for name in names & set(_LAZY_MODULES):
        try:
            __import__(_LAZY_MODULES[name])
        except Exception:
            pass
    routes = {} if routes is None else routes

    def add(root, route, name):  # every function of `root` (its wrapped chain, a class's methods), with its route
        for i, f in enumerate(_functions_of(root)):
            if serves.get(id(f), set()) <= names and f not in found:
                found[f] = name
                routes[f] = route + (i,)

    serves = {}  # id(what a table holds) -> the op names it is registered for, across the tables
    registered = []
    tables = dict(getattr(torch._decomp, "global_decomposition_table", {}))
    for key, table in tables.items():
        for op, fn in list(table.items()):
            packet = getattr(op, "overloadpacket", None)
            op_name = packet.__name__ if packet is not None else getattr(op, "__name__", "")
            serves.setdefault(id(fn), set()).add(op_name)
            if op_name in names:
                registered.append((fn, op_name, ("table", key, str(op))))
    found = {}
    for fn, op_name, route in registered:
        if serves[id(fn)] <= names:
            add(fn, route, op_name)
    hop_modules = set()
    for name in names:
        hop = getattr(torch._ops, "_higher_order_ops", {}).get(name)
        if hop is None:
            continue
        hop_modules.add(type(hop).__module__)
        for table in ("py_kernels", "python_key_table"):
            for key, kernel in list((getattr(hop, table, None) or {}).items()):
                add(kernel, ("hop", name, table, repr(key)), name)
    F = torch.nn.functional
    modules = [m for n, m in list(sys.modules.items()) if m is not None and n.startswith(IMPLEMENTATION_PACKAGES)]
    for module in modules:
        space = getattr(module, "__dict__", {})
        for name in [n for n in names if n in space]:
            obj = space[name]
            if name in idle_identity and obj is getattr(F, name, None):
                continue
            if isinstance(obj, (type, types.FunctionType)) or "__wrapped__" in getattr(obj, "__dict__", {}):
                add(obj, ("module", module.__name__, name), name)
    # Private helpers only the switched-off functions of their module use (one pass: a helper of a helper too).
    by_module = {}
    for f, name in found.items():
        by_module.setdefault(f.__module__, []).append(f)
    for module_name, switched in by_module.items():
        module = sys.modules.get(module_name)
        if module is None or not getattr(module, "__file__", None):
            continue
        space = vars(module)
        candidates = {n for n, v in space.items() if isinstance(v, types.FunctionType) and v.__module__ == module_name
                      and (n.startswith("_") or module_name in hop_modules) and not n.startswith("__")}
        if not set().union(*(_code_names(f.__code__) for f in switched)) & candidates:
            continue  # no helper of this module to consider
        users = _readers_in_source(module, candidates)  # helper -> top-level names whose code reads it (None: module code)
        changed = True
        while changed:
            changed = False
            for helper, readers in users.items():
                obj, others = space[helper], readers - {helper}
                if obj in found or serves.get(id(obj), set()) - names or None in others or not others:
                    continue
                if all(_switched(space.get(r), found) for r in others):
                    found[obj] = next(found[f] for f in _functions_of(space[min(others)]) if f in found)
                    routes[obj] = ("module", module_name, helper, 0)
                    changed = True
    return found


def _qualified(f):
    return f"{f.__module__}.{f.__qualname__}"


def implementation_routes(names, idle_identity=()):
    """torch's Python-level implementations of `names` (python_implementations) as a list another process with the
    same torch can switch off without searching: [[op name, "module.qualname", *route]], where a route is how the
    function is reached from where torch keeps it (("table", table key, op), ("hop", op, table, key) or ("module",
    module, name)) and its place among that object's functions. Computed once per grading run by the grader and
    sent in the job (finding them takes most of arming's time); resolve_routes reads it in the sandbox."""
    routes = {}
    found = python_implementations(names, idle_identity, routes)
    return sorted([name, _qualified(f), *routes[f]] for f, name in found.items())


def _route_root(route):
    """The object a route starts from, in this process (None if it is not there)."""
    import sys

    import torch

    kind = route[0]
    if kind == "table":
        _, key, op_name = route
        op = torch.ops
        for part in op_name.split("."):
            op = getattr(op, part, None)
            if op is None:
                return None
        return getattr(torch._decomp, "global_decomposition_table", {}).get(key, {}).get(op)
    if kind == "hop":
        _, name, table, key = route
        hop = getattr(torch._ops, "_higher_order_ops", {}).get(name)
        kernels = getattr(hop, table, None) or {}
        return next((v for k, v in list(kernels.items()) if repr(k) == key), None)
    if kind == "module":
        _, module_name, name = route
        module = sys.modules.get(module_name)
        return None if module is None else vars(module).get(name)
    return None


def resolve_routes(entries):
    """{function: op name} from implementation_routes' list, in this process; None if any entry does not lead to a
    function of the recorded name (another torch, a module not loaded): the caller then searches in place."""
    names = {entry[0] for entry in entries}
    for name in names & set(_LAZY_MODULES):
        try:
            __import__(_LAZY_MODULES[name])
        except Exception:
            pass
    found, roots = {}, {}
    for entry in entries:
        name, qualified, route, index = entry[0], entry[1], tuple(entry[2:-1]), entry[-1]
        if route not in roots:
            root = _route_root(route)
            roots[route] = _functions_of(root) if root is not None else []
        functions = roots[route]
        if not isinstance(index, int) or not 0 <= index < len(functions) or _qualified(functions[index]) != qualified:
            return None
        found[functions[index]] = name
    return found


_MESSAGE_SLOT = "course-guard: (message)"


def _raising_code(freevars, message, cache={}):
    """A code object that raises `message`, with the free variables `freevars` (a function's __code__ can only be
    replaced by a code with the same ones). One compiled per set of free variables; the message is put in its
    constants (compiling one per function took a third of arming's time)."""
    if freevars not in cache:
        lines = ["def _outer():"] + [f"    {v} = None" for v in freevars] + ["    def _switched_off(*args, **kwargs):"]
        if freevars:
            lines.append(f"        ({', '.join(freevars)},)")
        lines += [f"        raise RuntimeError({_MESSAGE_SLOT!r})", "    return _switched_off"]
        space = {}
        exec("\n".join(lines), space)
        cache[freevars] = space["_outer"]().__code__
    template = cache[freevars]
    return template.replace(co_consts=tuple(message if c == _MESSAGE_SLOT else c for c in template.co_consts))


def _fingerprint(code):
    """What identifies a function's code whatever its name: its bytecode, then (what the audit hook also matches on
    alone, see arm_guard) the names and variables it uses, its argument counts and its constants."""
    consts = tuple(c.co_name if hasattr(c, "co_code") else c for c in code.co_consts)
    return (code.co_code, code.co_names, code.co_varnames, code.co_argcount, code.co_kwonlyargcount, consts)


def switch_off_implementations(found):
    """Replace the code of each function of `found` ({function: op name}) in place with code that raises, so every
    name, alias, table entry and wrapper that reaches the function object finds it off. Returns (what was switched
    off, as "module.qualname", sorted; the fingerprints of the replaced code, for the audit hook)."""
    done, fingerprints = [], set()
    for f, name in found.items():
        original = f.__code__
        message = (f"{GUARD_PREFIX}`{name}` is switched off while this notebook is graded (torch's own implementation "
                   f"{f.__module__}.{f.__qualname__} computes it; the exercise asks you to write it yourself)")
        try:
            f.__code__ = _raising_code(original.co_freevars, message)
        except (TypeError, ValueError):
            continue
        done.append(f"{f.__module__}.{f.__qualname__}")
        if len(original.co_code) >= FINGERPRINT_MIN_BYTES:
            fingerprints.add(_fingerprint(original))
    return sorted(set(done)), fingerprints


def arm_guard(names, block_exec=True, idle_identity=(), implementations=None):
    """Switch the built-ins `names` off in this interpreter for good, before any learner code runs.

    `names` is the whole list (the grader expands a check's forbidden names to their families with
    autograder/checks/builtins.py, switched_off, and sends the result in job.json: this file keeps no list).
    Observing a call from inside the learner's interpreter can be undone by learner code (through frames, gc,
    module globals, a forged report), so the guard does not observe: it replaces every kernel of each named
    ATen operator (every overload, every dispatch key that computes) with one that raises, each named
    Python-level function of F or torch (F.multi_head_attention_forward) with a stub that raises, and the forward
    of each named nn.Module class (nn.TransformerEncoderLayer) with one that raises. A learner's function that
    reaches one of them, by any name or route, raises; its outputs cannot be the built-in's. The ops in
    `idle_identity` (dropout's: input, p, train) return their input unchanged where they compute nothing
    (train False or p == 0), as the built-in itself does, so nn.Dropout in eval mode keeps working.
    torch's Python implementations of the same ops are switched off in place too: `implementations` is the list
    implementation_routes gives for `names` (the grader computes it once per run and sends it in the job, before
    any learner code exists); without it, or if it does not match this torch, they are searched for here.
    What would undo the guard is out of reach: the registrations are held only by an audit hook
    (no Python name refers to them; their finalizer is detached), and the hook refuses what could reach them or
    start an interpreter without them (gc's object walks, ctypes, tracing, exec and spawn, /proc/<pid>/mem);
    a seccomp filter refuses execve itself.
    Returns {"names": [...], "exec_blocked": bool}: what was switched off (for the report)."""
    import sys
    import warnings
    import weakref

    import torch
    import torch.nn.functional as F

    names = sorted(set(names))
    if not names:
        return {"names": [], "exec_blocked": False}

    def disabled(name):
        def kernel(*args, **kwargs):
            raise RuntimeError(f"{GUARD_PREFIX}`{name}` is switched off while this notebook is graded "
                               "(the exercise asks you to write it yourself)")

        kernel.__name__ = f"disabled_{name}"
        return kernel

    def disabled_unless_idle(name):
        def kernel(input, p, train, *args, **kwargs):
            if not train or p == 0:
                return input  # what the built-in returns when it drops nothing
            raise RuntimeError(f"{GUARD_PREFIX}`{name}` is switched off while this notebook is graded "
                               "(the exercise asks you to write it yourself)")

        kernel.__name__ = f"disabled_{name}"
        return kernel

    library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in names:
            packet = getattr(torch.ops.aten, name, None) if hasattr(torch._C, "_dispatch_dump") else None
            try:
                overloads = packet.overloads() if packet is not None else []
            except Exception:
                overloads = []
            for overload in overloads:
                qualified = f"aten::{name}" + ("" if overload == "default" else f".{overload}")
                for key in _dispatch_keys(qualified):
                    try:
                        stub = disabled_unless_idle(name) if name in idle_identity else disabled(name)
                        library.impl(name if overload == "default" else f"{name}.{overload}", stub, key)
                    except Exception:
                        pass  # e.g. a Meta kernel of a composite op: its parts are switched off
    # torch's Python copies of the same ops (its reference implementations, decompositions, nn modules' own code):
    # switched off in place, so every alias, table entry and wrapper that reaches one finds it off.
    found = resolve_routes(implementations) if implementations is not None else None
    if found is None:
        found = python_implementations(names, idle_identity)
    implementations, fingerprints = switch_off_implementations(found)
    for finalizer in list(getattr(weakref.finalize, "_registry", {})):
        info = weakref.finalize._registry.get(finalizer)
        if info is not None and info.weakref() is library:
            finalizer.detach()  # else calling every finalizer would remove the registrations
    exec_blocked = False
    if block_exec:
        try:
            exec_blocked = _block_exec()
        except Exception:
            exec_blocked = False

    refused, prefix = _REFUSED_EVENTS, GUARD_PREFIX
    keep = [library]  # the hook's closure is the only holder of the registrations

    fingerprints = frozenset(fingerprints)
    bytecodes = frozenset(f[0] for f in fingerprints)
    # The same source compiled by this interpreter can give other bytecode than torch's shipped .pyc (another 3.11
    # release chose LOAD_ATTR where this one chooses LOAD_METHOD): a function is matched on its names and variables.
    # Matched so only where the function uses some global or attribute names (a generated `nothing(*args)` would match).
    uses = frozenset(f[1:] for f in fingerprints if f[1])
    fingerprint = _fingerprint

    def codes(code, depth=0):  # a code object and the code nested in it (local: no module name reaches it)
        yield code
        if depth < 8:
            for const in code.co_consts:
                if hasattr(const, "co_code"):
                    yield from codes(const, depth + 1)

    def hook(event, args, keep=keep, uses=uses, bytecodes=bytecodes, codes=codes, fingerprint=fingerprint):
        if event.startswith("ctypes.") or event in refused:
            raise RuntimeError(f"{prefix}{event} is not allowed while a notebook is graded")
        if event == "open" and args and isinstance(args[0], (str, bytes)):
            path = args[0].decode(errors="replace") if isinstance(args[0], bytes) else args[0]
            if path.startswith("/proc/") and path.rstrip("/").endswith("/mem"):
                raise RuntimeError(f"{prefix}opening {path} is not allowed while a notebook is graded")
        if event == "import" and args and args[0] in ("ctypes", "_ctypes"):
            raise RuntimeError(f"{prefix}ctypes is not allowed while a notebook is graded")
        # torch's code revived: a function built from the code of a switched-off implementation (its compiled
        # file loaded again, its source compiled again), a module's code run again, a code object copied with
        # changes, the code set on another function. Matched on the code, not its name.
        revived = None
        if event in ("function.__new__", "exec") and args and hasattr(args[0], "co_code"):
            revived = next((c for c in codes(args[0]) if fingerprint(c)[1:] in uses), None)
        elif event == "code.__new__" and args and args[0] in bytecodes:
            revived = f"{args[2]} (a copy of its code)" if len(args) > 2 else "a copy of its code"
        elif event == "object.__setattr__" and len(args) > 2 and args[1] == "__code__" and hasattr(args[2], "co_code"):
            revived = next((c for c in codes(args[2]) if fingerprint(c)[1:] in uses), None)
        if revived is not None:
            what = getattr(revived, "co_qualname", revived)
            raise RuntimeError(f"{prefix}{event} rebuilds torch's own implementation of a switched-off built-in ({what}), "
                               "which is not allowed while a notebook is graded")

    sys.addaudithook(hook)
    del library, keep
    return {"names": names, "exec_blocked": exec_blocked, "implementations": implementations}


# --- The sandboxed run --------------------------------------------------------------------------------


def start_cuda(device):
    """Initialise CUDA on `device` and load what its first operations load (the context, the caching allocator,
    cuBLAS, the random generator), before the guard is armed: torch starts CUDA lazily, partly through ctypes,
    which the armed guard refuses, so a first CUDA call made after arming would fail in every notebook."""
    import torch

    torch.cuda.init()
    x = torch.randn(8, 8, device=device, dtype=torch.float64)
    y = torch.randn(8, 8, device=device, generator=torch.Generator(device=device).manual_seed(0))
    (x @ x).exp().sum().item()
    (y @ y.T).relu().mean().item()
    torch.cuda.synchronize(device)


def _strip_magics(source):
    """IPython magics and shell escapes are not Python; they are dropped when grading (plots are not graded)."""
    return "\n".join("pass  # (magic removed for grading)" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def main(job_dir):
    import numpy as np

    report_fd = os.dup(1)
    report = os.fdopen(report_fd, "w", buffering=1, encoding="utf-8")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)

    def send(obj):
        report.write(json.dumps(obj) + "\n")
        report.flush()

    with open(os.path.join(job_dir, "job.json"), encoding="utf-8") as f:
        job = json.load(f)
    arrays = dict(np.load(os.path.join(job_dir, "inputs.npz"), allow_pickle=False))
    import torch

    torch.set_num_threads(1)
    # CUDA starts lazily, partly through ctypes, which the guard refuses: start it before the guard is armed.
    for device in sorted({c.get("device", "cpu") for probe in job["probes"].values() for c in probe.get("calls", ())}):
        if device.startswith("cuda"):
            try:
                start_cuda(device)
            except Exception as exc:  # every call on it will fail and say why; the notebook's other calls still run
                send({"event": "cuda", "device": device, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
    # The walls and the exec block are seccomp filters (Linux); `check` runs without them (job["walls"] False).
    walls = install_walls() if job.get("walls", True) else False
    # What the guard switches off comes with the job (the grader expands each check's forbidden names).
    switch_off = sorted({name for probe in job["probes"].values() for name in probe.get("switch_off", ())})
    idle = sorted({name for probe in job["probes"].values() for name in probe.get("idle_identity", ())})
    armed = arm_guard(switch_off, block_exec=job.get("block_exec", True), idle_identity=idle, implementations=job.get("implementations"))
    send({"event": "guard", "names": armed["names"], "exec_blocked": armed["exec_blocked"], "walls": walls})
    namespace = {"__name__": "__main__", "display": print}
    real_stdout, real_stderr = sys.stdout, sys.stderr
    for cell in job["cells"]:
        index = cell["index"]
        send({"event": "start", "cell": index})
        out, err = CappedStream(), CappedStream()
        sys.stdout, sys.stderr = out, err
        record = {"event": "done", "cell": index, "ok": True, "error": None}
        try:
            if cell["kind"] == "probe":
                probe = job["probes"][cell["probe"]]
                fn = namespace.get(probe["function"]) if probe.get("function") else None
                if probe.get("function") and not callable(fn):
                    raise NameError(f"{probe['function']} is not defined (did its cell run without errors?)")
                calls = [run_call(fn, call, arrays, probe["forbidden"], namespace, probe.get("callees", ())) for call in probe["calls"]]
                sys.stdout, sys.stderr = real_stdout, real_stderr
                send({"event": "probe", "cell": index, "calls": calls})
            else:
                exec(compile(_strip_magics(cell["source"]), f"<cell {index}>", "exec"), namespace)
        except BaseException as exc:  # SystemExit and KeyboardInterrupt from learner code are errors too
            record["ok"] = False
            lines = traceback.format_exception_only(type(exc), exc)
            record["error"] = "".join(lines).strip()[:2000]
        finally:
            sys.stdout, sys.stderr = real_stdout, real_stderr
        record["stdout"], record["stderr"] = out.getvalue(), err.getvalue()
        send(record)
    send({"event": "end"})
    report.close()
    os._exit(0)  # skip interpreter teardown: learner objects' __del__ must not run after the report


if __name__ == "__main__":
    main(sys.argv[1])

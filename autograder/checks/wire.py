"""The wire format between the sandbox and the judge.

encode_calls turns a plan's Calls into job.json specs plus .npy arrays (what the sandboxed runner reads);
decode_value reads what the runner reported back (runner.encode_value's records), treating it as untrusted:
only .npy data, no pickle, checked dtypes and shapes. A reported tensor becomes a Returned (metadata, and its
values unless it was on 'meta'), a reported torch.device a ReportedDevice; describe says what a value is in a
learner's words.
"""

import base64
import io
from dataclasses import dataclass

import numpy as np
import torch

from autograder.checks.cases import ALLOWED_DTYPES, Dev, Fn, Model, Optim, Seeded


# --- Calls into the sandbox ----------------------------------------------------------------------------


def encode_calls(calls):
    """[Call] -> (JSON-able call specs, {name: numpy array}) for job.json and inputs.npz."""
    arrays = {}

    def spec(a, device):
        if isinstance(a, Seeded):
            return {"generator": a.seed}
        if isinstance(a, Dev):
            return {"device": True}
        if isinstance(a, Fn):
            return {"function": a.name}
        if isinstance(a, torch.dtype):
            return {"dtype": str(a).replace("torch.", "")}
        if isinstance(a, Optim):
            return {"optimizer": {"name": a.name, "settings": dict(a.settings), "model": int(a.model)}}
        if isinstance(a, Model):
            dtype = next((v.dtype for v in a.state.values() if v.is_floating_point()), torch.float32)
            return {"model": {"class": a.name, "init": {k: spec(v, "cpu") for k, v in a.init.items()},
                              "state": {k: spec(v, "cpu") for k, v in a.state.items()}, "train": bool(a.train),
                              "dtype": str(dtype).replace("torch.", ""), "state_after": bool(a.state_after),
                              "mode_after": bool(a.mode_after)}}
        if isinstance(a, torch.Tensor):
            if device == "meta":
                return {"meta": {"shape": list(a.shape), "dtype": str(a.dtype).replace("torch.", "")}}
            name = f"a{len(arrays)}"
            arrays[name] = a.detach().cpu().numpy()
            return {"tensor": name}
        if a is None or isinstance(a, (bool, int, float, str)):
            return {"value": a}
        raise TypeError(f"cannot send a {type(a).__name__} to the sandbox")

    specs = []
    for c in calls:
        if c.variable is not None:
            specs.append({"variable": c.variable, "device": "cpu", "args": [], "kwargs": {}})
            continue
        entry = {"device": c.device, "args": [spec(a, c.device) for a in c.args], "kwargs": {k: spec(v, c.device) for k, v in c.kwargs.items()}}
        if c.grad_wrt:
            entry["grad_wrt"], entry["grad_seed"] = list(c.grad_wrt), c.grad_seed
        if c.dropout_seed is not None:
            entry["dropout_seed"] = int(c.dropout_seed)
        if not c.observe:
            entry["observe"] = False
        if c.module is not None:
            entry["module"] = {
                "init": {k: spec(v, "cpu") for k, v in c.module["init"].items()},
                "state": {k: spec(v, "cpu") for k, v in c.module["state"].items()},
                "train": bool(c.module.get("train")),
                "dtype": str(c.module.get("dtype") or c.dtype or torch.float32).replace("torch.", ""),  # the layer's
            }
        specs.append(entry)
    return specs, arrays


# --- Reported values back out --------------------------------------------------------------------------


@dataclass
class Returned:
    """A tensor the learner's function returned, as reported: metadata, and its values unless on meta."""

    dtype: str
    shape: tuple
    device: str
    values: torch.Tensor | None
    unreadable: str = ""  # why the runner could not read the values (e.g. a tensor inside a torch transform)

    def __str__(self):
        return describe(self)


def describe(value) -> str:
    """A reported value in words for a learner ("a float32 tensor of shape (2, 3)"), never an internal repr."""
    if isinstance(value, Returned):
        where = "" if value.device.split(":")[0] in ("cpu", "meta") else f" on {value.device}"
        if value.values is not None and value.values.numel() == 1 and value.shape == ():
            return f"a {value.dtype} tensor of shape () holding {value.values.item()!r}{where}"
        return f"a {value.dtype} tensor of shape {value.shape}{where}"
    if isinstance(value, tuple):
        return f"a tuple of {len(value)}" if len(value) != 1 else "a tuple of 1"
    if isinstance(value, dict):
        return f"a dict with the keys {', '.join(map(str, value))}" if value else "an empty dict"
    if isinstance(value, str) and value.startswith("<a "):
        return f"a {value[3:-1]}"
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, (int, float)):
        return f"{value!r} (a {type(value).__name__})"
    return f"a {type(value).__name__}"


@dataclass(frozen=True)
class ReportedDevice:
    """A torch.device the runner reported (e.g. a callee's device= argument), by its name."""

    name: str

    def local(self) -> torch.device:
        """The device the grading process recomputes on: meta for meta, else the CPU."""
        return torch.device("meta" if self.name.startswith("meta") else "cpu")


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
        return Returned(dtype, shape, device, values, str(info.get("unreadable") or "")[:100])
    if "tuple" in enc:
        return tuple(decode_value(v, depth + 1) for v in enc["tuple"])
    if "dict" in enc and isinstance(enc["dict"], dict):
        return {str(k): decode_value(v, depth + 1) for k, v in enc["dict"].items()}
    if "float" in enc:
        return float(enc["float"])
    if "device" in enc and isinstance(enc["device"], str):
        return ReportedDevice(enc["device"][:40])
    if "dtype" in enc and isinstance(enc["dtype"], str):  # a callee's dtype= argument
        if enc["dtype"] not in ALLOWED_DTYPES:
            raise Unreadable(f"unexpected dtype {enc['dtype']!r}")
        return getattr(torch, enc["dtype"])
    if "value" in enc:
        return enc["value"]
    if "other" in enc:
        return f"<a {enc['other']}>"
    raise Unreadable("malformed output record")


def to_tensors(value):
    """A decoded value as tensors (meta tensors where only the shape was reported): how the judge hands a
    learner's recorded callee inputs and results to the reference."""
    if isinstance(value, tuple):
        return tuple(to_tensors(v) for v in value)
    if isinstance(value, dict):
        return {k: to_tensors(v) for k, v in value.items()}
    if isinstance(value, Returned):
        if value.values is not None:
            return value.values.to(getattr(torch, value.dtype)) if value.dtype in ALLOWED_DTYPES else value.values
        return torch.empty(value.shape, dtype=getattr(torch, value.dtype, torch.float32), device="meta")
    if isinstance(value, ReportedDevice):
        return value.local()
    return value

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


def decode_arg(spec, arrays, device):
    """A call argument from its JSON spec: a tensor (from inputs.npz), a meta tensor, a generator or a value."""
    import torch

    if "tensor" in spec:
        t = torch.from_numpy(arrays[spec["tensor"]].copy())
        return t.to(device) if device not in ("cpu", "meta") else t
    if "meta" in spec:
        return torch.empty(spec["meta"]["shape"], dtype=getattr(torch, spec["meta"]["dtype"]), device="meta")
    if "generator" in spec:
        return torch.Generator().manual_seed(int(spec["generator"]))
    return spec["value"]


def encode_value(value, depth=0):
    """What came out of a learner's function, as JSON: tensors as base64 .npy (never pickle)."""
    import numpy as np
    import torch

    if depth > 3:
        return {"other": "nested too deeply"}
    if isinstance(value, torch.Tensor):
        info = {"dtype": str(value.dtype).replace("torch.", ""), "shape": list(value.shape), "device": str(value.device)}
        if value.device.type != "meta" and value.numel() <= 1_000_000 and not value.is_complex():
            data = value.detach().to("cpu")
            if data.dtype in (torch.float16, torch.bfloat16):
                data = data.float()
            buffer = io.BytesIO()
            np.save(buffer, data.numpy(), allow_pickle=False)
            info["npy"] = base64.b64encode(buffer.getvalue()).decode("ascii")
        return {"tensor": info}
    if isinstance(value, (tuple, list)):
        return {"tuple": [encode_value(v, depth + 1) for v in value[:16]]}
    if value is None or isinstance(value, (bool, int, float, str)):
        if isinstance(value, str):
            value = value[:200]
        if isinstance(value, float) and value != value:
            return {"float": "nan"}
        if isinstance(value, float) and value in (float("inf"), float("-inf")):
            return {"float": "inf" if value > 0 else "-inf"}
        return {"value": value}
    return {"other": type(value).__name__[:100]}


def _forbidden_mode(names):
    """A torch function mode that records calls of the named torch functions (the forbidden built-ins)."""
    from torch.overrides import TorchFunctionMode

    class Tripwire(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", "")
            if name in names and name not in self.seen:
                self.seen.append(name)
            return func(*args, **(kwargs or {}))

    return Tripwire()


def run_call(fn, call, arrays, forbidden=()):
    """Call the learner's fn once as the grader planned it; report outputs, errors, input edits, forbidden calls."""
    import torch

    device = call.get("device", "cpu")
    args = [decode_arg(a, arrays, device) for a in call["args"]]
    kwargs = {k: decode_arg(a, arrays, device) for k, a in call["kwargs"].items()}
    before = [a.clone() if isinstance(a, torch.Tensor) and a.device.type != "meta" else None for a in args]
    record = {"ok": False, "error": None, "outputs": None, "mutated": False, "forbidden": []}
    tripwire = _forbidden_mode(set(forbidden))
    start = time.perf_counter()
    try:
        with tripwire:
            out = fn(*args, **kwargs)
        record["outputs"] = encode_value(out)
        record["ok"] = True
    except Exception as exc:  # the learner's error is data here; the grader explains it
        record["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
    record["forbidden"] = tripwire.seen
    record["mutated"] = any(b is not None and not torch.equal(b, a) for b, a in zip(before, args))
    record["seconds"] = round(time.perf_counter() - start, 4)
    return record


# --- The sandboxed run --------------------------------------------------------------------------------


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
                fn = namespace.get(probe["function"])
                if not callable(fn):
                    raise NameError(f"{probe['function']} is not defined (did its cell run without errors?)")
                calls = [run_call(fn, call, arrays, probe["forbidden"]) for call in probe["calls"]]
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

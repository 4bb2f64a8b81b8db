"""The sandbox's guard (autograder/checks/runner.py, arm_guard, given what autograder/checks/builtins.py expands a
forbidden set to): forbidden built-ins switched off inside the graded interpreter, out of the learner's reach, while
everything else a learner may use still works.

Each route is tried in a fresh Python process (the guard is for good: it cannot be undone in the process that
armed it). The same script run without the guard shows that every route does reach the built-in there, so a
route that stops working for another reason cannot pass as blocked.
"""

import json
import subprocess
import sys

import pytest

from autograder.checks import builtins, runner
from conftest import ROOT

# The groups the routes below reach; the guard gets their expansion, as write_job sends it in job.json.
FORBIDDEN = ["softmax", "scaled_dot_product_attention", "multi_head_attention_forward"]

# Each route: code that tries to get the value of a forbidden built-in (softmax, SDPA, nn.MultiheadAttention) on x.
ROUTES = {
    "by name": "torch.softmax(x, -1)",
    "method": "x.softmax(-1)",
    "out= overload": "torch._softmax(x, -1, False, out=torch.empty_like(x))",
    "log_softmax family": "torch.log_softmax(x, -1).exp()",
    "masked softmax kernel": "torch._masked_softmax(x, torch.zeros_like(x, dtype=torch.bool))",
    "sparse softmax": "torch.sparse.softmax(x.to_sparse(), -1).to_dense()",
    "nested tensor": "torch.nested.nested_tensor([x[0]]).softmax(-1)",
    "aten op by computed name": "getattr(torch.ops.aten, '_soft' + 'max').default(x, -1, False)",
    "namespace scan": "next(f for n, f in vars(F).items() if n.startswith('scaled_dot'))(x, x, x)",
    "SDPA CPU kernel": "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(x[None], x[None], x[None])[0]",
    "MultiheadAttention": "torch.nn.MultiheadAttention(4, 1, batch_first=True)(x, x, x)[0]",
    "under no_grad": "torch.no_grad()(lambda: torch.softmax(x, -1))()",
    "under inference_mode": "torch.inference_mode()(lambda: torch.softmax(x, -1))()",
    "under vmap": "torch.vmap(lambda r: r.softmax(-1))(x)",
    "meta tensors": "torch.softmax(torch.empty(2, 3, device='meta'), -1)",
    "all finalizers run first": "([f() for f in list(weakref.finalize._registry)], torch.softmax(x, -1))",
    "registrations found through gc": "([o for o in gc.get_objects() if isinstance(o, torch.library.Library)], torch.softmax(x, -1))",
    "registrations found through gc referrers": "(gc.get_referrers(torch.library.Library), torch.softmax(x, -1))",
    "fresh interpreter (subprocess)": "subprocess.run([sys.executable, '-c', 'import torch; print(torch.softmax(torch.ones(2), 0))'], capture_output=True, check=True).stdout",
    "fresh interpreter (os.execv in a child)": "exec_in_child()",
    "raw memory (ctypes)": "ctypes.string_at(id(x), 8)",
    "raw memory (/proc/self/mem)": "open('/proc/self/mem', 'rb')",
    "a forked child": "forked(lambda: torch.softmax(x, -1))",
}
# What a learner may still use: none of it may be refused.
ALLOWED = {
    "exp and sum": "(x.exp() / x.exp().sum(-1, keepdim=True))",
    "autograd": "torch.autograd.grad(x.requires_grad_().exp().sum(), x)[0]",
    "torch.func": "torch.func.vmap(torch.func.grad(lambda r: r.exp().sum()))(x.detach())",
    "namedtuple (uses sys._getframe)": "collections.namedtuple('Pair', 'a b')(1, 2)",
    "warnings": "warnings.warn('a learner warning')",
    "a forked child": "forked(lambda: x.exp().sum())",
    "nn.Linear": "torch.nn.Linear(4, 2)(x)",
    "gc.collect": "gc.collect()",
}

SCRIPT = r"""
import collections, gc, importlib, json, os, subprocess, sys, warnings, weakref
sys.path.insert(0, {autograder!r})
import torch
import torch.nn.functional as F
import runner
import ctypes
warnings.simplefilter("ignore")
torch.set_num_threads(1)  # as in the sandbox: a forked child must not wait for the parent's OpenMP threads
if {arm}:
    runner.arm_guard({switch_off!r}, idle_identity={idle!r})
x = torch.randn(2, 3, 4)


def in_child(fn):
    # What fn did in a forked child: "ok", its error, or "" when the child became another program (exec).
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            fn()
            os.write(write, b"ok")
        except BaseException as exc:
            os.write(write, str(exc).encode()[:200] or b"error")
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    return os.read(read, 300).decode()


def forked(fn):
    result = in_child(fn)
    if result != "ok":
        raise RuntimeError(result)


def exec_in_child():
    result = in_child(lambda: os.execv(sys.executable, [sys.executable, "-c", "pass"]))
    if result:  # the pipe closed on exec without a word: the child ran another program
        raise RuntimeError(result)


results = {{}}
for name, code in json.loads(sys.argv[1]).items():
    x = torch.randn(2, 3, 4)
    try:
        eval(code)
        results[name] = "ran"
    except BaseException as exc:
        results[name] = (type(exc).__name__ + ": " + str(exc)).splitlines()[0][:200]
print(json.dumps(results))
"""


def run(routes, arm):
    script = SCRIPT.format(autograder=str(ROOT / "autograder" / "checks"), arm=arm, switch_off=builtins.switched_off(FORBIDDEN),
                           idle=builtins.idle_identity(FORBIDDEN))
    result = subprocess.run([sys.executable, "-c", script, json.dumps(routes)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def guarded():
    # What must keep working first: some routes (running every finalizer) break torch for the rest of the process.
    return run({**{f"allowed: {k}": v for k, v in ALLOWED.items()}, **ROUTES}, arm=True)


@pytest.fixture(scope="module")
def unguarded():
    return run(ROUTES, arm=False)


@pytest.mark.parametrize("route", list(ROUTES))
def test_without_the_guard_the_route_reaches_the_built_in(unguarded, route):
    assert unguarded[route] == "ran", f"{route}: the control run (no guard) failed by itself: {unguarded[route]}"


@pytest.mark.parametrize("route", list(ROUTES))
def test_the_guard_blocks_the_route(guarded, route):
    outcome = guarded[route]
    assert outcome != "ran", f"{route}: reached a forbidden built-in through the guard"
    assert runner.GUARD_PREFIX in outcome or "Operation not permitted" in outcome, f"{route}: failed, but not by the guard: {outcome}"


@pytest.mark.parametrize("name", list(ALLOWED))
def test_the_guard_leaves_everything_else_working(guarded, name):
    assert guarded[f"allowed: {name}"] == "ran", f"{name} no longer works under the guard: {guarded[f'allowed: {name}']}"


def test_families_expand_to_every_kernel_that_computes_the_same():
    names = builtins.switched_off(["softmax"])
    assert {"_softmax", "_log_softmax", "_masked_softmax", "_sparse_softmax", "_safe_softmax"} <= set(names)
    assert "scaled_dot_product_attention" not in names
    assert builtins.switched_off([]) == []

"""The one list of forbidden built-ins (autograder/checks/builtins.py): its entries exist in this torch, each
chapter's FORBIDDEN and SHORTCUT_NAMES are compositions of its groups, and the sandbox's guard, given a group's
expansion, switches that group's routes off and leaves the other groups' routes working.

The guard's routes run in fresh Python processes (the guard is for good: it cannot be undone in the process that
armed it), once without the guard (every route must reach its built-in there) and once per group armed.
"""

import importlib
import json
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from autograder.checks import builtins, runner
from conftest import ROOT

# The groups each chapter composes: (FORBIDDEN's, SHORTCUT_NAMES's).
CHAPTERS = {
    "ch01_rnn_limits": (("recurrent",), ("recurrent",)),
    "ch02_qkv_attention": (("softmax", "attention", "multi_head_attention"),) * 2,
    "ch03_worked_examples": (("softmax", "attention", "multi_head_attention"),) * 2,
    "ch04_multi_head": (("softmax", "attention", "multi_head_attention"),) * 2,
    "ch05_masks": (("attention", "multi_head_attention", "causal_masks"), ("attention", "multi_head_attention", "causal_masks")),
}
GROUPS = list(builtins.GROUPS.values())


# --- The entries ------------------------------------------------------------------------------------


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: g.name)
def test_every_aten_op_of_the_group_exists_in_this_torch(group):
    for name in group.aten_ops:
        packet = getattr(torch.ops.aten, name, None)
        assert packet is not None and packet.overloads(), f"{group.name}: aten::{name} does not exist in torch {torch.__version__}"


def _torch_function_names():
    """The names a torch function mode sees: __name__ of torch's, F's and torch.special's functions, and
    Tensor's methods."""
    found = set(dir(torch.Tensor))
    for module in (torch, F, torch.special, torch.nn.modules.activation):
        for value in vars(module).values():
            if callable(value):
                found.add(getattr(value, "__name__", ""))
    return found


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: g.name)
def test_torch_names_and_python_names_exist(group):
    seen = _torch_function_names()
    missing = [n for n in group.torch_names if n not in seen]
    assert not missing, f"{group.name}: no torch function named {missing}"
    for name in group.python:  # each names something the guard finds in torch and switches off
        found = runner.python_implementations([name])
        assert found, f"{group.name}: the guard finds no torch function or class named {name}"
    for name in group.idle_identity:
        assert name in group.aten_ops, f"{group.name}: {name} passes its input through, but is not one of its ops"
    assert set(group.labels) <= set(group.names()) | set(group.python), f"{group.name}: labels for names it does not have"


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: g.name)
def test_static_names_derive_from_the_same_entries(group):
    entries = group.torch_names + group.python + group.modules
    assert set(group.static()) == set(entries) - set(group.not_static)
    assert set(group.not_static) <= set(entries), f"{group.name}: not_static names that are not its entries"
    assert builtins.shortcut_names(group.name) == group.static()
    forbidden = builtins.forbidden(group.name)
    assert set(forbidden) == set(group.names())
    assert all(forbidden[n] == group.labels.get(n, group.label) for n in forbidden)


def test_only_the_fused_encoder_layer_is_shared_and_it_identifies_no_group():
    owners = {}
    for group in GROUPS:
        for name in group.names():
            owners.setdefault(name, []).append(group.name)
    shared = {n: g for n, g in owners.items() if len(g) > 1}
    assert shared == {"_transformer_encoder_layer_fwd": ["multi_head_attention", "transformer_layers"]}
    assert builtins.groups_touched(["_transformer_encoder_layer_fwd"]) == []
    assert [g.name for g in builtins.groups_touched(["multi_head_attention_forward"])] == ["multi_head_attention"]


def test_unknown_group_is_an_error():
    with pytest.raises(KeyError, match="no group of built-ins named layernorm"):
        builtins.forbidden("layernorm")


def test_switched_off_expands_any_member_to_its_family():
    assert builtins.switched_off(["_log_softmax"]) == builtins.switched_off(["softmax"])
    assert "_scaled_dot_product_cudnn_attention" in builtins.switched_off(builtins.forbidden("attention"))
    assert set(builtins.switched_off(builtins.forbidden("layer_norm"))) >= {"layer_norm", "native_layer_norm", "native_group_norm", "native_batch_norm"}
    assert "TransformerEncoderLayer" in builtins.switched_off(["TransformerEncoderLayer"])
    assert builtins.idle_identity(["nll_loss"]) == [] and "dropout" in builtins.idle_identity(["dropout"])
    assert builtins.switched_off([]) == [] and builtins.switched_off(["relu"]) == []


# --- The chapters -----------------------------------------------------------------------------------


@pytest.mark.parametrize("module", list(CHAPTERS))
def test_a_chapter_composes_its_groups(module):
    checks = importlib.import_module(f"autograder.checks.{module}")
    forbidden_groups, static_groups = CHAPTERS[module]
    assert checks.FORBIDDEN == builtins.forbidden(*forbidden_groups)
    assert checks.SHORTCUT_NAMES == builtins.shortcut_names(*static_groups)
    for gid, check in checks.CHECKS.items():
        assert check.forbidden in ({}, checks.FORBIDDEN), f"{module}.{gid}: a forbidden set that is not the chapter's"


def test_chapters_agree_where_they_forbid_the_same_groups():
    """The copies used to differ (chapter 03 lacked _safe_softmax, _log_softmax, the cuDNN attention op)."""
    ch02, ch03, ch04 = (importlib.import_module(f"autograder.checks.{m}") for m in ("ch02_qkv_attention", "ch03_worked_examples", "ch04_multi_head"))
    assert ch02.FORBIDDEN == ch03.FORBIDDEN == ch04.FORBIDDEN
    assert {"_safe_softmax", "_log_softmax", "_scaled_dot_product_cudnn_attention", "_native_multi_head_attention"} <= set(ch03.FORBIDDEN)
    ch05 = importlib.import_module("autograder.checks.ch05_masks")
    assert "_native_multi_head_attention" in ch05.FORBIDDEN and "softmax" not in ch05.FORBIDDEN  # chapter 05 uses softmax


# --- The guard, per group ---------------------------------------------------------------------------

# Routes to each new group's built-in (chapters 06-09); each must run without the guard.
ROUTES = {
    "layer_norm": {
        "F.layer_norm": "F.layer_norm(x, (4,))",
        "nn.LayerNorm": "torch.nn.LayerNorm(4)(x)",
        "aten native_layer_norm": "torch.ops.aten.native_layer_norm(x, [4], None, None, 1e-5)[0]",
        "one-group group norm": "F.group_norm(x.reshape(6, 4), 1)",
        "instance norm over a row": "F.instance_norm(x.reshape(6, 1, 4))",
        "batch norm over the transposed rows": "F.batch_norm(x.reshape(6, 4).T, None, None, training=True)",
        "RMS norm of the centred input": "F.rms_norm(x - x.mean(-1, keepdim=True), (4,))",
    },
    "cross_entropy": {
        "F.cross_entropy": "F.cross_entropy(x[0], t)",
        "label smoothing": "F.cross_entropy(x[0], t, label_smoothing=0.1)",
        "nn.CrossEntropyLoss": "torch.nn.CrossEntropyLoss(label_smoothing=0.1)(x[0], t)",
    },
    "nll_loss": {
        "F.nll_loss": "F.nll_loss(x[0].log_softmax(-1), t)",
        "nn.NLLLoss": "torch.nn.NLLLoss()(x[0].log_softmax(-1), t)",
    },
    "transformer_layers": {
        "nn.TransformerEncoderLayer": "torch.nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0, batch_first=True)(x)",
        "a subclass": "type('Mine', (torch.nn.TransformerEncoderLayer,), {})(4, 2, 8, dropout=0.0, batch_first=True)(x)",
        "nn.TransformerDecoderLayer": "torch.nn.TransformerDecoderLayer(4, 2, 8, dropout=0.0, batch_first=True)(x, x)",
        "nn.TransformerEncoder": "torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(4, 2, 8, batch_first=True), 2, enable_nested_tensor=False)(x)",
        "nn.Transformer": "torch.nn.Transformer(4, 2, 1, 1, 8, dropout=0.0, batch_first=True)(x, x)",
        # The original forward kept from before the guard (as a reload of torch's module would give it back),
        # on its fast path (eval, no grad, even heads): the fused op itself is switched off.
        "fused op through a kept forward": "torch.no_grad()(lambda: KEPT['encoder'](torch.nn.TransformerEncoderLayer(4, 2, 8, batch_first=True).eval(), x))()",
    },
    "dropout": {
        "F.dropout": "F.dropout(x, 0.5, training=True)",
        "nn.Dropout": "torch.nn.Dropout(0.5)(x)",
        "Tensor in place": "F.dropout(x.clone(), 0.5, training=True, inplace=True)",
        "F.dropout1d": "F.dropout1d(x, 0.5, training=True)",
        "F.alpha_dropout": "F.alpha_dropout(x, 0.5, training=True)",
        "F.feature_alpha_dropout": "F.feature_alpha_dropout(x, 0.5, training=True)",
        "torch.native_dropout": "torch.native_dropout(x, 0.5, True)[0]",
        "p = 1": "F.dropout(x, 1.0, training=True)",
    },
}
# Routes that compose on another group's built-in: they stop when that group is switched off, by design.
BUILT_ON = {"transformer_layers": {"layer_norm", "dropout"}, "cross_entropy": {"nll_loss"}}
# Under the dropout group, what computes no dropout keeps working and returns its input unchanged.
IDLE = {
    "nn.Dropout in eval mode": "must(torch.equal(torch.nn.Dropout(0.5).eval()(x), x))",
    "F.dropout(training=False)": "must(torch.equal(F.dropout(x, 0.5, training=False), x))",
    "F.dropout with p = 0": "must(torch.equal(F.dropout(x, 0.0, training=True), x))",
    "F.dropout2d in eval": "must(torch.equal(F.dropout2d(x, 0.5, training=False), x))",
    "gradient through eval dropout": "must(torch.equal(torch.autograd.grad(F.dropout(x.requires_grad_(), 0.5, False).sum(), x)[0], torch.ones_like(x)))",
    "a module with nn.Dropout in eval mode": "torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.1)).eval()(x)",
}

SCRIPT = r"""
import json, sys, warnings
sys.path.insert(0, {checks!r})
import torch
import torch.nn.functional as F
import runner
warnings.simplefilter("ignore")
torch.set_num_threads(1)
KEPT = {{"encoder": torch.nn.TransformerEncoderLayer.forward}}
runner.arm_guard({switch_off!r}, block_exec=False, idle_identity={idle!r})


def must(cond):
    if not cond:
        raise AssertionError("a wrong value")


results = {{}}
for name, code in json.loads(sys.argv[1]).items():
    torch.manual_seed(0)
    x, t = torch.randn(2, 3, 4), torch.tensor([0, 1, 3])
    try:
        eval(code)
        results[name] = "ran"
    except BaseException as exc:
        results[name] = (type(exc).__name__ + ": " + str(exc)).splitlines()[0][:200]
print(json.dumps(results))
"""


def run(routes, forbidden):
    script = SCRIPT.format(checks=str(ROOT / "autograder" / "checks"), switch_off=builtins.switched_off(forbidden),
                           idle=builtins.idle_identity(forbidden))
    result = subprocess.run([sys.executable, "-c", script, json.dumps(routes)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


ALL_ROUTES = {f"{group}: {route}": code for group, routes in ROUTES.items() for route, code in routes.items()}
ARMED = [None, *ROUTES]


@pytest.fixture(scope="module")
def outcomes():
    """{armed group (None: no guard): {route: outcome}} (one fresh process each)."""
    found = {}
    for armed in ARMED:
        routes = {**ALL_ROUTES, **({f"idle: {k}": v for k, v in IDLE.items()} if armed == "dropout" else {})}
        found[armed] = run(routes, builtins.forbidden(armed) if armed else [])
    return found


@pytest.mark.parametrize("route", list(ALL_ROUTES))
def test_without_the_guard_every_route_reaches_its_built_in(outcomes, route):
    assert outcomes[None][route] == "ran", f"{route}: the control run (no guard) failed by itself: {outcomes[None][route]}"


@pytest.mark.parametrize("group,route", [(g, r) for g, routes in ROUTES.items() for r in routes])
def test_the_guard_switches_the_groups_routes_off(outcomes, group, route):
    outcome = outcomes[group][f"{group}: {route}"]
    assert outcome != "ran", f"{route}: reached the built-in through the guard of {group}"
    assert runner.GUARD_PREFIX in outcome, f"{route}: failed, but not by the guard: {outcome}"


@pytest.mark.parametrize("armed,group", [(a, g) for a in ROUTES for g in ROUTES if g != a and a not in BUILT_ON.get(g, ())])
def test_a_group_not_forbidden_leaves_its_routes_working(outcomes, armed, group):
    stopped = {r: o for r, o in outcomes[armed].items() if r.startswith(f"{group}: ") and o != "ran"}
    assert not stopped, f"switching off {armed} stopped {group}'s routes: {stopped}"


@pytest.mark.parametrize("name", list(IDLE))
def test_dropout_switched_off_still_passes_its_input_through_where_it_drops_nothing(outcomes, name):
    assert outcomes["dropout"][f"idle: {name}"] == "ran", f"{name}: {outcomes['dropout'][f'idle: {name}']}"


def test_the_first_chapters_leave_the_new_groups_working():
    """Chapter 02's guard (softmax, attention, multi-head attention) stops none of the later chapters' built-ins
    except those built on softmax (cross-entropy is log_softmax and nll_loss)."""
    forbidden = importlib.import_module("autograder.checks.ch02_qkv_attention").FORBIDDEN
    outcome = run({k: v for k, v in ALL_ROUTES.items() if k.startswith(("layer_norm", "dropout"))}, forbidden)
    assert all(o == "ran" for o in outcome.values()), outcome
    outcome = run({k: v for k, v in ALL_ROUTES.items() if k.startswith("cross_entropy")}, forbidden)
    assert all(runner.GUARD_PREFIX in o for o in outcome.values()), outcome


# --- torch's Python implementations of each group (issue 31) -----------------------------------------------


def _registered_in_source(ops):
    """{(module, function name)} that torch's source registers for one of `ops` (a decorator
    `@register_decomposition(aten.<op>...)` or `@register_meta(aten.<op>...)` above a def), read from the files
    themselves: a second way to find them, independent of the tables the guard walks."""
    import re
    from pathlib import Path

    root = Path(torch.__file__).parent
    found = set()
    for path in list((root / "_refs").rglob("*.py")) + list((root / "_decomp").glob("*.py")) + [root / "_meta_registrations.py"]:
        module = "torch." + ".".join(path.relative_to(root).with_suffix("").parts).replace(".__init__", "")
        decorators = None  # the text of the decorators above the next def (they may span lines)
        for line in path.read_text(encoding="utf-8").splitlines():
            stripped = line.strip()
            if stripped.startswith("@"):
                decorators = (decorators or "") + stripped
            elif stripped.startswith(("def ", "async def ")) and decorators is not None:
                # (register_fake and the like give shapes only, no values: not an implementation)
                if ("register_decomposition" in decorators or "register_meta" in decorators) and any(re.search(rf"aten\.{re.escape(op)}\b", decorators) for op in ops):
                    found.add((module, stripped.split("def ", 1)[1].split("(", 1)[0]))
                decorators = None
            elif decorators is not None and stripped:
                decorators += stripped  # a decorator's arguments on the next lines
    return found


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: g.name)
def test_every_implementation_torchs_source_registers_for_a_group_is_switched_off(group):
    """What each group switches off, and a check that fails when a torch upgrade adds an implementation of one of
    the group's ops that the guard's enumeration does not reach (found here from torch's source text)."""
    names = builtins.switched_off(builtins.forbidden(group.name))
    found = runner.python_implementations(names, builtins.idle_identity(builtins.forbidden(group.name)))
    reached = {(f.__module__, f.__name__) for f in found}
    registered = _registered_in_source(group.aten_ops)
    # Registered for an op of the group and for one that stays on (a shared helper): left on, by design.
    shared = {(m, n) for m, n in registered if (m, n) not in reached
              and any(op not in names for op in _ops_registered_to(m, n))}
    missing = registered - reached - shared
    assert not missing, f"{group.name}: torch registers implementations the guard does not switch off: {sorted(missing)}"
    if group.name in ("softmax", "layer_norm", "recurrent", "nll_loss", "dropout", "transformer_layers"):
        assert registered, f"{group.name}: the source scan found nothing (has torch moved its decompositions?)"


def _ops_registered_to(module, name):
    """The op names torch's tables register the function `module.name` for."""
    import sys

    target = getattr(sys.modules.get(module), name, None)
    ops = set()
    for table in torch._decomp.global_decomposition_table.values():
        for op, fn in table.items():
            if any(f is target or getattr(target, "__wrapped__", None) is f for f in runner._functions_of(fn)):
                packet = getattr(op, "overloadpacket", None)
                ops.add(packet.__name__ if packet is not None else str(op))
    return ops


def test_allowed_primitives_have_no_implementation_switched_off():
    """The judgement calls (each notebook's rules): logsumexp, var_mean and F.normalize are allowed everywhere."""
    every = builtins.switched_off(builtins.forbidden(*builtins.GROUPS))
    found = runner.python_implementations(every, builtins.idle_identity(builtins.forbidden(*builtins.GROUPS)))
    names = {f.__name__ for f in found}
    assert not names & {"logsumexp", "var_mean", "normalize", "dropout"} - {"dropout"}, sorted(names & {"logsumexp", "var_mean", "normalize"})
    assert F.dropout not in found, "F.dropout must stay on: nn.Dropout in eval calls it"
    assert builtins.switched_off(builtins.forbidden("softmax")) and "logsumexp" not in builtins.switched_off(builtins.forbidden(*builtins.GROUPS))


# --- The grader's list, sent in the job ---------------------------------------------------------------

ROUTES_SCRIPT = r"""
import json, sys, warnings
sys.path.insert(0, {checks!r})
warnings.simplefilter("ignore")
import torch
import runner
out = {{}}
for key, (names, idle, entries) in json.loads(sys.stdin.read()).items():
    given = runner.resolve_routes(entries)
    searched = runner.python_implementations(names, idle)
    out[key] = {{"given": None if given is None else sorted(runner._qualified(f) + " " + n for f, n in given.items()),
                "searched": sorted(runner._qualified(f) + " " + n for f, n in searched.items())}}
wrong = [list(e) for e in entries]
wrong[0][1] = wrong[0][1] + "_elsewhere"  # a list made for another torch
out["wrong"] = runner.resolve_routes(wrong) is None
print(json.dumps(out))
"""


def test_the_graders_list_switches_off_in_a_fresh_process_what_searching_there_finds():
    """The grading process (this one: it has imported the course, its checks and torch's extras) computes the
    implementations once per run (runner.implementation_routes) and sends them in the job; the sandbox's fresh
    interpreter resolves them (runner.resolve_routes) instead of searching. For every chapter's forbidden set, what
    it resolves is exactly what it would have found by searching; a list that does not match its torch is refused
    (the runner then searches)."""
    sets = {}
    for module in sorted((ROOT / "autograder" / "checks").glob("ch[0-9]*.py")):
        chapter = module.stem
        checks = importlib.import_module(f"autograder.checks.{chapter}")
        forbidden = dict(checks.FORBIDDEN)
        for extra in ("DROPOUT_FORBIDDEN",):
            forbidden.update(getattr(checks, extra, {}))
        names, idle = builtins.switched_off(forbidden), builtins.idle_identity(forbidden)
        if not names:
            continue
        sets[chapter] = (names, idle, runner.implementation_routes(names, idle))
    every = builtins.forbidden(*builtins.GROUPS)
    names, idle = builtins.switched_off(every), builtins.idle_identity(every)
    sets["every group"] = (names, idle, runner.implementation_routes(names, idle))
    script = ROUTES_SCRIPT.format(checks=str(ROOT / "autograder" / "checks"))
    result = subprocess.run([sys.executable, "-c", script], input=json.dumps(sets), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    for key in sets:
        assert out[key]["searched"], f"{key}: nothing found to switch off"
        assert out[key]["given"] == out[key]["searched"], f"{key}: the grader's list and the sandbox's search differ"
    assert out["wrong"], "a list whose names do not match this torch must be refused"

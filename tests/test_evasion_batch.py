"""Routes to torch's own implementation of a forbidden built-in earn nothing through the real CLI (issue 31).

tests/evasion_corpus.py holds the routes, at least three per category (torch's Python implementation by any name,
torch's code revived, a computed name in the solution cell) for every chapter with forbidden built-ins: single routes,
one notebook each (ROUTES: chapters 01, 03 and 05 have all three of each category there); and packed notebooks
(PACKS), each routing one or several exercises by different routes (chapters 02, 04, 07 and 09: one notebook per
chapter and category holding two more routes; chapter 08: the DecoderLayer's self-attention, one notebook per route). One module-scoped batch grades them through the real CLI: every
notebook warm (about a second each); a sample cold (COLD: one per category and a good-faith notebook; a fresh
interpreter and sandbox per notebook costs several seconds each, and the guard's arming code is the same in both
starts, only the process start differs). Each routed exercise earns nothing and the notebook's other exercises keep
their points, except the routes in OPEN_GAPS, which the guard does not block yet (a test pins that they still earn
points). Each route is shown to compute the built-in's values where no guard is armed (so it earned the points
before the guard switched torch's implementations off). Good-faith code that the static reading notes
(getattr(F, activation)) or not (getattr(self, f"norm{i}")) keeps full marks.
"""

import json
import subprocess
import sys

import nbformat
import pytest

from conftest import ROOT, course_env
from evasion_corpus import (CHAPTER_MODULES, GOOD_FAITH, OPEN_GAPS, PACKS, ROUTES, good_faith_notebook, pack_notebook, pack_source, route_notebook,
                            solution_source)

# --- Each route computes the built-in's values without the guard ------------------------------------------------

INPUTS = {  # the exercise's function -> code that sets `calls`: [(args, kwargs)], float64
    "lstm_cell_step": "calls = [((r(3, 4), r(3, 5), r(3, 5), r(4, 20), r(5, 20), r(20)), {}), ((r(4), r(5), r(5), r(4, 20), r(5, 20), r(20)), {})]",
    "stable_softmax": "calls = [((r(3, 5),), {}), ((r(4, 2, 3), 1), {})]",
    "attention_steps": "calls = [((r(2, 3, 4), r(2, 5, 4), r(2, 5, 6)), {}), ((r(3, 4), r(5, 4), r(5, 2), torch.rand(3, 5, generator=g) > 0.3), {})]",
    "SelfAttention": "calls = [((r(2, 5, 8), r(2, 5, 8), r(2, 3, 8), None), {}), ((r(1, 4, 8), r(1, 4, 8), r(1, 4, 8), torch.tril(torch.ones(4, 4))), {})]",
    "masked_attention": ("m = torch.rand(2, 1, 3, 5, generator=g) > 0.4\nm[0, 0, 1] = False\n"
                         "calls = [((r(2, 2, 3, 4), r(2, 2, 5, 4), r(2, 2, 5, 6), m), {}), ((r(2, 2, 3, 4), r(2, 2, 5, 4), r(2, 2, 5, 6), m), "
                         "{'fill_value': -1e9}), ((r(3, 4), r(5, 4), r(5, 2)), {})]"),
    "layer_norm": "calls = [((r(3, 6), r(6), r(6)), {}), ((r(2, 3, 5), None, None, 1e-3), {})]",
    "MultiHeadAttention": ("calls = [((r(2, 5, 8), r(2, 5, 8), r(2, 5, 8)), {}), ((r(1, 4, 8), r(1, 3, 8), r(1, 3, 8), "
                           "torch.rand(1, 1, 4, 3, generator=g) > 0.3), {})]"),
    "EncoderLayer": "ctor = (8, 2, 16)\ncalls = [((r(2, 5, 8),), {}), ((r(1, 4, 8), torch.ones(4, 4, dtype=torch.bool).tril()), {})]",
    "label_smoothed_cross_entropy": "calls = [((r(6, 5), torch.tensor([0, 4, -100, 2, 1, -100]), 0.1), {}), ((r(3, 7), torch.tensor([6, 0, 3]), 0.0), {})]",
    "scaled_dot_product_attention": "calls = [((r(2, 3, 4), r(2, 5, 4), r(2, 5, 6)), {}), ((r(3, 4), r(5, 4), r(5, 2), torch.rand(3, 5, generator=g) > 0.3), {})]",
    "self_attention": "calls = [((r(2, 5, 8), r(8, 4), r(8, 4), r(8, 3)), {}), ((r(4, 8), r(8, 4), r(8, 4), r(8, 3), torch.ones(4, 4, dtype=torch.bool).tril()), {})]",
    "causal_mask_with_offset": "calls = [((3, 2), {}), ((1, 0), {}), ((4, 5), {})]",
    "causal_mask": "calls = [((3,), {}), ((1,), {}), ((5,), {})]",
    "DecoderLayer": ("ctor = (8, 2, 16)\ncalls = [((r(2, 4, 8), r(2, 5, 8), torch.ones(4, 4, dtype=torch.bool).tril(), torch.ones(2, 1, 1, 5, dtype=torch.bool)), {}), "
                     "((r(1, 3, 8), r(1, 2, 8)), {})]"),
    "attention_step": "calls = [((r(1, 2, 2, 4), r(1, 2, 2, 4), r(1, 2, 2, 4), r(1, 2, 3, 4), r(1, 2, 3, 4)), {}), ((r(2, 1, 3, 4), r(2, 1, 3, 4), r(2, 1, 3, 4)), {})]",
}

PROOF = r"""
import importlib, json, sys, warnings
warnings.simplefilter("ignore")
import torch
torch.set_num_threads(1)
routes = json.loads(sys.stdin.read())
results = {}
for name, (module, function, helper, solution, inputs) in routes.items():
    reference = importlib.import_module("solutions." + module)
    space = dict(vars(reference))
    try:
        exec(helper, space)
        exec(solution, space)
        g = torch.Generator().manual_seed(0)
        r = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)
        local = {"r": r, "g": g, "torch": torch}
        exec(inputs, local)
        same = True
        for args, kwargs in local["calls"]:
            mine, ref = space[function], getattr(reference, function)
            if isinstance(mine, type):
                ctor = local.get("ctor", (8, 2))
                torch.manual_seed(0); mine = mine(*ctor).double().eval()
                torch.manual_seed(0); ref = ref(*ctor).double().eval()
            a, b = mine(*args, **kwargs), ref(*args, **kwargs)
            a, b = (list(a.values()), list(b.values())) if isinstance(a, dict) else (a, b)
            a, b = (list(a), list(b)) if isinstance(a, (tuple, list)) else ([a], [b])
            same = same and len(a) == len(b) and all(x.shape == y.shape and (torch.allclose(x, y, atol=1e-10, equal_nan=True) if x.is_floating_point() else torch.equal(x, y))
                                                       for x, y in zip(a, b))
        results[name] = "same" if same else "different values"
    except Exception as exc:
        results[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
print(json.dumps(results))
"""


def test_each_route_computes_the_builtins_values_without_the_guard():
    """The control: with no guard armed (today's code before issue 31's guard, or any plain interpreter), every
    route's function gives the reference's values, so each would earn its exercise's points."""
    from autograder.authoring import demo

    sent = {}
    for name, route in ROUTES.items():
        reference_cell = next(c for c in demo.filled_submission(route.chapter).cells
                              if c.metadata.get("nbgrader", {}).get("grade_id") == route.grade_id)
        sent[name] = (CHAPTER_MODULES[route.chapter], route.grade_id, route.helper, solution_source(route, reference_cell.source),
                      INPUTS[route.grade_id])
    for name, pack in PACKS.items():
        cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in demo.filled_submission(pack.chapter).cells}
        for grade_id in pack.routed:
            sent[f"{name}:{grade_id}"] = (CHAPTER_MODULES[pack.chapter], grade_id, pack.helper, pack_source(pack, grade_id, cells[grade_id]),
                                          INPUTS[grade_id])
    result = subprocess.run([sys.executable, "-c", PROOF], input=json.dumps(sent), capture_output=True, text=True, timeout=300,
                            cwd=ROOT, env=course_env())
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    wrong = {name: why for name, why in out.items() if why != "same"}
    assert not wrong, f"routes that do not compute the built-in's values without the guard: {wrong}"


# --- The batch: every route and the good-faith notebooks, through the CLI, warm and cold --------------------------


def _grade(root, workdir, **env):
    return subprocess.run([sys.executable, "-m", "autograder", "grade", str(root), "--workdir", str(workdir), "--device", "cpu",
                           "--seed", "7", "--workers", "2", "--cell-timeout", "20"],
                          cwd=ROOT, env=course_env(**env), capture_output=True, text=True, timeout=1200)


def _results(workdir):
    out = {}
    for path in (workdir / "results").glob("*/*.json"):
        out[path.parent.name] = json.loads(path.read_text())["result"]
    return out


# Graded cold too (a fresh sandbox and interpreter per notebook costs several seconds each; the whole corpus cold took
# over three minutes on 2 cores): one route per category and chapter 01's and 03's revived and computed ones, and one
# good-faith notebook.
COLD = ("ch02-one-hot-categorical", "ch07-native-layer-norm-from-pyc", "ch05-attrgetter-in-solution", "ch08-decoder-mha-forward-from-pyc",
        "ch08-decoder-norms-by-name", "ch01-quantizable-module-again", "ch03-builtins-getattr-softmin")
# A known limit of the judge, not of the guard: generate calls attention_step once per new token with the cache it
# returned, so when attention_step raises on its first call (switched off), the replay round's table knows only that
# first call, and generate cannot be run again with right results throughout; it loses its points, and its message
# names attention_step as the cause.
CALLER_LOSSES = {"09-complexity-kv-cache": {"generate_hidden": "This comes from your `attention_step`"}}


def _write(root, names):
    for student in names:
        if student in ROUTES:
            chapter, nb = ROUTES[student].chapter, route_notebook(ROUTES[student])
        elif student in PACKS:
            chapter, nb = PACKS[student].chapter, pack_notebook(PACKS[student])
        else:
            chapter, nb = GOOD_FAITH[student][0], good_faith_notebook(student)
        path = root / student / chapter / "exercises.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)


@pytest.fixture(scope="module")
def evasion_batch(tmp_path_factory):
    runs = {}
    for mode, names, env in (("warm", [*ROUTES, *PACKS, *GOOD_FAITH], {}), ("cold", COLD, {"COURSE_WARM": "off"})):
        root, workdir = tmp_path_factory.mktemp(f"evasion-{mode}-routes"), tmp_path_factory.mktemp(f"evasion-{mode}")
        _write(root, names)
        runs[mode] = (_grade(root, workdir, **env), _results(workdir), set(names))
    return runs


def _graded(evasion_batch, mode, name):
    _, results, names = evasion_batch[mode]
    assert name in names and name in results, f"{name} was not graded {mode}"
    return results[name]


MODES = ("warm", "cold")


@pytest.mark.parametrize("mode", MODES)
def test_the_batch_graded_every_notebook_in_its_mode(evasion_batch, mode):
    result, results, names = evasion_batch[mode]
    assert set(results) == names, f"missing: {names - set(results)}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    starts = {r["start"] for r in results.values()}
    assert starts == ({"warm"} if mode == "warm" else {"cold: COURSE_WARM=off"}), starts


@pytest.mark.parametrize("mode, route", [("warm", r) for r in ROUTES] + [("cold", r) for r in COLD if r in ROUTES])
def test_each_route_earns_nothing_and_the_rest_keeps_its_points(evasion_batch, mode, route):
    target = f"{ROUTES[route].grade_id}_hidden"
    cells = {c["grade_id"]: c for c in _graded(evasion_batch, mode, route)["cells"]}
    assert target in cells, f"{route}: no graded cell {target}: {sorted(cells)}"
    assert cells[target]["score"] == 0, f"{route} ({mode}): earned {cells[target]['score']}: {cells[target]['message'][:600]}"
    known = CALLER_LOSSES.get(ROUTES[route].chapter, {})
    kept = {gid: c["message"][:300] for gid, c in cells.items() if gid != target and c["score"] != c["max_score"] and gid not in known}
    assert not kept, f"{route} ({mode}): the notebook's other exercises lost points: {kept}"
    for gid, why in known.items():
        assert cells[gid]["score"] == cells[gid]["max_score"] or why in cells[gid]["message"], cells[gid]["message"][:600]


@pytest.mark.parametrize("mode, pack", [("warm", p) for p in PACKS] + [("cold", p) for p in COLD if p in PACKS])
def test_each_packed_route_earns_nothing_and_the_rest_keeps_its_points(evasion_batch, mode, pack):
    """A packed notebook routes several exercises, each by a different route: every one earns nothing."""
    routed = [f"{gid}_hidden" for gid in PACKS[pack].routed]
    cells = {c["grade_id"]: c for c in _graded(evasion_batch, mode, pack)["cells"]}
    missing = [gid for gid in routed if gid not in cells]
    assert not missing, f"{pack}: no graded cells {missing}: {sorted(cells)}"
    gaps = {f"{gid}_hidden" for gid in OPEN_GAPS.get(pack, {})}
    earned = {gid: (cells[gid]["score"], cells[gid]["message"][:600]) for gid in routed if cells[gid]["score"] != 0 and gid not in gaps}
    assert not earned, f"{pack} ({mode}): routed exercises earned points: {earned}"
    known = CALLER_LOSSES.get(PACKS[pack].chapter, {})
    kept = {gid: c["message"][:300] for gid, c in cells.items() if gid not in routed and c["score"] != c["max_score"] and gid not in known}
    assert not kept, f"{pack} ({mode}): the notebook's other exercises lost points: {kept}"
    for gid, why in known.items():
        assert cells[gid]["score"] == cells[gid]["max_score"] or why in cells[gid]["message"], cells[gid]["message"][:600]


@pytest.mark.parametrize("pack, grade_id", [(p, g) for p, gaps in OPEN_GAPS.items() for g in gaps])
def test_each_open_gap_is_still_open(evasion_batch, pack, grade_id):
    """A gap the corpus found and the guard does not close yet still earns its points: when the guard closes it, this
    fails, and the entry leaves OPEN_GAPS so that the route joins the ones that must earn nothing."""
    cells = {c["grade_id"]: c for c in _graded(evasion_batch, "warm", pack)["cells"]}
    cell = cells[f"{grade_id}_hidden"]
    assert cell["score"] == cell["max_score"], (f"{pack}: {grade_id} now earns {cell['score']}/{cell['max_score']} "
                                                f"({cell['message'][:300]}): the gap looks closed, remove it from OPEN_GAPS")


@pytest.mark.parametrize("mode, name", [("warm", n) for n in GOOD_FAITH] + [("cold", n) for n in COLD if n in GOOD_FAITH])
def test_good_faith_code_keeps_full_marks(evasion_batch, mode, name):
    cells = _graded(evasion_batch, mode, name)["cells"]
    lost = {c["grade_id"]: c["message"][:300] for c in cells if c["score"] != c["max_score"]}
    assert cells and not lost, f"{name} ({mode}): lost points: {lost}"


def test_a_computed_name_is_told_as_a_hint(evasion_batch):
    """The static note on computed access reaches the feedback as a hint: on a route it sits beside the guard's
    refusal; on good-faith code it costs nothing."""
    _, results, _ = evasion_batch["warm"]
    feedforward = next(c for c in results["ch07-feedforward-activation-by-name"]["cells"] if c["grade_id"] == "FeedForward_hidden")
    assert "no points lost" in feedforward["message"] and "getattr" in feedforward["message"], feedforward["message"]
    route = next(c for c in results["ch02-reduce-getattr"]["cells"] if c["grade_id"] == "stable_softmax_hidden")
    assert "no points lost" in route["message"] and "switched off" in route["message"], route["message"][:600]


def test_every_chapter_has_three_routes_per_category_that_must_earn_nothing():
    """The done-when of issue 31: at least three routes of each category per chapter with forbidden built-ins, each a
    different route (no two with the same code), not counting the routes OPEN_GAPS lists (those still earn points)."""
    routes = {}  # (chapter, category) -> {code of the route}
    for route in ROUTES.values():
        routes.setdefault((route.chapter, route.category), set()).add((route.grade_id, route.helper, route.solution, route.replace))
    for name, pack in PACKS.items():
        for grade_id in pack.routed:
            if grade_id not in OPEN_GAPS.get(name, {}):
                edits = tuple(e for e in pack.edits if e[0] == grade_id)
                routes.setdefault((pack.chapter, pack.category), set()).add((grade_id, pack.helper, edits))
    short = {f"{chapter} {category}": len(routes.get((chapter, category), ())) for chapter in CHAPTER_MODULES
             for category in ("implementation", "revived", "computed") if len(routes.get((chapter, category), ())) < 3}
    assert not short, f"chapters and categories with fewer than three routes that must earn nothing: {short}"

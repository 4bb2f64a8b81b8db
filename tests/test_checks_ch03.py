"""Chapter 03's own checker tests: typed answers graded within the stated tolerance (rounding paths, slips, a
step that follows from a wrong previous one), valid alternatives written here, multi_head_steps graded apart from
attention_steps, and a student notebook that never shows the typed answers.

What every chapter must keep (reference full marks, blank notebook, every catalogued wrong and valid answer,
hidden inputs that change with the seed, the notebooks): tests/chapter_contract.py; each hidden check's
catalogued mistakes named as themselves: tests/test_mistake_catalogues.py.

Tolerances: the typed answers are judged with YOUR_TURN_TOLERANCE (0.02, stated in the exercise); the rounding
paths below stay within 0.009 of the exact values and every catalogued slip is at least 0.04 away. Function
checks use the library's per-dtype tolerances.
"""

import inspect
import itertools
import json
import math
import re

import nbformat
import harness
import numpy as np
import pytest
import torch

from autograder import registry
from autograder.checks import ch03_worked_examples as checks
from autograder.checks import run_check
from solutions import ch02_qkv_attention as ch02
from solutions import ch03_worked_examples as ref

CHAPTER = "03-worked-examples"
M = harness.material(CHAPTER)
trials = registry.answers(CHAPTER)  # the chapter's test data: wrong answers, valid alternatives
EXACT = ref.your_turn_answers()
TOL = ref.YOUR_TURN_TOLERANCE
Q, K, V = ref.your_turn_qkv()


def answers(**override):
    """A notebook namespace with the reference answer cells run, then `override` assigned."""
    ns = {"torch": torch, "np": np}
    for cell in ref.ANSWER_CELLS.values():
        exec(cell, ns)
    ns.update(override)
    return ns


def typed_failure(name, ns):
    """The hidden check's message for answer `name`, or None when it passes."""
    try:
        run_check(CHAPTER, f"{name}_hidden", ns)
    except AssertionError as failure:
        return str(failure)
    return None


def learner(**sources):
    """A learner's functions: the filled-in notebook's namespace (the given stable_softmax, the reference), with
    these solution cells' sources ({grade id: code}) instead."""
    return harness.namespace_of(M, sources=sources)


# --- Exercises 1-2: typed answers ------------------------------------------------------------------------


def test_reference_answer_cells_are_the_exact_steps_rounded_to_two_decimals():
    ns = answers()
    for name in checks.STEPS:
        typed = torch.tensor(ns[name], dtype=torch.float64)
        assert torch.equal(typed, (EXACT[name] * 100).round() / 100), name
        assert typed_failure(name, ns) is None, name


@pytest.mark.parametrize(
    "form",
    [
        lambda t: t.tolist(),  # exact values
        lambda t: tuple(tuple(round(x, 3) for x in row) for row in t.tolist()),  # a tuple, three decimals
        lambda t: t.to(torch.float32),  # a tensor
        lambda t: np.round(t.numpy(), 4),  # a NumPy array, four decimals
        lambda t: [[float(f"{x:.2f}") for x in row] for row in t.tolist()],  # two decimals, as asked
    ],
    ids=["exact", "tuple-3-decimals", "tensor-float32", "numpy-4-decimals", "list-2-decimals"],
)
def test_valid_forms_of_typed_answers_pass(form):
    ns = answers(**{name: form(EXACT[name]) for name in checks.STEPS})
    for name in checks.STEPS:
        assert typed_failure(name, ns) is None, name


def rounding_paths():
    """Weights and output as a careful hand calculation gets them: e^x rounded to 1-3 decimals (with or
    without subtracting the row's maximum first), weights rounded to 2 or 3, the output from the rounded weights."""
    for exp_decimals, weight_decimals, shift in itertools.product((2, 3), (2, 3), (False, True)):
        x = EXACT["scaled"] - (EXACT["scaled"].amax(-1, keepdim=True) if shift else 0)
        e = (x.exp() * 10**exp_decimals).round() / 10**exp_decimals
        w = (e / e.sum(-1, keepdim=True) * 10**weight_decimals).round() / 10**weight_decimals
        yield (exp_decimals, weight_decimals, shift), w, ((w @ V) * 100).round() / 100


@pytest.mark.parametrize("path,weights,output", list(rounding_paths()))
def test_rounding_every_step_to_two_decimals_passes(path, weights, output):
    # solutions/ch03 states the bound: within 0.009 of the exact values, well inside the tolerance
    assert (weights - EXACT["weights"]).abs().max() <= 0.009 and (output - EXACT["output"]).abs().max() <= 0.009, path
    ns = answers(weights=weights.tolist(), output=output.tolist())
    assert typed_failure("weights", ns) is None and typed_failure("output", ns) is None


@pytest.mark.parametrize("name,description", [(n, d) for n in checks.STEPS for d in checks.TYPED_MISTAKES[n]])
def test_each_typical_slip_is_far_from_the_answer_and_named(name, description):
    previous = EXACT.get(checks.PREVIOUS.get(name))
    wrong = checks.TYPED_MISTAKES[name][description](previous, EXACT)
    if wrong.shape == EXACT[name].shape:
        assert (wrong - EXACT[name]).abs().max() >= 2 * TOL, f"{description}: too close to the answer to be told apart"
    typed = ((wrong * 100).round() / 100).tolist()  # as the learner types it
    message = typed_failure(name, answers(**{name: typed}))
    assert message is not None and description in message, message
    assert f"{EXACT[name].flatten()[0].item():.4f}" not in message  # never the right value


def test_a_step_that_follows_from_a_wrong_previous_step_earns_its_points():
    # forgot the scale, then computed everything else correctly from it (rounded to two decimals each time)
    wrong_scaled = EXACT["scores"]
    weights = (ch02.stable_softmax(wrong_scaled) * 100).round() / 100
    output = ((weights @ V) * 100).round() / 100
    ns = answers(scaled=wrong_scaled.tolist(), weights=weights.tolist(), output=output.tolist())
    assert "scale is missing" in typed_failure("scaled", ns)
    assert typed_failure("weights", ns) is None and typed_failure("output", ns) is None
    # the output computed from the unrounded wrong weights passes too
    ns["output"] = (ch02.stable_softmax(wrong_scaled) @ V).tolist()
    assert typed_failure("output", ns) is None


def test_a_wrong_step_that_follows_from_nothing_is_named_and_located():
    ns = answers(weights=[[0.55, 0.12, 0.36], [0.12, 0.33, 0.55]])  # one entry mistyped
    message = typed_failure("weights", ns)
    assert "1 of 6 entries" in message and "weights[0][2]" in message
    assert "0.33" not in message and "0.3315" not in message  # the right value is not given away
    # the weights follow from neither the exact nor the learner's scaled scores
    ns = answers(scaled=[[1.0, 0.25, 0.75], [0.0, 0.5, 0.75]], weights=[[0.1, 0.1, 0.8], [0.2, 0.3, 0.5]])
    assert "does not follow from your `scaled`" in typed_failure("weights", ns)


def test_missing_or_unreadable_answers_are_explained():
    ns = answers()
    del ns["scores"]
    assert "not defined" in typed_failure("scores", ns)
    assert typed_failure("scores", answers(scores=[[4, 1], [0, 2, 3]])) is not None
    assert "shape (2, 2)" in typed_failure("weights", answers(weights=[[0.5, 0.5], [0.5, 0.5]]))


# --- Exercise 3: attention_steps ----------------------------------------------------------------------------


SOURCE = inspect.getsource(ref.attention_steps)
MH_SOURCE = inspect.getsource(ref.multi_head_steps)


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize(
    "old,new",
    [
        ("q @ k.transpose(-2, -1)", "q @ k.mT"),
        ("q @ k.transpose(-2, -1)", "torch.einsum('...nd,...md->...nm', q, k)"),
        ("scaled = scores / math.sqrt(d_k)", "scaled = (q / math.sqrt(d_k)) @ k.transpose(-2, -1)"),
        ("scaled = scores / math.sqrt(d_k)", "scaled = scores * d_k ** -0.5"),
        ('scaled = scaled.masked_fill(~mask, float("-inf"))', 'scaled = torch.where(mask, scaled, float("-inf"))'),
    ],
    ids=["mT", "einsum", "scale-q-first", "power", "where"],
)
def test_attention_steps_accepts_valid_alternatives(old, new):
    assert old in SOURCE
    run_check(CHAPTER, "attention_steps_hidden", learner(attention_steps=SOURCE.replace(old, new))["attention_steps"])


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize(
    "result,message",
    [
        ('return scores, scaled, weights, output', "it returned a tuple of 4"),
        ('return {"scores": scores, "weights": weights, "output": output}', "it returned a dict without scaled"),
        ("return output", "it returned a single tensor"),
    ],
)
def test_attention_steps_must_return_a_dict_of_steps(result, message):
    source = SOURCE.replace('return {"scores": scores, "scaled": scaled, "weights": weights, "output": output}', result)
    with pytest.raises(AssertionError, match=message):
        run_check(CHAPTER, "attention_steps_hidden", learner(attention_steps=source)["attention_steps"])


def test_large_score_cases_have_one_hot_rows_and_overflow_a_naive_softmax():
    q, k, v = checks._attention_steps_cases(3)[-1].args
    steps = ref.attention_steps(q, k, v)
    assert steps["scaled"].max() > 709, "exp overflows in float64 only above 709"
    assert torch.equal(steps["weights"].max(-1).values, torch.ones(steps["weights"].shape[:-1], dtype=torch.float64))
    assert torch.isnan(checks.ATTENTION_STEPS_MISTAKES["no max subtracted in the softmax, so exp overflows for large scores (use stable_softmax)"](q, k, v)["weights"]).any()
    mh = ref.multi_head_steps(*checks._multi_head_cases(3)[-1].args)
    assert mh["scaled"].max() > 709 and torch.equal(mh["weights"].max(-1).values, torch.ones(mh["weights"].shape[:-1], dtype=torch.float64))


# --- Exercise 4: multi_head_steps ---------------------------------------------------------------------------


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize(
    "old,new",
    [
        ("scaled = scores / math.sqrt(d_k)", "scaled = scores"),
        ("stable_softmax(scaled, dim=-1)", "stable_softmax(scaled, dim=-2)"),
        ("scaled.masked_fill(~mask,", "scaled.masked_fill(mask,"),
        ("    weights = stable_softmax(scaled, dim=-1)  # (..., n, m)\n", "    weights = scaled.exp() / scaled.exp().sum(-1, keepdim=True)\n"),
    ],
    ids=["missing-scale", "softmax-dim", "inverted-mask", "naive-softmax"],
)
def test_multi_head_steps_is_graded_apart_from_a_wrong_attention_steps(old, new):
    ns = learner(attention_steps=SOURCE.replace(old, new))
    with pytest.raises(AssertionError):
        run_check(CHAPTER, "attention_steps_hidden", ns["attention_steps"])
    run_check(CHAPTER, "multi_head_steps_hidden", ns["multi_head_steps"])  # right, given what its callee returned


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize(
    "old,new",
    [
        ("(t.unflatten(-1, (n_heads, -1)).transpose(-3, -2) for t in (q, k, v))",
         "(t.view(*t.shape[:-1], n_heads, t.size(-1) // n_heads).permute(*range(t.dim() - 2), -2, -3, -1) for t in (q, k, v))"),
        ('concat = steps["output"].transpose(-3, -2).flatten(-2)', 'concat = torch.cat(steps["output"].unbind(-3), dim=-1)'),
        ('concat = steps["output"].transpose(-3, -2).flatten(-2)', 'concat = steps["output"].transpose(-3, -2).reshape(*x_q.shape[:-1], -1)'),
        ("(t.unflatten(-1, (n_heads, -1)).transpose(-3, -2) for t in (q, k, v))",
         "(torch.stack(t.chunk(n_heads, dim=-1), dim=-3) for t in (q, k, v))"),
    ],
    ids=["view-permute", "cat-unbind", "reshape", "stack-chunk"],
)
def test_multi_head_steps_accepts_valid_alternatives(old, new):
    assert old in MH_SOURCE
    run_check(CHAPTER, "multi_head_steps_hidden", learner(multi_head_steps=MH_SOURCE.replace(old, new))["multi_head_steps"])


# --- The notebook as a learner runs it: typed answers ----------------------------------------------------


@pytest.mark.parametrize(
    "sources",
    [
        {"scores": "scores = ((4, 1, 3), (0, 2, 3))", "weights": "weights = torch.tensor([[0.547, 0.122, 0.332], [0.122, 0.332, 0.547]])"},
        {"scaled": "import numpy as np\nscaled = np.array([[2, 0.5, 1.5], [0, 1, 1.5]])", "output": "output = [[1.878, 0.453], [1.668, 0.878]]"},
        {"weights": "weights = [[0.56, 0.11, 0.33], [0.11, 0.33, 0.56]]", "output": "output = [[1.89, 0.44], [1.67, 0.89]]"},
    ],
    ids=["tuple-and-tensor", "numpy-and-3-decimals", "coarse-rounding"],
)
def test_valid_typed_answers_pass_the_visible_checks(sources):
    failures = harness.run_notebook(harness.filled(M, sources=sources)).failures()
    assert not failures, failures
    ns = answers()
    for gid, source in sources.items():
        exec(source, ns)
    for gid in sources:
        assert typed_failure(gid, ns) is None, gid


def test_the_student_notebook_never_shows_the_typed_answers():
    text = registry.student_notebook(CHAPTER).read_text(encoding="utf-8")
    nb = nbformat.reads(text, as_version=4)
    code = "\n".join(c.source for c in nb.cells)
    for name, cell in ref.ANSWER_CELLS.items():
        for line in cell.splitlines():
            assert line.split("=")[-1].strip() not in text, f"{name}: {line!r} is in the student notebook"
    numbers = [(t, float(t)) for t in re.findall(r"\d+\.\d+", code)]
    for name in ("weights", "output"):  # the steps that need a calculator, at any precision the builder writes
        for x in EXACT[name].flatten().tolist():
            near = [t for t, value in numbers if len(t.split(".")[1]) >= 3 and abs(value - x) < 10 ** -len(t.split(".")[1]) / 2 + 1e-12]
            assert not near, f"{name}: {x:.4f} appears in the student notebook as {near}"
    assert json.loads(text)["cells"], "the notebook is empty"


def multi_head_steps_per_head(x_q, x_k, x_v, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """A learner's valid alternative that orders the arithmetic differently: one small projection per head
    (column blocks of W), einsum for the scores and the weighted sum, torch.cat for the concatenation."""
    d_k, d_v = w_q.size(1) // n_heads, w_v.size(1) // n_heads
    q, k, v = x_q @ w_q, x_k @ w_k, x_v @ w_v
    q_heads = torch.stack([x_q @ w_q[:, h * d_k:(h + 1) * d_k] for h in range(n_heads)], dim=-3)
    k_heads = torch.stack([x_k @ w_k[:, h * d_k:(h + 1) * d_k] for h in range(n_heads)], dim=-3)
    v_heads = torch.stack([x_v @ w_v[:, h * d_v:(h + 1) * d_v] for h in range(n_heads)], dim=-3)
    scores = torch.einsum("...nd,...md->...nm", q_heads, k_heads)
    scaled = scores / math.sqrt(d_k)
    if mask is not None:
        scaled = scaled.masked_fill(~mask, float("-inf"))
    weights = ch02.stable_softmax(scaled, dim=-1)
    heads = torch.einsum("...nm,...md->...nd", weights, v_heads)
    concat = torch.cat(heads.unbind(-3), dim=-1)
    output = concat if w_o is None else concat @ w_o
    return {"q": q, "k": k, "v": v, "q_heads": q_heads, "k_heads": k_heads, "v_heads": v_heads, "scores": scores,
            "scaled": scaled, "weights": weights, "heads": heads, "concat": concat, "output": output}


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 5, 8, 13, 21])
def test_multi_head_steps_accepts_another_order_of_the_arithmetic_on_any_seed(monkeypatch, seed):
    # Before float32 was checked at 1e-4/1e-3, this alternative came within 0.75 of the old tolerance.
    monkeypatch.setenv("COURSE_GRADING_SEED", str(seed))
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    run_check(CHAPTER, "multi_head_steps_hidden", multi_head_steps_per_head)


# --- Issue 15: fair grading of multi_head_steps beside its callee; typed answers' first line ------------------

STEPS_MISSING_SCALE = SOURCE.replace("scaled = scores / math.sqrt(d_k)", "scaled = scores")
PER_HEAD = MH_SOURCE.replace(trials._HEADS_CALL, trials._PER_HEAD_LOOP)
VMAP = MH_SOURCE.replace(trials._HEADS_CALL, trials._VMAP_HEADS)


def multi_head_failure(**sources):
    try:
        run_check(CHAPTER, "multi_head_steps_hidden", learner(**sources)["multi_head_steps"])
    except AssertionError as failure:
        return str(failure)
    return None


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize(
    "old,new",
    [
        ("else concat @ w_o", "else concat @ w_o.T"),
        ("attention_steps(q_heads, k_heads, v_heads, mask)", "attention_steps(q_heads, k_heads, v_heads)"),
        ('concat = steps["output"].transpose(-3, -2).flatten(-2)', 'concat = steps["output"].movedim(-3, -1).flatten(-2)'),
    ],
    ids=["w_o-transposed", "mask-dropped", "interleaved-merge"],
)
def test_a_wrong_multi_head_steps_never_blames_the_reference_attention_steps(old, new):
    # attention_steps returns a dict: before, it never compared equal to itself, and every failing multi_head_steps
    # was told "Your `attention_steps` returns wrong results here ... fix it first" (issue 15, false blame).
    message = multi_head_failure(multi_head_steps=MH_SOURCE.replace(old, new))
    assert message is not None, "a wrong multi_head_steps earned its points"
    assert "attention_steps" not in message.split("Likely mistake")[0].split("\n", 1)[-1], message
    assert "Your `attention_steps`" not in message and "fix it first" not in message, message


@pytest.mark.usefixtures("grading_env")
def test_a_wrong_attention_steps_is_named_when_it_is_the_cause():
    # the same wrong caller, now with a wrong callee called in the reference's pattern: the callee is named
    message = multi_head_failure(attention_steps=STEPS_MISSING_SCALE, multi_head_steps=MH_SOURCE.replace("else concat @ w_o", "else concat @ w_o.T"))
    assert message is not None and "attention_steps" in message, message


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize("pattern", ["per-head loop", "keyword call", "own einsum"])
def test_a_correct_multi_head_steps_keeps_its_points_beside_a_wrong_attention_steps_in_any_call_pattern(pattern):
    # The notebook: "a mistake there ... costs points in exercise 3 only, whether you call it once for all heads as
    # step 3 says, once per head in a loop, or not at all".
    caller = {"per-head loop": PER_HEAD, "keyword call": MH_SOURCE.replace(trials._HEADS_CALL, trials._KEYWORD_CALL),
              "own einsum": MH_SOURCE.replace(trials._HEADS_CALL, trials._OWN_STEPS)}[pattern]
    assert caller != MH_SOURCE
    ns = learner(attention_steps=STEPS_MISSING_SCALE, multi_head_steps=caller)
    with pytest.raises(AssertionError, match="missing scale"):
        run_check(CHAPTER, "attention_steps_hidden", ns["attention_steps"])
    run_check(CHAPTER, "multi_head_steps_hidden", ns["multi_head_steps"])
    # and the same caller with its own mistake loses its points beside a right callee
    wrong = caller.replace("else concat @ w_o", "else concat @ w_o.T")
    assert "W_O used transposed" in multi_head_failure(multi_head_steps=wrong)


# Fixed by the replay rounds (the caller is run again with the reference's attention_steps results): it
# kept its points before.
@pytest.mark.usefixtures("grading_env")
def test_a_wrong_per_head_caller_beside_a_wrong_attention_steps_still_loses_its_points():
    wrong = PER_HEAD.replace("else concat @ w_o", "else concat @ w_o.T")
    assert multi_head_failure(attention_steps=STEPS_MISSING_SCALE, multi_head_steps=wrong) is not None


@pytest.mark.usefixtures("grading_env")
def test_a_raising_attention_steps_costs_multi_head_steps_nothing():
    ns = learner(attention_steps=SOURCE.replace("scores = q @ k.transpose(-2, -1)", "scores = q @ k.T"))
    with pytest.raises(AssertionError, match="k.T and k.t"):
        run_check(CHAPTER, "attention_steps_hidden", ns["attention_steps"])
    run_check(CHAPTER, "multi_head_steps_hidden", ns["multi_head_steps"])


@pytest.mark.usefixtures("grading_env")
def test_the_notebook_text_on_torch_func_transforms_matches_the_grading():
    # A correct caller around torch.func.vmap keeps full marks with a right callee; with a wrong one the grader
    # cannot see the callee's values, and the notebook says it then costs points here too. If the library learns
    # to grade it apart, this fails: then drop the exception from the notebook's text of exercise 4.
    assert multi_head_failure(multi_head_steps=VMAP) is None
    assert multi_head_failure(attention_steps=STEPS_MISSING_SCALE, multi_head_steps=VMAP) is not None
    text = registry.student_notebook(CHAPTER).read_text(encoding="utf-8")
    assert "torch.func.vmap" in text and "costs points here too" in text


@pytest.mark.usefixtures("grading_env")
def test_rows_with_no_allowed_key_may_be_nan_or_zeros_and_a_finite_fill_is_still_wrong():
    zeros = SOURCE.replace("    output = weights @ v  # (..., n, d_v)\n",
                           "    weights = torch.nan_to_num(weights, nan=0.0)\n    output = weights @ v\n")
    run_check(CHAPTER, "attention_steps_hidden", learner(attention_steps=zeros)["attention_steps"])
    finite = SOURCE.replace('scaled.masked_fill(~mask, float("-inf"))', "scaled.masked_fill(~mask, -1e9)")
    with pytest.raises(AssertionError, match="large finite number"):
        run_check(CHAPTER, "attention_steps_hidden", learner(attention_steps=finite)["attention_steps"])
    assert any("no allowed key" in case.label for case in checks._attention_steps_cases(0))


@pytest.mark.parametrize("name,values", [
    ("scores", EXACT["scores"].T), ("scaled", EXACT["scores"]), ("weights", [[0.55, 0.12, 0.36], [0.12, 0.33, 0.55]]),
    ("output", [[1.88, 0.6], [1.67, 0.7]]), ("weights", [[0.5, 0.5], [0.5, 0.5]]),
])
def test_a_typed_answer_failure_says_on_its_first_line_which_table_and_what(name, values):
    # A report's table shows the first line of a cell's message (or its "Likely mistake" line): it must name the
    # table and the problem, never a bare heading such as "Some typed answers are not right: [output_hidden]".
    message = typed_failure(name, answers(**{name: values.tolist() if isinstance(values, torch.Tensor) else values}))
    first = message.splitlines()[0]
    assert first.startswith(f"`{name}`") and ("entries are off" in first or "shape" in first), message
    assert "Some typed answers" not in message


@pytest.mark.usefixtures("grading_env")
def test_d_k_from_the_wrong_dimension_and_a_float32_scale_are_named():
    for old, new, named in [("d_k = q.size(-1)", "d_k = q.shape[1]", "d_k read from the wrong dimension"),
                            ("scaled = scores / math.sqrt(d_k)", "scaled = scores / torch.sqrt(torch.tensor(d_k))", "computed in float32")]:
        with pytest.raises(AssertionError, match=re.escape(named)):
            run_check(CHAPTER, "attention_steps_hidden", learner(attention_steps=SOURCE.replace(old, new))["attention_steps"])

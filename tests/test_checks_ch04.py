"""Chapter 04's own checker tests: large-score cases, valid alternatives written here, forbidden built-ins,
parameters that do not load, callees graded apart, the find-the-bug SelfAttention cell, and what the visible
checks say about particular mistakes (notebooks run through tests/harness.py).

What every chapter must keep (reference full marks, blank notebook, every catalogued wrong and valid answer,
hidden inputs that change with the seed, the notebooks): tests/chapter_contract.py; each hidden check's
catalogued mistakes named as themselves: tests/test_mistake_catalogues.py."""

import inspect
import math

import harness
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from autograder import registry
from autograder.checks import ch04_multi_head as checks
from autograder.checks import run_check
from autograder.checks import grader_weights, generator, run_local
from solutions import ch04_multi_head as ref
from solutions.ch02_qkv_attention import scaled_dot_product_attention, stable_softmax

CHAPTER = "04-multi-head"
M = harness.material(CHAPTER)
trials = registry.answers(CHAPTER)  # the chapter's test data: wrong answers, valid alternatives
SEED = 7

# --- Hidden checks: large-score cases ------------------------------------------------


def _large_case_scores(cases_fn, cls, salt, index, q_name, k_name, q_arg, k_arg, n_heads):
    case = cases_fn(SEED)[index]
    state = grader_weights(cls(**case.init), generator(SEED, salt + index))
    scores = {}
    for dtype in (torch.float32, torch.float64):
        w_q, w_k = state[f"{q_name}.weight"].to(dtype), state[f"{k_name}.weight"].to(dtype)
        b_q, b_k = state.get(f"{q_name}.bias"), state.get(f"{k_name}.bias")
        q = case.inputs[q_arg].to(dtype) @ w_q.T + (0 if b_q is None else b_q.to(dtype))
        k = case.inputs[k_arg].to(dtype) @ w_k.T + (0 if b_k is None else b_k.to(dtype))
        q, k = ref.split_heads(q, n_heads), ref.split_heads(k, n_heads)
        scores[dtype] = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return scores


@pytest.mark.parametrize("args", [
    (checks._mha_cases, ref.MultiHeadAttention, checks.MHA_SALT, checks.MHA_LARGE_INDEX, "w_q", "w_k", 0, 1, 2),
    (checks._sa_cases, ref.SelfAttention, checks.SA_SALT, checks.SA_LARGE_INDEX, "queries", "keys", 2, 1, 2),
], ids=["MultiHeadAttention", "SelfAttention"])
def test_large_score_cases_are_large_and_free_of_near_ties(args):
    """The large case is built for the weights the grader will draw: every row's top score is in the hundreds or
    thousands (exp overflows without the max subtracted, in float32 and float64), rows differ in size (a max over
    the whole tensor fails too), and the runner-up is far behind, in float32 as well (no rounding-sensitive ties)."""
    for dtype, s in _large_case_scores(*args).items():
        top2 = s.topk(2, dim=-1).values
        assert (top2[..., 0] > 150).all(), f"{dtype}: a row's top score is only {top2[..., 0].min():.1f}"
        assert top2[..., 0].max() > 750, f"{dtype}: no score overflows exp in float64"
        assert (top2[..., 0] - top2[..., 1] > 100).all(), f"{dtype}: near tie in the large case"
        assert top2[..., 0].max() - top2[..., 0].min() > 100, f"{dtype}: every row has the same maximum"


# --- Valid alternatives pass ----------------------------------------------------------------------------


def split_permute(x, n_heads):
    b, n, d = x.shape
    return x.reshape(b, n, n_heads, d // n_heads).permute(0, 2, 1, 3)


def split_stack(x, n_heads):
    return torch.stack(x.split(x.shape[-1] // n_heads, dim=-1), dim=1)


def merge_cat(x):
    return torch.cat(x.unbind(1), dim=-1)


def merge_contiguous_view(x):
    b, h, n, d_k = x.shape
    return x.transpose(1, 2).contiguous().view(b, n, h * d_k)


class MHAEinsum(nn.Module):
    """einsum over (B, T, H, d_k), a softmax of its own, F.dropout, no nn.Dropout attribute."""

    def __init__(self, d_model, n_heads, bias=True, dropout=0.0):
        super().__init__()
        self.h, self.p = n_heads, dropout
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model, bias=bias) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        (b, tq, d), tk = query.shape, key.shape[1]
        q = self.w_q(query).view(b, tq, self.h, d // self.h)
        k = self.w_k(key).view(b, tk, self.h, d // self.h)
        v = self.w_v(value).view(b, tk, self.h, d // self.h)
        s = torch.einsum("bqhd,bkhd->bhqk", q * (1.0 / math.sqrt(d // self.h)), k)
        if mask is not None:
            s = torch.where(mask, s, torch.full((), float("-inf"), dtype=s.dtype, device=s.device))
        e = (s - s.amax(-1, keepdim=True)).exp()
        w = F.dropout(e / e.sum(-1, keepdim=True), self.p, self.training)
        return self.w_o(torch.einsum("bhqk,bkhd->bqhd", w, v).reshape(b, tq, d)), w


class MHALoop(nn.Module):
    """The definition: a Python loop over heads, each with its rows of the projections."""

    def __init__(self, d_model, n_heads, bias=True, dropout=0.0):
        super().__init__()
        self.h = n_heads
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model, bias=bias) for _ in range(4))
        self.drop = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
        d_k = query.shape[-1] // self.h
        outs, weights = [], []
        for i in range(self.h):
            rows = slice(i * d_k, (i + 1) * d_k)

            def project(lin, x):
                return F.linear(x, lin.weight[rows], None if lin.bias is None else lin.bias[rows])

            m = mask[:, 0] if mask is not None and mask.dim() == 4 else mask
            _, w = scaled_dot_product_attention(project(self.w_q, query), project(self.w_k, key), project(self.w_v, value), m)
            w = self.drop(w)
            outs.append(w @ project(self.w_v, value))
            weights.append(w)
        return self.w_o(torch.cat(outs, -1)), torch.stack(weights, 1)


class SAMinusInf(nn.Module):
    """The fix written with split/transpose and matmul, -inf instead of -1e20, the scale on q."""

    def __init__(self, embed_size, heads):
        super().__init__()
        self.embed_size, self.heads, self.head_dim = embed_size, heads, embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        n, tq = query.shape[:2]
        q, k, v = (ref.split_heads(lin(t), self.heads) for lin, t in ((self.queries, query), (self.keys, keys), (self.values, values)))
        s = (q / self.head_dim**0.5) @ k.transpose(-2, -1)
        if mask is not None:
            s = s.masked_fill(~mask.bool(), float("-inf"))
        return self.fc_out((stable_softmax(s, dim=-1) @ v).transpose(1, 2).reshape(n, tq, self.embed_size))


ALTERNATIVES = [
    ("split_heads_hidden", split_permute), ("split_heads_hidden", split_stack),
    ("merge_heads_hidden", merge_cat), ("merge_heads_hidden", merge_contiguous_view),
    ("MultiHeadAttention_hidden", MHAEinsum), ("MultiHeadAttention_hidden", MHALoop),
    ("SelfAttention_hidden", SAMinusInf),
]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("grade_id,alternative", ALTERNATIVES, ids=[a.__name__ for _, a in ALTERNATIVES])
def test_valid_alternatives_pass(grade_id, alternative, seed):
    run_local(checks.CHECKS[grade_id], alternative, seed=seed, device="cpu")


# --- Forbidden built-ins, wrong parameters, callee isolation -----------------------------------------


class MHAWithTorchSoftmax(ref.MultiHeadAttention):
    def forward(self, query, key, value, mask=None):
        q, k, v = (ref.split_heads(lin(t), self.n_heads) for lin, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        s = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        w = self.dropout(torch.softmax(s if mask is None else s.masked_fill(~mask, float("-inf")), dim=-1))
        return self.w_o(ref.merge_heads(w @ v)), w


class MHAWrappingTorch(ref.MultiHeadAttention):
    """Right parameters, right values: but the work is done by nn.MultiheadAttention."""

    def forward(self, query, key, value, mask=None):
        torch_mha = ref.copy_to_torch_mha(self).to(query.device, query.dtype).train(self.training)
        return torch_mha(query, key, value, attn_mask=None if mask is None else ~mask, average_attn_weights=False)


class MHAWithTorchSDPA(ref.MultiHeadAttention):
    def forward(self, query, key, value, mask=None):
        q, k, v = (ref.split_heads(lin(t), self.n_heads) for lin, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        _, w = scaled_dot_product_attention(q, k, v, mask)
        sdpa = getattr(F, "scaled_dot_product_" + "attention")
        return self.w_o(ref.merge_heads(sdpa(q, k, v, attn_mask=mask))), w


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize("cheat,named", [
    (MHAWithTorchSoftmax, "torch.softmax"), (MHAWrappingTorch, "nn.MultiheadAttention"), (MHAWithTorchSDPA, "F.scaled_dot_product_attention"),
])
def test_forbidden_built_ins_earn_nothing_even_when_right(cheat, named):
    with pytest.raises(AssertionError, match="the built-in this exercise asks you to write yourself") as failure:
        run_check(CHAPTER, "MultiHeadAttention_hidden", cheat)
    assert named in str(failure.value)


class FusedQKV(nn.Module):
    def __init__(self, d_model, n_heads, bias=True, dropout=0.0):
        super().__init__()
        self.n_heads = n_heads
        self.w_qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key, value, mask=None):
        q, k, v = (ref.split_heads(t, self.n_heads) for t in self.w_qkv(query).chunk(3, dim=-1))
        heads, w = scaled_dot_product_attention(q, k, v, mask)
        return self.w_o(ref.merge_heads(heads)), w


class NotesLayers(ref.SelfAttention):
    """The fix in forward, but the notes' head_dim x head_dim layers kept."""

    def __init__(self, embed_size, heads):
        super().__init__(embed_size, heads)
        self.values = nn.Linear(self.head_dim, self.head_dim, bias=False)


@pytest.mark.usefixtures("grading_env")
def test_parameters_that_do_not_load_are_explained():
    with pytest.raises(AssertionError, match="expected w_q.weight.*found w_qkv.weight"):
        run_check(CHAPTER, "MultiHeadAttention_hidden", FusedQKV)
    with pytest.raises(AssertionError, match=r"nn.Linear\(embed_size, embed_size, bias=False\)"):
        run_check(CHAPTER, "SelfAttention_hidden", NotesLayers)


def _learner_mha(namespace):
    """The reference MultiHeadAttention, defined in a notebook namespace (it calls that namespace's helpers)."""
    namespace = {"nn": nn, "torch": torch, "math": math, "Tensor": torch.Tensor, "scaled_dot_product_attention": scaled_dot_product_attention, **namespace}
    exec(inspect.getsource(ref.MultiHeadAttention), namespace)
    return namespace["MultiHeadAttention"], namespace


def test_a_wrong_split_heads_costs_no_points_in_multi_head_attention():
    cls, namespace = _learner_mha({"split_heads": checks._split_round_robin, "merge_heads": ref.merge_heads})
    run_local(checks.CHECKS["MultiHeadAttention_hidden"], cls, seed=SEED, device="cpu", namespace=namespace)
    cls, namespace = _learner_mha({"split_heads": ref.split_heads, "merge_heads": checks._merge_interleaved})
    run_local(checks.CHECKS["MultiHeadAttention_hidden"], cls, seed=SEED, device="cpu", namespace=namespace)


def test_a_callee_of_the_wrong_shape_costs_no_points_in_multi_head_attention():
    """The notebook promises it: a split_heads or merge_heads that returns another shape (so that a correct module
    cannot run on it) costs points only in its own exercise."""
    for split, merge in ((checks._split_missing_transpose, ref.merge_heads), (ref.split_heads, lambda x: x.transpose(1, 2)),
                         (ref.split_heads, lambda x: x.sum(1))):
        cls, namespace = _learner_mha({"split_heads": split, "merge_heads": merge})
        run_local(checks.CHECKS["MultiHeadAttention_hidden"], cls, seed=SEED, device="cpu", namespace=namespace)
    # ... but a wrong module is still wrong when its callees are right
    cls, namespace = _learner_mha({"split_heads": ref.split_heads, "merge_heads": ref.merge_heads})
    with pytest.raises(AssertionError, match="inverted mask"):
        run_local(checks.CHECKS["MultiHeadAttention_hidden"], checks._mha(invert_mask=True), seed=SEED, device="cpu", namespace=namespace)


# --- The notebook, tried as a learner would ---------------------------------------------------------------


def visible_says(sources=None, wrong=(), cell=None):
    """What the learner sees under one visible check (None if it passes): the filled-in notebook, with solution
    cells replaced by `sources` ({grade id: code}) and catalogued wrong answers applied."""
    if not sources:  # a catalogued wrong answer as it is: the chapter contract's run of it
        return harness.learner_run(M, wrong=tuple(wrong)).message(cell)
    return harness.run_notebook(harness.filled(M, wrong, sources=sources), visible={cell}).message(cell)


def hidden_says(namespace, grade_id):
    """The hidden check's message on the namespace (None: full marks)."""
    return harness.hidden(M, namespace, seed=SEED, grade_ids={grade_id})[grade_id]


def test_blank_notebook_is_told_what_the_given_class_gets_wrong():
    """The find-the-bug cell as given: the notes' class, whose layers do not have the shapes the exercise states
    (that every other cell says "not implemented" and the notebook earns 0 is the chapter contract's)."""
    run = harness.run_notebook(M.student, visible={"SelfAttention_visible"})
    assert "must have exactly the parameters" in run.message("SelfAttention_visible")
    assert "values.weight (8, 8)" in run.message("SelfAttention_visible")
    assert "embed_size x embed_size" in hidden_says(run.namespace, "SelfAttention_hidden")


def test_the_module_cell_keeps_its_signatures():
    mha = harness.cell_source(M.student, "MultiHeadAttention")
    assert mha.count("raise NotImplementedError()") == 2 and "def forward(" in mha and "super().__init__()" in mha


LEARNER_ALTERNATIVES = {
    "split_heads": '''def split_heads(x, n_heads):
    return x.unflatten(-1, (n_heads, -1)).transpose(1, 2)
''',
    "merge_heads": '''def merge_heads(x):
    return x.permute(0, 2, 1, 3).flatten(2)
''',
    "MultiHeadAttention": '''class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, bias=True, dropout=0.0):
        super().__init__()
        self.n_heads = n_heads
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model, bias=bias) for _ in range(4))
        self.attn_drop = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
        q, k, v = (split_heads(lin(t), self.n_heads) for lin, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        _, weights = scaled_dot_product_attention(q, k, v, mask)
        weights = self.attn_drop(weights)  # identity in eval()
        return self.w_o(merge_heads(weights @ v)), weights
''',
    "mha_parameter_count": '''def mha_parameter_count(d_model, bias=True):
    return sum(p.numel() for p in MultiHeadAttention(d_model, 1, bias=bias).parameters())
''',
    "SelfAttention": '''class SelfAttention(nn.Module):
    def __init__(self, embed_size, heads):
        super().__init__()
        self.embed_size, self.heads, self.head_dim = embed_size, heads, embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        q, k, v = (split_heads(lin(t), self.heads) for lin, t in ((self.queries, query), (self.keys, keys), (self.values, values)))
        out, _ = scaled_dot_product_attention(q, k, v, None if mask is None else mask.bool())
        return self.fc_out(merge_heads(out))
''',
}


def minimal_fix_of_the_given_class():
    """What most learners will hand in: the notes' class from the student cell, edited in place."""
    given = harness.cell_source(M.student, "SelfAttention")
    fixed = given.split("# YOUR CODE HERE")[0].replace("nn.Linear(self.head_dim, self.head_dim, bias=False)", "nn.Linear(embed_size, embed_size, bias=False)")
    for layer, name in (("values", "values"), ("keys", "keys"), ("queries", "query")):
        fixed = fixed.replace(f"{layer} = {name}.reshape(", f"{layer} = self.{layer}({name}).reshape(")
    return fixed.replace("(self.embed_size ** 0.5)", "(self.head_dim ** 0.5)")


@pytest.mark.parametrize("grade_id", list(LEARNER_ALTERNATIVES) + ["SelfAttention (edited in place)"])
def test_valid_alternatives_pass_the_notebook(grade_id):
    if grade_id == "SelfAttention (edited in place)":
        sources = {"SelfAttention": minimal_fix_of_the_given_class()}
    else:
        sources = {grade_id: LEARNER_ALTERNATIVES[grade_id]}
    run = harness.run_notebook(harness.filled(M, sources=sources))
    assert not run.failures(), run.failures()
    assert not harness.lost(harness.hidden(M, run.namespace, seed=SEED))


def test_the_notes_class_with_only_its_layer_sizes_changed_is_named_in_both_checks():
    given = minimal_fix_of_the_given_class()
    bug_1_left = given.replace("self.values(values).reshape(", "values.reshape(").replace("self.keys(keys).reshape(", "keys.reshape(")
    bug_1_left = bug_1_left.replace("self.queries(query).reshape(", "query.reshape(")
    run = harness.run_notebook(harness.filled(M, sources={"SelfAttention": bug_1_left}), visible={"SelfAttention_visible"})
    assert "bug 1 is not fixed" in run.message("SelfAttention_visible")
    assert "bug 1 is not fixed" in hidden_says(run.namespace, "SelfAttention_hidden")


# --- Issue 15: mistakes told apart, integer counts, callee blame in the visible check ------------------------

MODULE_CATALOGUES = [
    ("MultiHeadAttention", checks._mha_cases, ref.MultiHeadAttention, checks.MHA_SALT, checks.MHA_MISTAKES),
    ("SelfAttention", checks._sa_cases, ref.SelfAttention, checks.SA_SALT, checks.SA_MISTAKES),
]


def _module_outputs(cls, case, state):
    module = cls(**case.init)
    module.load_state_dict(state)
    module.double().train(case.train)
    inputs = [t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in case.inputs]
    with torch.no_grad():
        out = module(*inputs, **case.kwargs)
    return out if isinstance(out, tuple) else (out,)


def _same(a, b):
    return len(a) == len(b) and all(x.shape == y.shape and torch.allclose(x, y, atol=1e-4, rtol=1e-3, equal_nan=True) for x, y in zip(a, b))


@pytest.mark.parametrize("seed", [0, 7, 21])
@pytest.mark.parametrize("name,cases_fn,cls,salt,catalogue", MODULE_CATALOGUES, ids=[m[0] for m in MODULE_CATALOGUES])
def test_catalogued_mistakes_are_told_apart_wherever_they_are_named(name, cases_fn, cls, salt, catalogue, seed):
    """Each catalogued mistake is named on the first hidden case where it differs from the reference (the
    learner's first failing case), by the first catalogue entry its outputs equal: no other entry before it may
    give the same outputs there (d_model = 16 with 4 heads once made sqrt(d_model) = d_k, so dividing by d_k
    was named "sqrt(d_model)"). Compared at float32's tolerance, the looser of the two."""
    cases = cases_fn(seed)
    states = [grader_weights(cls(**case.init), generator(seed, salt + i)) for i, case in enumerate(cases)]
    rights = [_module_outputs(cls, case, state) for case, state in zip(cases, states)]

    def outputs(wrong_cls, i):
        try:
            return _module_outputs(wrong_cls, cases[i], states[i])
        except Exception:
            return None

    confused = []
    entries = list(catalogue.items())
    for position, (description, wrong_cls) in enumerate(entries):
        first = next((i for i in range(len(cases)) if (o := outputs(wrong_cls, i)) is not None and not _same(o, rights[i])), None)
        if first is None:
            continue
        mine = outputs(wrong_cls, first)
        for other, other_cls in entries[:position]:
            theirs = outputs(other_cls, first)
            if theirs is not None and _same(mine, theirs):
                confused.append(f"{cases[first].label}: {description[:60]!r} is named {other[:60]!r}")
    assert not confused, confused


@pytest.mark.parametrize("seed", [0, 7, 21])
def test_no_hidden_case_has_sqrt_d_model_equal_to_d_k(seed):
    for case in checks._mha_cases(seed):
        d, h = case.init["d_model"], case.init["n_heads"]
        assert d != (d // h) ** 2, case.label
    for case in checks._sa_cases(seed):
        d, h = case.init["embed_size"], case.init["heads"]
        assert d != (d // h) ** 2, case.label


def test_the_scale_mistakes_are_each_named_by_the_hidden_check():
    """Divided by d_k (or scaled twice), not scaled, divided by sqrt(d_model): three mistakes, three names."""
    wrong = {scale: checks._mha(scale=scale) for scale in ("d_k", "none", "sqrt(d_model)")}
    named = {"d_k": "divided by d_k instead of sqrt(d_k)", "none": "not divided by sqrt(d_k) at all",
             "sqrt(d_model)": "divided by sqrt(d_model) instead of sqrt(d_k)"}
    for scale, cls in wrong.items():
        with pytest.raises(AssertionError) as failure:
            run_local(checks.CHECKS["MultiHeadAttention_hidden"], cls, seed=SEED, device="cpu")
        assert named[scale] in str(failure.value)
        for other, text in named.items():
            if other != scale:
                assert text not in str(failure.value)


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize("wrong,said", [
    (lambda d_model, bias=True: float(ref.mha_parameter_count(d_model, bias)), "a float"),
    (lambda d_model, bias=True: torch.tensor(ref.mha_parameter_count(d_model, bias)), "a tensor"),
    (lambda d_model, bias=True: ref.mha_parameter_count(d_model, bias) * 1.0, "a float"),
])
def test_a_count_that_is_not_an_int_loses_its_points(wrong, said):
    with pytest.raises(AssertionError, match="expected a Python int") as failure:
        run_check(CHAPTER, "mha_parameter_count_hidden", wrong)
    assert said in str(failure.value)


def test_a_count_that_is_not_an_int_fails_the_visible_check():
    for body in ("    return float(4 * d_model * d_model + (4 * d_model if bias else 0))",
                 "    return torch.tensor(4 * d_model * d_model + (4 * d_model if bias else 0))"):
        seen = visible_says({"mha_parameter_count": f"def mha_parameter_count(d_model, bias=True):\n{body}\n"}, cell="mha_parameter_count_visible")
        assert "return a Python int" in seen, seen


def test_the_module_visible_check_names_a_wrong_callee_not_the_module():
    """A wrong merge_heads (or split_heads) under a correct MultiHeadAttention: the module's visible check says
    which callee to fix, instead of naming a mistake of the module; a wrong module under right callees is
    still named as the module's mistake."""
    for wrong, callee in (("merge_interleaved", "merge_heads"), ("split_round_robin", "split_heads"), ("merge_not_flattened", "merge_heads")):
        seen = visible_says(wrong=[wrong], cell="MultiHeadAttention_visible")
        assert f"Your `{callee}` does not give the right result yet" in seen, seen
        assert "exactly what you get with this mistake" not in seen, seen
    seen = visible_says(wrong=["mha_inverted_mask"], cell="MultiHeadAttention_visible")
    assert "inverted mask" in seen and "does not give the right result yet" not in seen, seen


def test_a_count_built_from_a_wrong_module_is_graded_on_its_own():
    count_from_module = trials.VALID_ANSWERS["count_from_own_module"].edits[0].new
    namespace = harness.namespace_of(M, ["mha_bias_always"], sources={"mha_parameter_count": count_from_module})
    assert hidden_says(namespace, "mha_parameter_count_hidden") is None


@pytest.mark.parametrize("name,said", [
    ("mha_weights_before_dropout", "the returned weights are the ones before dropout"),
    ("mha_no_dropout_in_training", "dropout is not applied in training mode"),
    ("mha_divided_by_d_k", "divided by d_k instead of sqrt(d_k)"), ("mha_scaled_twice", "scaled twice"),
    ("mha_not_scaled", "not divided by sqrt(d_k) at all"), ("mha_mask_filled_with_zero", "masked scores set to 0"),
    ("mha_mask_ignored", "the mask is not used"), ("mha_mask_after_softmax", "mask applied after the softmax"),
])
def test_the_visible_check_names_the_scale_dropout_and_mask_mistakes_rightly(name, said):
    """Each is named by its own diagnosis (two dropout mistakes return the same undropped weights: they are told
    apart by the output, checked first; dividing by d_k is never called sqrt(d_model))."""
    seen = visible_says(wrong=[name], cell="MultiHeadAttention_visible")
    assert said in seen, seen
    assert "sqrt(d_model)" not in seen, seen

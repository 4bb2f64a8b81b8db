"""Test data of chapter 03-worked-examples: typical wrong answers (WRONG_ANSWERS) and correct answers written unlike the
reference (VALID_ANSWERS), as edits of the reference source in solutions/ch03_worked_examples.py.

Used by the chapter contract (tests/test_chapter_contract.py), the learner trials, the demo and
scripts/grading_corpus.py, through `autograder.registry.answers("03-worked-examples")`; never loaded by a grading host.
"""

import inspect

from autograder.authoring.answers import Edit, ValidAnswer, WrongAnswer
from autograder.checks.ch03_worked_examples import D_K, EXACT, _V, stable_softmax
from solutions import ch03_worked_examples as ref


# --- Typical wrong answers, as edits of the reference source (end-to-end and learner-trial tests) ------


def _typed_edit(name, values, diagnosis, visible, category="typed"):
    """A typed answer cell with other numbers: the reference cell's text replaced by `values` as typed."""
    return WrongAnswer(name, ref.ANSWER_CELLS[name], ref._typed(name, values), diagnosis, category=category, visible=visible)


_MH_SOURCE = inspect.getsource(ref.multi_head_steps)
_MH_SPLIT_TO_CONCAT = _MH_SOURCE[_MH_SOURCE.index("q_heads, k_heads, v_heads = "):_MH_SOURCE.index('.flatten(-2)') + len('.flatten(-2)')]
_one_not_divided = EXACT["scaled"].clone()
_one_not_divided[1, 2] = EXACT["scores"][1, 2]  # one score copied over without the division
_slipped = EXACT["weights"].clone()
_slipped[0, 2] += 0.03  # one entry mistyped (0.36 for 0.33): the row still sums to about 1

WRONG_ANSWERS = {
    # Exercises 1-2, typed by hand (one cell each: the other steps are right, so only this cell loses points)
    "typed_scores_transposed": _typed_edit("scores", EXACT["scores"].T, "rows and columns swapped", visible=True),
    "typed_scores_already_scaled": _typed_edit("scores", EXACT["scaled"], "these are the scaled scores", visible=True),
    "typed_scale_missing": _typed_edit("scaled", EXACT["scores"], "the scale is missing", visible=False),
    "typed_divided_by_d_k": _typed_edit("scaled", EXACT["scores"] / D_K, "divided by d_k instead of sqrt(d_k)", visible=False),
    "typed_one_score_not_divided": _typed_edit("scaled", _one_not_divided, "scaled[1][2]", visible=True),
    "typed_softmax_over_columns": _typed_edit("weights", stable_softmax(EXACT["scaled"], dim=0), "softmax over the columns", visible=True),
    "typed_no_exponential": _typed_edit("weights", EXACT["scaled"] / EXACT["scaled"].sum(-1, keepdim=True), "without the exponential", visible=True),
    "typed_weights_of_unscaled_scores": _typed_edit("weights", stable_softmax(EXACT["scores"], dim=-1), "softmax of the unscaled scores", visible=True),
    "typed_one_entry_off": _typed_edit("weights", _slipped, "weights[0][2]", visible=True),
    "typed_output_from_scaled_scores": _typed_edit("output", EXACT["scaled"] @ _V, "the scaled scores used as weights", visible=True),
    "typed_output_transposed": _typed_edit("output", EXACT["output"].T, "rows and columns swapped", visible=True),
    # Exercise 3, attention_steps
    "steps_missing_scale": WrongAnswer("attention_steps", "scaled = scores / math.sqrt(d_k)", "scaled = scores", "missing scale"),
    "steps_sqrt_d_v": WrongAnswer("attention_steps", "scaled = scores / math.sqrt(d_k)", "scaled = scores / math.sqrt(v.size(-1))", "sqrt(d_v)"),
    "steps_softmax_wrong_dim": WrongAnswer("attention_steps", "stable_softmax(scaled, dim=-1)", "stable_softmax(scaled, dim=-2)", "softmax over the wrong dimension"),
    "steps_inverted_mask": WrongAnswer("attention_steps", "scaled.masked_fill(~mask,", "scaled.masked_fill(mask,", "inverted mask"),
    "steps_mask_with_zero": WrongAnswer("attention_steps", 'scaled.masked_fill(~mask, float("-inf"))', "scaled.masked_fill(~mask, 0.0)", "filled with 0 instead of -inf"),
    "steps_mask_with_minus_1e9": WrongAnswer("attention_steps", 'scaled.masked_fill(~mask, float("-inf"))', "scaled.masked_fill(~mask, -1e9)", "large finite number instead of -inf"),
    "steps_mask_on_scores": WrongAnswer(
        "attention_steps",
        "    scaled = scores / math.sqrt(d_k)  # (..., n, m)\n"
        "    if mask is not None:\n"
        '        scaled = scaled.masked_fill(~mask, float("-inf"))  # masked keys get weight exactly 0\n',
        "    if mask is not None:\n"
        '        scores = scores.masked_fill(~mask, float("-inf"))\n'
        "    scaled = scores / math.sqrt(d_k)\n",
        "the mask applied to `scores`",
    ),
    # (these two raise inside attention_steps: multi_head_steps, which calls it, raises too, and loses nothing for it)
    "steps_k_dot_t": WrongAnswer("attention_steps", "scores = q @ k.transpose(-2, -1)", "scores = q @ k.T", "k.T and k.t() reverse every dimension",
                                 category="shape"),
    "steps_scores_in_float32": WrongAnswer(
        "attention_steps", "    scores = q @ k.transpose(-2, -1)  # (..., n, m)\n",
        "    scores = torch.zeros(*q.shape[:-1], k.size(-2))  # filled in below\n    scores += q @ k.transpose(-2, -1)\n",
        "created without dtype=", category="dtype",
    ),
    "steps_default_mask_on_cpu": WrongAnswer(
        "attention_steps",
        "    if mask is not None:\n"
        '        scaled = scaled.masked_fill(~mask, float("-inf"))  # masked keys get weight exactly 0\n',
        "    if mask is None:\n"
        "        mask = torch.ones(scaled.shape[-2:], dtype=torch.bool)  # everything may attend\n"
        '    scaled = scaled.masked_fill(~mask, float("-inf"))\n',
        "device", category="device",
    ),
    "steps_naive_softmax": WrongAnswer(
        "attention_steps", "    weights = stable_softmax(scaled, dim=-1)  # (..., n, m)\n",
        "    e = torch.exp(scaled)\n    weights = e / e.sum(dim=-1, keepdim=True)\n",
        "no max subtracted", category="large",
    ),
    # Exercise 4, multi_head_steps (graded with the learner's attention_steps isolated)
    "heads_transpose_trap": WrongAnswer(
        "multi_head_steps", "t.unflatten(-1, (n_heads, -1)).transpose(-3, -2)",
        "t.reshape(*t.shape[:-2], n_heads, t.size(-2), t.size(-1) // n_heads)", "without the transpose",
    ),
    "heads_interleaved": WrongAnswer(
        "multi_head_steps", "t.unflatten(-1, (n_heads, -1)).transpose(-3, -2)",
        "t.unflatten(-1, (-1, n_heads)).transpose(-1, -2).transpose(-3, -2)", "head i takes the column block",
    ),
    "heads_merge_without_transpose": WrongAnswer(
        "multi_head_steps", 'concat = steps["output"].transpose(-3, -2).flatten(-2)',
        'concat = steps["output"].reshape(*x_q.shape[:-1], -1)', "heads put side by side by a reshape alone",
    ),
    "heads_w_o_transposed": WrongAnswer("multi_head_steps", "else concat @ w_o", "else concat @ w_o.T", "W_O used transposed"),
    "heads_mask_dropped": WrongAnswer("multi_head_steps", "attention_steps(q_heads, k_heads, v_heads, mask)", "attention_steps(q_heads, k_heads, v_heads)", "the mask is not passed on"),
    "heads_scaled_by_full_width": WrongAnswer(
        "multi_head_steps", "    steps = attention_steps(q_heads, k_heads, v_heads, mask)",
        "    scores = q_heads @ k_heads.transpose(-2, -1)\n"
        "    scaled = scores / math.sqrt(q.size(-1))  # the width of q\n"
        "    if mask is not None:\n"
        "        scaled = scaled.masked_fill(~mask, float('-inf'))\n"
        "    weights = stable_softmax(scaled, dim=-1)\n"
        "    steps = {'scores': scores, 'scaled': scaled, 'weights': weights, 'output': weights @ v_heads}",
        "sqrt of the full width",
    ),
    "heads_not_moved": WrongAnswer(
        "multi_head_steps",
        _MH_SPLIT_TO_CONCAT,
        _MH_SPLIT_TO_CONCAT.replace(".transpose(-3, -2) for t in", " for t in").replace('steps["output"].transpose(-3, -2).flatten(-2)', 'steps["output"].flatten(-2)'),
        "the head dim is not moved", category="shape",
    ),
    "heads_identity_w_o_float32": WrongAnswer(
        "multi_head_steps", "    output = concat if w_o is None else concat @ w_o  # (..., n, d_out)",
        "    if w_o is None:\n        w_o = torch.eye(concat.size(-1))  # concat @ I = concat\n    output = concat @ w_o",
        "dtype=x_q.dtype", category="dtype",
    ),
    "heads_concat_preallocated_on_cpu": WrongAnswer(
        "multi_head_steps", '    concat = steps["output"].transpose(-3, -2).flatten(-2)',
        '    heads = steps["output"]\n'
        "    concat = torch.zeros(*heads.shape[:-3], heads.size(-2), n_heads * heads.size(-1), dtype=heads.dtype)\n"
        "    for i in range(n_heads):  # head i fills its block of columns\n"
        "        concat[..., i * heads.size(-1):(i + 1) * heads.size(-1)] = heads[..., i, :, :]",
        "device", category="device",
    ),
    "heads_naive_softmax": WrongAnswer(
        "multi_head_steps", "    steps = attention_steps(q_heads, k_heads, v_heads, mask)",
        "    scores = q_heads @ k_heads.transpose(-2, -1)\n"
        "    scaled = scores / math.sqrt(q_heads.size(-1))\n"
        "    if mask is not None:\n"
        "        scaled = scaled.masked_fill(~mask, float('-inf'))\n"
        "    e = torch.exp(scaled)\n"
        "    weights = e / e.sum(dim=-1, keepdim=True)\n"
        "    steps = {'scores': scores, 'scaled': scaled, 'weights': weights, 'output': weights @ v_heads}",
        "no max subtracted", category="large",
    ),
}


# --- Learners' trials (issue 15): more typical mistakes, valid answers written unlike the reference, and wrong
# callees paired with a correct caller written in another call pattern --------------------------------------

_STEPS_SOURCE = inspect.getsource(ref.attention_steps)
_MASK_BLOCK = (
    "    if mask is not None:\n"
    '        scaled = scaled.masked_fill(~mask, float("-inf"))  # masked keys get weight exactly 0\n'
)
_HEADS_CALL = "    steps = attention_steps(q_heads, k_heads, v_heads, mask)  # each head scales by sqrt(d_k of one head)\n"

# multi_head_steps' step 3 written as a loop over the heads, calling the learner's attention_steps once per head
# (the mask broadcast to every head first, then cut like the heads)
_PER_HEAD_LOOP = (
    "    per_head = []\n"
    "    for i in range(n_heads):\n"
    "        head_mask = None\n"
    "        if mask is not None:\n"
    "            full = torch.broadcast_to(mask, (*q_heads.shape[:-1], k_heads.size(-2)))\n"
    "            head_mask = full[..., i, :, :]\n"
    "        per_head.append(attention_steps(q_heads[..., i, :, :], k_heads[..., i, :, :], v_heads[..., i, :, :], head_mask))\n"
    "    steps = {key: torch.stack([s[key] for s in per_head], dim=-3) for key in ('scores', 'scaled', 'weights', 'output')}\n"
)
# ... as torch.func.vmap over the head dim (-3), the mask broadcast to every head first
_VMAP_HEADS = (
    "    if mask is None:\n"
    "        steps = torch.func.vmap(attention_steps, in_dims=-3, out_dims=-3)(q_heads, k_heads, v_heads)\n"
    "    else:\n"
    "        full = torch.broadcast_to(mask, (*q_heads.shape[:-1], k_heads.size(-2)))\n"
    "        steps = torch.func.vmap(attention_steps, in_dims=-3, out_dims=-3)(q_heads, k_heads, v_heads, full)\n"
)
_KEYWORD_CALL = "    steps = attention_steps(q=q_heads, k=k_heads, v=v_heads, mask=mask)\n"
# ... without calling attention_steps at all: every head at once, by einsum
_OWN_STEPS = (
    "    scores = torch.einsum('...hnd,...hmd->...hnm', q_heads, k_heads)\n"
    "    scaled = scores / math.sqrt(q_heads.size(-1))\n"
    "    if mask is not None:\n"
    "        scaled = scaled.masked_fill(~mask, float('-inf'))\n"
    "    weights = stable_softmax(scaled, dim=-1)\n"
    "    steps = {'scores': scores, 'scaled': scaled, 'weights': weights,\n"
    "             'output': torch.einsum('...hnm,...hmd->...hnd', weights, v_heads)}\n"
)

ATTENTION_STEPS_WHOLE_CELL = {
    # a learner's own softmax (the max subtracted, like stable_softmax), einsum, torch.where, d_k from k
    "own_softmax_einsum": (
        "def attention_steps(q, k, v, mask=None):\n"
        "    scores = torch.einsum('...nd,...md->...nm', q, k)\n"
        "    scaled = scores / k.shape[-1] ** 0.5\n"
        "    if mask is not None:\n"
        "        scaled = torch.where(mask, scaled, -math.inf)\n"
        "    e = torch.exp(scaled - scaled.amax(dim=-1, keepdim=True))\n"
        "    weights = e / e.sum(dim=-1, keepdim=True)\n"
        "    output = torch.einsum('...nm,...md->...nd', weights, v)\n"
        "    return dict(scores=scores, scaled=scaled, weights=weights, output=output)\n"
    ),
}

VALID_ANSWERS = {
    # attention_steps
    "steps_own_softmax_einsum": ValidAnswer(
        (Edit("attention_steps", "", ATTENTION_STEPS_WHOLE_CELL["own_softmax_einsum"]),),
        why="einsum for both products, its own max-subtracted softmax, torch.where for the mask, d_k from k, no input validation",
    ),
    "steps_additive_mask": ValidAnswer(
        (Edit("attention_steps", '        scaled = scaled.masked_fill(~mask, float("-inf"))',
              '        scaled = scaled + torch.zeros_like(scaled).masked_fill(mask.logical_not(), -math.inf)'),),
        why="the mask added as a tensor of 0 and -inf (built with zeros_like: same dtype and device)",
    ),
    "steps_scale_as_tensor": ValidAnswer(
        (Edit("attention_steps", "scaled = scores / math.sqrt(d_k)",
              "scaled = scores / torch.tensor(d_k, dtype=q.dtype, device=q.device).sqrt()"),),
        why="sqrt(d_k) as a tensor created with the inputs' dtype and device",
    ),
    "steps_zeros_for_rows_with_no_key": ValidAnswer(
        (Edit("attention_steps", "    output = weights @ v  # (..., n, d_v)\n",
              "    weights = torch.nan_to_num(weights, nan=0.0)  # a query with no allowed key attends to nothing\n"
              "    output = weights @ v\n"),),
        why="zeros instead of NaN in the weights and output of a query with no allowed key (the course's rule accepts both)",
    ),
    "steps_mask_compared_with_false": ValidAnswer(
        (Edit("attention_steps", "scaled.masked_fill(~mask,", "scaled.masked_fill(mask == False,"),),  # noqa: E712 (as learners write it)
        why="`mask == False` instead of `~mask`",
    ),
    # multi_head_steps: other call patterns of the learner's attention_steps, or none
    "heads_loop_over_attention_steps": ValidAnswer(
        (Edit("multi_head_steps", _HEADS_CALL, _PER_HEAD_LOOP),),
        why="attention_steps called once per head in a loop, the results stacked",
    ),
    "heads_vmap_attention_steps": ValidAnswer(
        (Edit("multi_head_steps", _HEADS_CALL, _VMAP_HEADS),),
        why="attention_steps mapped over the heads with torch.func.vmap",
    ),
    "heads_keyword_call": ValidAnswer(
        (Edit("multi_head_steps", _HEADS_CALL, _KEYWORD_CALL),),
        why="attention_steps called with keyword arguments",
    ),
    "heads_own_steps_einsum": ValidAnswer(
        (Edit("multi_head_steps", _HEADS_CALL, _OWN_STEPS),),
        why="every head's steps computed by einsum in multi_head_steps itself, without calling attention_steps",
    ),
    "heads_split_by_chunk_merge_by_cat": ValidAnswer(
        (Edit("multi_head_steps", "(t.unflatten(-1, (n_heads, -1)).transpose(-3, -2) for t in (q, k, v))",
              "(torch.stack(t.chunk(n_heads, dim=-1), dim=-3) for t in (q, k, v))"),
         Edit("multi_head_steps", 'concat = steps["output"].transpose(-3, -2).flatten(-2)',
              'concat = torch.cat([steps["output"][..., i, :, :] for i in range(n_heads)], dim=-1)')),
        why="heads split with chunk + stack and put side by side with torch.cat over a loop",
    ),
    # typed answers in other valid forms
    "typed_scores_as_ints": ValidAnswer((Edit("scores", "", "scores = [[4, 1, 3], [0, 2, 3]]"),), why="whole numbers typed as ints"),
    "typed_scaled_as_fractions": ValidAnswer((Edit("scaled", "", "scaled = [[4 / 2, 1 / 2, 3 / 2], [0 / 2, 2 / 2, 3 / 2]]"),),
                                             why="each scaled score written as a division"),
    "typed_weights_with_math_exp": ValidAnswer(
        (Edit("weights", "",
              "import math\n"
              "_e = [[math.exp(2.0), math.exp(0.5), math.exp(1.5)], [math.exp(0.0), math.exp(1.0), math.exp(1.5)]]\n"
              "weights = [[x / sum(row) for x in row] for row in _e]"),),
        why="the weights worked out with math.exp in the cell (a calculator), at full precision"),
    "typed_output_three_decimals_tuple": ValidAnswer((Edit("output", "", "output = ((1.878, 0.454), (1.668, 0.878))"),),
                                                     why="a tuple of tuples, three decimals"),
}

_MISSING_SCALE = ("scaled = scores / math.sqrt(d_k)", "scaled = scores")

WRONG_ANSWERS.update({
    # attention_steps: more typical mistakes
    "steps_d_k_from_dim_1": WrongAnswer("attention_steps", "d_k = q.size(-1)", "d_k = q.shape[1]", "d_k read from the wrong dimension"),
    "steps_scale_in_float32": WrongAnswer(
        "attention_steps", "scaled = scores / math.sqrt(d_k)", "scaled = scores / torch.sqrt(torch.tensor(d_k))",
        "computed in float32", category="dtype",
    ),
    "steps_masked_copy_returned_unmasked": WrongAnswer(
        "attention_steps", _MASK_BLOCK + "    weights = stable_softmax(scaled, dim=-1)  # (..., n, m)\n",
        "    masked = scaled\n"
        "    if mask is not None:\n"
        '        masked = scaled.masked_fill(~mask, float("-inf"))\n'
        "    weights = stable_softmax(masked, dim=-1)\n",
        "`scaled` returned without the mask",
    ),
    "steps_mask_after_renormalised": WrongAnswer(
        "attention_steps", _MASK_BLOCK + "    weights = stable_softmax(scaled, dim=-1)  # (..., n, m)\n",
        "    weights = stable_softmax(scaled, dim=-1)\n"
        "    if mask is not None:\n"
        "        weights = weights * mask\n"
        "        weights = weights / weights.sum(dim=-1, keepdim=True)\n",
        "`scaled` returned without the mask",
    ),
    "steps_mask_times_minus_inf": WrongAnswer(
        "attention_steps", '        scaled = scaled.masked_fill(~mask, float("-inf"))',
        '        scaled = scaled + (~mask) * float("-inf")', "0 * -inf is NaN",
    ),
    "steps_softmax_of_scores": WrongAnswer(
        "attention_steps", "stable_softmax(scaled, dim=-1)", "stable_softmax(scores, dim=-1)", "the softmax takes `scores`",
    ),
    # multi_head_steps: more typical mistakes
    "heads_keys_from_x_q": WrongAnswer("multi_head_steps", "k = x_k @ w_k", "k = x_q @ w_k", "keys projected from x_q"),
    "heads_merged_interleaved": WrongAnswer(
        "multi_head_steps", 'concat = steps["output"].transpose(-3, -2).flatten(-2)',
        'concat = steps["output"].movedim(-3, -1).flatten(-2)', "columns interleaved",
    ),
    "heads_w_o_none_not_handled": WrongAnswer(
        "multi_head_steps", "    output = concat if w_o is None else concat @ w_o  # (..., n, d_out)",
        "    output = concat @ w_o", "w_o is None here", category="shape",
    ),
    "heads_q_scaled_before_the_callee": WrongAnswer(
        "multi_head_steps", "    q = x_q @ w_q  # (..., n, h*d_k)",
        "    q = x_q @ w_q / math.sqrt(w_q.size(1) // n_heads)  # scaled here already", "scaled twice",
    ),
    # a wrong attention_steps with a correct multi_head_steps that calls it in another pattern: only exercise 3 loses
    "pair_missing_scale_with_per_head_loop": WrongAnswer(
        "attention_steps", *_MISSING_SCALE, "missing scale", also=(Edit("multi_head_steps", _HEADS_CALL, _PER_HEAD_LOOP),),
    ),
    "pair_softmax_dim_with_vmap": WrongAnswer(
        "attention_steps", "stable_softmax(scaled, dim=-1)", "stable_softmax(scaled, dim=-2)", "softmax over the wrong dimension",
        also=(Edit("multi_head_steps", _HEADS_CALL, _VMAP_HEADS),),
        # the exception the notebook states: inside torch.func.vmap the callee's values cannot be recorded, so the
        # caller cannot be graded apart from it (tests/test_checks_ch03.py pins text and grading together)
        fails=frozenset({"attention_steps_hidden", "multi_head_steps_hidden"}),
    ),
    "pair_inverted_mask_with_keyword_call": WrongAnswer(
        "attention_steps", "scaled.masked_fill(~mask,", "scaled.masked_fill(mask,", "inverted mask",
        also=(Edit("multi_head_steps", _HEADS_CALL, _KEYWORD_CALL),),
    ),
    "pair_naive_softmax_with_own_steps": WrongAnswer(
        "attention_steps", "    weights = stable_softmax(scaled, dim=-1)  # (..., n, m)\n",
        "    e = torch.exp(scaled)\n    weights = e / e.sum(dim=-1, keepdim=True)\n", "no max subtracted", category="large",
        also=(Edit("multi_head_steps", _HEADS_CALL, _OWN_STEPS),),
    ),
    "pair_scales_q_in_place": WrongAnswer(
        "attention_steps", "    scores = q @ k.transpose(-2, -1)  # (..., n, m)\n",
        "    q /= math.sqrt(d_k)  # changes the caller's tensor\n    scores = q @ k.transpose(-2, -1)\n", "in place",
    ),
})

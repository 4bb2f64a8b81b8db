"""Test data of chapter 05-masks: typical wrong answers (WRONG_ANSWERS) and correct answers written unlike the
reference (VALID_ANSWERS), as edits of the reference source in solutions/ch05_masks.py.

Used by the chapter contract (tests/test_chapter_contract.py), the learner trials, the demo and
scripts/grading_corpus.py, through `autograder.registry.answers("05-masks")`; never loaded by a grading host.
"""


from autograder.authoring.answers import Edit, ValidAnswer, WrongAnswer


# --- Typical wrong answers, as edits of the reference source (end-to-end and learner-trial tests) ------

_RAISE_IF_TOO_MANY = (
    "    if q_len > k_len:\n"
    "        raise ValueError(f\"q_len={q_len} > k_len={k_len}: the queries must be among the keys' positions\")\n"
)
_JACOBIAN_BODY = (
    "    x = x.detach()\n"
    "    jac = torch.autograd.functional.jacobian(fn, x)  # (T, d_out, T, d_in)\n"
    "    return jac.pow(2).sum(dim=(1, 3)).sqrt()  # (T, T)\n"
)


def _backward_loop(allocate="torch.zeros(T, T, dtype=x.dtype, device=x.device)", reset="            x.grad = None\n"):
    """dependency_matrix as a loop of backward passes, one per output entry (a valid alternative when
    `allocate` keeps x's dtype and device and `reset` clears x.grad)."""
    return (
        "    x = x.detach().requires_grad_(True)\n"
        "    T = x.size(0)\n"
        f"    D = {allocate}  # (T, T) sums of squares\n"
        "    for i in range(T):\n"
        "        y = fn(x)  # (T, d_out)\n"
        "        for c in range(y.size(-1)):\n"
        f"{reset}"
        "            y[i, c].backward(retain_graph=True)\n"
        "            D[i] += x.grad.pow(2).sum(dim=-1)  # (T,)\n"
        "    return D.sqrt()\n"
    )


WRONG_ANSWERS = {
    # causal_mask
    "causal_triu": WrongAnswer("causal_mask", ".tril()  # (n, n)", ".triu()  # (n, n)", "triu instead of tril"),
    "causal_no_diagonal": WrongAnswer("causal_mask", ".tril()  # (n, n)", ".tril(diagonal=-1)  # (n, n)", "the diagonal is excluded"),
    "causal_inverted": WrongAnswer("causal_mask", "return torch.ones(n, n, dtype=torch.bool, device=device).tril()",
                                   "return ~torch.ones(n, n, dtype=torch.bool, device=device).tril()", "inverted convention"),
    "causal_float_mask": WrongAnswer("causal_mask", "torch.ones(n, n, dtype=torch.bool, device=device)", "torch.ones(n, n, device=device)",
                                     "masks in this course are boolean", category="dtype"),
    "causal_extra_dim": WrongAnswer("causal_mask", ".tril()  # (n, n)", ".tril()[None]  # (1, n, n) for the batch", "an extra leading dimension", category="shape"),
    "causal_no_device": WrongAnswer("causal_mask", "torch.ones(n, n, dtype=torch.bool, device=device)", "torch.ones(n, n, dtype=torch.bool)",
                                    "device", category="device"),
    # padding_mask
    "padding_shape_b_t": WrongAnswer("padding_mask", "return mask[:, None, None, :]  # (B, 1, 1, max_len)", "return mask  # (B, max_len)",
                                     "the mask has shape (B, max_len)", category="shape"),
    "padding_masks_queries": WrongAnswer("padding_mask", "return mask[:, None, None, :]  # (B, 1, 1, max_len)", "return mask[:, None, :, None]",
                                         "hides padding QUERIES", category="shape"),
    "padding_off_by_one": WrongAnswer("padding_mask", "positions.unsqueeze(0) < lengths.unsqueeze(1)", "positions.unsqueeze(0) <= lengths.unsqueeze(1)", "off by one"),
    "padding_inverted": WrongAnswer("padding_mask", "positions.unsqueeze(0) < lengths.unsqueeze(1)", "positions.unsqueeze(0) >= lengths.unsqueeze(1)", "inverted convention"),
    "padding_float": WrongAnswer("padding_mask", "mask = positions.unsqueeze(0) < lengths.unsqueeze(1)", "mask = (positions.unsqueeze(0) < lengths.unsqueeze(1)).float()",
                                 "masks in this course are boolean", category="dtype"),
    "padding_no_device": WrongAnswer("padding_mask", "torch.arange(max_len, device=lengths.device)", "torch.arange(max_len)", "device", category="device"),
    # combine_masks
    "combine_or": WrongAnswer("combine_masks", "result & m", "result | m", "OR (|) instead of AND"),
    "combine_none_not_skipped": WrongAnswer("combine_masks", "        if m is None:\n            continue\n", "", "skip the None masks"),
    "combine_squeezed": WrongAnswer("combine_masks", "result = m if result is None else result & m", "result = m.squeeze() if result is None else result & m.squeeze()",
                                    "do not reshape them", category="shape"),
    "combine_float": WrongAnswer("combine_masks", "result = m if result is None else result & m", "result = m.float() if result is None else result * m",
                                 "masks in this course are boolean", category="dtype"),
    "combine_cpu_start": WrongAnswer("combine_masks", "result = m if result is None else result & m",
                                     "result = (torch.ones(m.shape, dtype=torch.bool) & m) if result is None else result & m", "device", category="device"),
    # masked_attention
    "attention_zero_fill": WrongAnswer("masked_attention", "scores.masked_fill(~mask, fill_value)", "scores.masked_fill(~mask, 0)", "masked scores set to 0 instead of -inf"),
    "attention_times_mask": WrongAnswer("masked_attention", "scores = scores.masked_fill(~mask, fill_value)", "scores = scores * mask", "masked scores set to 0 instead of -inf"),
    "attention_inverted": WrongAnswer("masked_attention", "scores.masked_fill(~mask, fill_value)", "scores.masked_fill(mask, fill_value)", "inverted convention"),
    "attention_hardcoded_fill": WrongAnswer("masked_attention", "scores.masked_fill(~mask, fill_value)", "scores.masked_fill(~mask, -1e9)", "hard-coded fill"),
    "attention_ignores_fill_value": WrongAnswer("masked_attention", "scores.masked_fill(~mask, fill_value)", 'scores.masked_fill(~mask, float("-inf"))', "fill_value is ignored"),
    "attention_mask_after_softmax": WrongAnswer(
        "masked_attention",
        "    if mask is not None:\n        scores = scores.masked_fill(~mask, fill_value)\n    weights = torch.softmax(scores, dim=-1)  # (..., q_len, k_len)\n",
        "    weights = torch.softmax(scores, dim=-1)  # (..., q_len, k_len)\n    if mask is not None:\n        weights = weights.masked_fill(~mask, 0.0)\n",
        "mask applied after the softmax",
    ),
    "attention_missing_scale": WrongAnswer("masked_attention", "q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))", "q @ k.transpose(-2, -1)", "missing scale"),
    "attention_k_not_transposed": WrongAnswer("masked_attention", "q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))", "q @ k / math.sqrt(q.size(-1))", "K is not transposed"),
    "attention_swapped_returns": WrongAnswer("masked_attention", "    return weights @ v, weights", "    return weights, weights @ v", "output and weights swapped", category="shape"),
    "attention_naive_softmax": WrongAnswer("masked_attention", "weights = torch.softmax(scores, dim=-1)", "weights = scores.exp() / scores.exp().sum(dim=-1, keepdim=True)",
                                           "no max subtracted", category="large"),
    "attention_float32": WrongAnswer("masked_attention", "    return weights @ v, weights", "    weights = weights.float()  # float32 'for stability'\n    return weights @ v.float(), weights",
                                     "dtype float32, expected torch.float64", category="dtype"),
    "attention_cpu_fill": WrongAnswer("masked_attention", "scores = scores.masked_fill(~mask, fill_value)",
                                      "scores = torch.where(mask, scores, torch.full(scores.shape, fill_value))", "device", category="device"),
    "attention_detached_weights": WrongAnswer("masked_attention", "weights = torch.softmax(scores, dim=-1)", "weights = torch.softmax(scores, dim=-1).detach()",
                                              "through autograd", category="gradient"),
    # dependency_matrix
    "dependency_transposed": WrongAnswer("dependency_matrix", ".sqrt()  # (T, T)", ".sqrt().T  # (T, T)", "transposed"),
    "dependency_l1": WrongAnswer("dependency_matrix", "jac.pow(2).sum(dim=(1, 3)).sqrt()", "jac.abs().sum(dim=(1, 3))", "sum of absolute values"),
    "dependency_d_in_only": WrongAnswer("dependency_matrix", "jac.pow(2).sum(dim=(1, 3)).sqrt()", "jac.pow(2).sum(dim=3).sqrt()", "the norm is taken over d_in only", category="shape"),
    "dependency_summed_outputs": WrongAnswer(
        "dependency_matrix", _JACOBIAN_BODY,
        "    x = x.detach().requires_grad_(True)\n"
        "    rows = []\n"
        "    for i in range(x.size(0)):\n"
        "        x.grad = None\n"
        "        fn(x)[i].sum().backward()\n"
        "        rows.append(x.grad.norm(dim=-1))  # (T,)\n"
        "    return torch.stack(rows)  # (T, T)\n",
        "summed before differentiating",
    ),
    "dependency_grad_not_reset": WrongAnswer("dependency_matrix", _JACOBIAN_BODY, _backward_loop(reset=""), "never reset"),
    "dependency_float32": WrongAnswer("dependency_matrix", _JACOBIAN_BODY, _backward_loop(allocate="torch.zeros(T, T, device=x.device)"),
                                      "dtype float32, expected torch.float64", category="dtype"),
    "dependency_no_device": WrongAnswer("dependency_matrix", _JACOBIAN_BODY, _backward_loop(allocate="torch.zeros(T, T, dtype=x.dtype)"),
                                        "device", category="device"),
    # causal_mask_bottom_right
    "bottom_right_top_left": WrongAnswer("causal_mask_bottom_right", "ones.tril(diagonal=k_len - q_len)", "ones.tril()", "top-left alignment"),
    "bottom_right_off_by_one": WrongAnswer("causal_mask_bottom_right", "ones.tril(diagonal=k_len - q_len)", "ones.tril(diagonal=k_len - q_len - 1)", "hides each query's own key"),
    "bottom_right_wrong_sign": WrongAnswer("causal_mask_bottom_right", "ones.tril(diagonal=k_len - q_len)", "ones.tril(diagonal=q_len - k_len)", "wrong sign"),
    "bottom_right_transposed_shape": WrongAnswer("causal_mask_bottom_right", "torch.ones(q_len, k_len, dtype=torch.bool, device=device)",
                                                 "torch.ones(k_len, q_len, dtype=torch.bool, device=device)", "the shape is (k_len, q_len)", category="shape"),
    "bottom_right_no_error": WrongAnswer("causal_mask_bottom_right", _RAISE_IF_TOO_MANY, "", "should raise ValueError"),
    "bottom_right_float_mask": WrongAnswer("causal_mask_bottom_right", "torch.ones(q_len, k_len, dtype=torch.bool, device=device)", "torch.ones(q_len, k_len, device=device)",
                                           "masks in this course are boolean", category="dtype"),
    "bottom_right_no_device": WrongAnswer("causal_mask_bottom_right", "torch.ones(q_len, k_len, dtype=torch.bool, device=device)", "torch.ones(q_len, k_len, dtype=torch.bool)",
                                          "device", category="device"),
}

# Correct alternatives a learner may write (edits of the reference source): each must pass every check.
VALID_ALTERNATIVES = {
    "causal_arange_comparison": ("causal_mask", "return torch.ones(n, n, dtype=torch.bool, device=device).tril()  # (n, n)",
                                 "i = torch.arange(n, device=device)\n    return i[None, :] <= i[:, None]  # (n, n): key j <= query i"),
    "causal_torch_tril_function": ("causal_mask", "return torch.ones(n, n, dtype=torch.bool, device=device).tril()",
                                   "return torch.tril(torch.ones(n, n, device=device)).bool()"),
    "causal_not_triu": ("causal_mask", "return torch.ones(n, n, dtype=torch.bool, device=device).tril()",
                        "return ~torch.ones(n, n, dtype=torch.bool, device=device).triu(diagonal=1)"),
    "padding_view": ("padding_mask", "return mask[:, None, None, :]  # (B, 1, 1, max_len)", "return mask.view(mask.size(0), 1, 1, max_len)"),
    "padding_lengths_greater": ("padding_mask", "positions.unsqueeze(0) < lengths.unsqueeze(1)", "lengths[:, None] > positions[None, :]"),
    "combine_logical_and": ("combine_masks", "result & m", "torch.logical_and(result, m)"),
    "combine_filtered_reduce": (
        "combine_masks",
        "    result = None\n    for m in masks:\n        if m is None:\n            continue\n",
        "    present = [m for m in masks if m is not None]\n    if not present:\n        return None\n    result = None\n    for m in present:\n",
    ),
    "combine_reduce_logical_and": (
        "combine_masks",
        "    result = None\n    for m in masks:\n        if m is None:\n            continue\n",
        "    import functools\n    present = [m for m in masks if m is not None]\n    return functools.reduce(torch.logical_and, present) if present else None\n"
        "    result = None\n    for m in masks:\n        if m is None:\n            continue\n",
    ),
    "attention_where": ("masked_attention", "scores = scores.masked_fill(~mask, fill_value)",
                        "scores = torch.where(mask, scores, torch.full_like(scores, fill_value))"),
    "attention_own_stable_softmax": ("masked_attention", "weights = torch.softmax(scores, dim=-1)",
                                     "e = (scores - scores.amax(dim=-1, keepdim=True)).exp()\n    weights = e / e.sum(dim=-1, keepdim=True)"),
    "attention_additive_mask": ("masked_attention", "scores = scores.masked_fill(~mask, fill_value)",
                                "scores = scores + torch.zeros_like(scores).masked_fill(~mask, fill_value)"),
    "dependency_backward_loop": ("dependency_matrix", _JACOBIAN_BODY, _backward_loop()),
    "dependency_matrix_norm": ("dependency_matrix", "jac.pow(2).sum(dim=(1, 3)).sqrt()", "torch.linalg.matrix_norm(jac.permute(0, 2, 1, 3))"),
    "dependency_jacrev": ("dependency_matrix", "torch.autograd.functional.jacobian(fn, x)", "torch.func.jacrev(fn)(x)"),
    "bottom_right_arange": ("causal_mask_bottom_right", "    ones = torch.ones(q_len, k_len, dtype=torch.bool, device=device)\n    return ones.tril(diagonal=k_len - q_len)  # (q_len, k_len)",
                            "    i = torch.arange(q_len, device=device)[:, None] + (k_len - q_len)  # absolute positions of the queries\n"
                            "    j = torch.arange(k_len, device=device)[None, :]\n    return j <= i  # (q_len, k_len)"),
    "bottom_right_slice_of_causal": ("causal_mask_bottom_right", "    ones = torch.ones(q_len, k_len, dtype=torch.bool, device=device)\n    return ones.tril(diagonal=k_len - q_len)  # (q_len, k_len)",
                                     "    return torch.ones(k_len, k_len, dtype=torch.bool, device=device).tril()[k_len - q_len:]"),
}


# --- Learner trials of issue 15: correct answers written unlike the reference, and mistakes ------------

_PADDING_LOOP_TOLIST = '''def padding_mask(lengths: Tensor | Sequence[int], max_len: int) -> Tensor:
    lengths = torch.as_tensor(lengths)
    mask = torch.zeros(len(lengths), max_len, dtype=torch.bool, device=lengths.device)  # (B, max_len)
    for b, n in enumerate(lengths.tolist()):  # reads the lengths' values
        mask[b, :n] = True
    return mask[:, None, None, :]  # (B, 1, 1, max_len)
'''

_PADDING_STACK_ROWS = '''def padding_mask(lengths: Tensor | Sequence[int], max_len: int) -> Tensor:
    lengths = torch.as_tensor(lengths)
    positions = torch.arange(max_len, device=lengths.device)
    rows = [positions < n for n in lengths]  # one (max_len,) row per sequence
    return torch.stack(rows).view(len(rows), 1, 1, max_len)
'''

_CAUSAL_LOOP = '''def causal_mask(n: int, device: torch.device | str | None = None) -> Tensor:
    mask = torch.zeros(n, n, dtype=torch.bool, device=device)
    for i in range(n):
        mask[i, : i + 1] = True  # query i sees keys 0..i
    return mask
'''

_BOTTOM_RIGHT_FROM_CAUSAL = '''def causal_mask_bottom_right(q_len: int, k_len: int, device: torch.device | str | None = None) -> Tensor:
    if q_len > k_len:
        raise ValueError("more queries than keys")
    return causal_mask(k_len, device=device)[k_len - q_len:]  # the last q_len rows of the full causal mask
'''

_BOTTOM_RIGHT_FROM_CAUSAL_NEGATIVE = '''def causal_mask_bottom_right(q_len: int, k_len: int, device: torch.device | str | None = None) -> Tensor:
    if q_len > k_len:
        raise ValueError(f"q_len={q_len} > k_len={k_len}")
    full = causal_mask(k_len, device)  # (k_len, k_len)
    return full[-q_len:, :]
'''

_BOTTOM_RIGHT_LOOP = '''def causal_mask_bottom_right(q_len: int, k_len: int, device: torch.device | str | None = None) -> Tensor:
    if q_len > k_len:
        raise ValueError("q_len > k_len")
    mask = torch.zeros(q_len, k_len, dtype=torch.bool, device=device)
    for i in range(q_len):
        mask[i, : k_len - q_len + i + 1] = True  # query i is at absolute position k_len - q_len + i
    return mask
'''

_COMBINE_BROADCAST_ALL = '''def combine_masks(*masks: Tensor | None) -> Tensor | None:
    present = [m for m in masks if m is not None]
    if not present:
        return None
    if len(present) == 1:
        return present[0]
    return torch.stack(torch.broadcast_tensors(*present)).all(dim=0)
'''

_DEPENDENCY_VMAP_VJP = '''def dependency_matrix(fn: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    x = x.detach()
    y, pullback = torch.func.vjp(fn, x)  # y (T, d_out)
    basis = torch.eye(y.numel(), dtype=x.dtype, device=x.device).reshape(-1, *y.shape)  # one-hot cotangents
    (rows,) = torch.func.vmap(pullback)(basis)  # (T * d_out, T, d_in)
    jac = rows.reshape(*y.shape, *x.shape)  # (T, d_out, T, d_in)
    return jac.pow(2).sum(dim=(1, 3)).sqrt()
'''

_DEPENDENCY_AUTOGRAD_GRAD = '''def dependency_matrix(fn: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    x = x.detach().requires_grad_(True)
    with torch.enable_grad():
        y = fn(x)  # (T, d_out)
        rows = []
        for i in range(y.size(0)):
            blocks = [torch.autograd.grad(y[i, c], x, retain_graph=True)[0] for c in range(y.size(1))]  # d_out x (T, d_in)
            rows.append(torch.stack(blocks).pow(2).sum(dim=(0, 2)))  # (T,)
    return torch.stack(rows).sqrt().detach()
'''

_ATTENTION_EINSUM = '''def masked_attention(q, k, v, mask=None, fill_value=float("-inf")):
    scores = torch.einsum("...qd,...kd->...qk", q, k) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), fill_value)
    weights = scores.softmax(dim=-1)
    return torch.einsum("...qk,...kd->...qd", weights, v), weights
'''

_TRIU = Edit("causal_mask", ".tril()  # (n, n)", ".triu()  # (n, n)")

VALID_ANSWERS = {
    **{name: ValidAnswer((Edit(function, old, new),), why="an alternative of the chapter's first catalogue")
       for name, (function, old, new) in VALID_ALTERNATIVES.items()},
    "padding_loop_tolist": ValidAnswer((Edit("padding_mask", "", _PADDING_LOOP_TOLIST),),
                                       why="a loop over lengths.tolist(), the mask created on lengths.device: it reads values, so the meta pass cannot run it"),
    "padding_stack_rows": ValidAnswer((Edit("padding_mask", "", _PADDING_STACK_ROWS),), why="one row per sequence (iterating the lengths tensor), stacked, .view"),
    "causal_loop": ValidAnswer((Edit("causal_mask", "", _CAUSAL_LOOP),), why="zeros on the device, then a loop filling each row"),
    "bottom_right_from_own_causal": ValidAnswer((Edit("causal_mask_bottom_right", "", _BOTTOM_RIGHT_FROM_CAUSAL),),
                                                why="the last q_len rows of the learner's own causal_mask(k_len, device=device)"),
    "bottom_right_loop": ValidAnswer((Edit("causal_mask_bottom_right", "", _BOTTOM_RIGHT_LOOP),), why="a loop over the queries"),
    "combine_broadcast_all": ValidAnswer((Edit("combine_masks", "", _COMBINE_BROADCAST_ALL),), why="torch.broadcast_tensors, stacked, .all(dim=0)"),
    "attention_einsum": ValidAnswer((Edit("masked_attention", "", _ATTENTION_EINSUM),), why="einsum for both products, logical_not, Tensor.softmax, ** 0.5"),
    "attention_nan_rows_to_zero": ValidAnswer(
        (Edit("masked_attention", "weights = torch.softmax(scores, dim=-1)", "weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)"),),
        why="a row with no allowed key returned as zeros (what F.scaled_dot_product_attention gives) instead of NaN"),
    "attention_zero_rows_where": ValidAnswer(
        (Edit("masked_attention", "    weights = torch.softmax(scores, dim=-1)  # (..., q_len, k_len)\n",
              "    weights = torch.softmax(scores, dim=-1)  # (..., q_len, k_len)\n"
              "    if mask is not None and fill_value == float('-inf'):  # rows with no allowed key: zeros, as F.scaled_dot_product_attention\n"
              "        weights = torch.where(mask.any(dim=-1, keepdim=True), weights, torch.zeros((), dtype=weights.dtype, device=weights.device))\n"),),
        why="with the default fill -inf, rows with no allowed key set to zeros with torch.where instead of NaN (a finite fill keeps them uniform)"),
    "dependency_vmap_vjp": ValidAnswer((Edit("dependency_matrix", "", _DEPENDENCY_VMAP_VJP),), why="torch.func.vmap over torch.func.vjp's pullback"),
    "dependency_autograd_grad": ValidAnswer((Edit("dependency_matrix", "", _DEPENDENCY_AUTOGRAD_GRAD),), why="torch.autograd.grad per output entry"),
    "dependency_jacfwd": ValidAnswer((Edit("dependency_matrix", "torch.autograd.functional.jacobian(fn, x)", "torch.func.jacfwd(fn)(x)"),), why="forward-mode torch.func.jacfwd"),
}

WRONG_ANSWERS.update({
    # masked_attention
    "attention_mask_not_assigned": WrongAnswer("masked_attention", "scores = scores.masked_fill(~mask, fill_value)", "scores.masked_fill(~mask, fill_value)",
                                               "the mask is not applied at all"),
    "attention_fill_as_float32_tensor": WrongAnswer("masked_attention", "scores = scores.masked_fill(~mask, fill_value)",
                                                    "scores = torch.where(mask, scores, torch.tensor(fill_value))", "converted to float32 "),
    "attention_mask_eq_zero_fill": WrongAnswer("masked_attention", "scores.masked_fill(~mask, fill_value)", "scores.masked_fill(mask == 0, -1e9)", "hard-coded fill"),
    "attention_dk_from_dim1": WrongAnswer("masked_attention", "math.sqrt(q.size(-1))", "math.sqrt(q.size(1))", "d_k read from the wrong dimension"),
    # causal_mask_bottom_right
    "bottom_right_first_rows_of_causal": WrongAnswer("causal_mask_bottom_right", "", _BOTTOM_RIGHT_FROM_CAUSAL.replace("[k_len - q_len:]", "[:q_len]"), "top-left alignment"),
    # a wrong causal_mask, and a correct causal_mask_bottom_right built from it: only causal_mask loses points
    "causal_triu_with_bottom_right_from_it": WrongAnswer(_TRIU.function, _TRIU.old, _TRIU.new, "triu instead of tril",
                                                         also=(Edit("causal_mask_bottom_right", "", _BOTTOM_RIGHT_FROM_CAUSAL),)),
    "causal_no_diagonal_with_bottom_right_from_it": WrongAnswer("causal_mask", ".tril()  # (n, n)", ".tril(diagonal=-1)  # (n, n)", "the diagonal is excluded",
                                                                also=(Edit("causal_mask_bottom_right", "", _BOTTOM_RIGHT_FROM_CAUSAL_NEGATIVE),)),
    "causal_float_with_bottom_right_from_it": WrongAnswer("causal_mask", "torch.ones(n, n, dtype=torch.bool, device=device)", "torch.ones(n, n, device=device)",
                                                          "masks in this course are boolean", category="dtype",
                                                          also=(Edit("causal_mask_bottom_right", "", _BOTTOM_RIGHT_FROM_CAUSAL),)),
    # a wrong masked_attention (used by the leakage proof) next to a correct dependency_matrix in another pattern
    "attention_zero_fill_with_dependency_jacrev": WrongAnswer("masked_attention", "scores.masked_fill(~mask, fill_value)", "scores.masked_fill(~mask, 0)",
                                                              "masked scores set to 0 instead of -inf",
                                                              also=(Edit("dependency_matrix", "", _DEPENDENCY_VMAP_VJP),)),
    "attention_inverted_with_dependency_loop": WrongAnswer("masked_attention", "scores.masked_fill(~mask, fill_value)", "scores.masked_fill(mask, fill_value)",
                                                           "inverted convention", also=(Edit("dependency_matrix", _JACOBIAN_BODY, _backward_loop()),)),
    "causal_extra_dim_with_dependency_autograd_grad": WrongAnswer("causal_mask", ".tril()  # (n, n)", ".tril()[None]  # (1, n, n) for the batch",
                                                                  "an extra leading dimension", category="shape",
                                                                  also=(Edit("dependency_matrix", "", _DEPENDENCY_AUTOGRAD_GRAD),)),
})

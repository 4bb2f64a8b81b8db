"""Reference solutions for chapter 03-worked-examples: attention by hand.

Two kinds of things live here, both used by the chapter page, its exercises and the tests:

1. Functions that return *every intermediate step* of an attention computation, so that a hand
   calculation can be compared with the machine one step at a time:
       attention_steps(q, k, v, mask=None)      -> scores, scaled, weights, output
       multi_head_steps(x_q, x_k, x_v, w_q, w_k, w_v, w_o, n_heads, mask=None)
                                                -> projections, per-head steps, concat, output
2. The worked examples' input matrices (one source of truth): the source notes' examples
   (001 §4.1-4.2, 002 §2.2.3-2.2.4) and the weights this course chose where the notes give none.
   Each is a function that returns fresh tensors, so a caller cannot change them for everyone else.
3. The "your turn" exercise that a learner computes by hand: its inputs (`your_turn_qkv`), its exact
   steps (`your_turn_answers`) and the reference answer cells (`ANSWER_CELLS`, the steps rounded to two
   decimals, as typed), from which the exercise notebook and its hidden check are built.

`SEED_PRINTED` holds the numbers *as the source notes print them*. Most of them are wrong; they are
kept only so that the page can quote them next to the correct values (and a test checks that they
still disagree, so every "Correction to the source notes" on the page stays true).

Conventions (as in the rest of the course): batch-first shapes, written (batch, heads, seq, d_k);
boolean masks with True = may attend (like torch.nn.functional.scaled_dot_product_attention).
Weight matrices here are used the way the formulas write them, `x @ W` with W of shape
(d_in, d_out). An nn.Linear stores the transpose, (d_out, d_in).
"""

import math

import torch
from torch import Tensor

from solutions.ch02_qkv_attention import stable_softmax

DTYPE = torch.float64  # the examples' default: exact enough that rounding to 2 decimals is never ambiguous

LOVE_YOU_TOKENS = ("I", "love", "you")  # 001 §4.1-4.2
APPLES_TOKENS = ("wo", "xihuan", "pingguo")  # 002 §2.2.3-2.2.4: 我 喜欢 苹果, "I like apples"


# ---------------------------------------------------------------------------------------------
# Step-by-step computations
# ---------------------------------------------------------------------------------------------


def attention_steps(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> dict[str, Tensor]:
    """Scaled dot-product attention, returning every step.

    q: (..., n, d_k)   k: (..., m, d_k)   v: (..., m, d_v)
    mask: bool, broadcastable to (..., n, m), True = may attend
    returns a dict of
        scores  (..., n, m)   q kᵀ                         step 1
        scaled  (..., n, m)   scores / sqrt(d_k)           step 2 (masked entries: -inf)
        weights (..., n, m)   row-wise softmax of scaled   step 3, each row sums to 1
        output  (..., n, d_v) weights @ v                  step 4
    """
    if q.size(-1) != k.size(-1):
        raise ValueError(f"queries and keys need the same width d_k, got {q.size(-1)} and {k.size(-1)}")
    if k.size(-2) != v.size(-2):
        raise ValueError(f"one value per key: k has {k.size(-2)} rows, v has {v.size(-2)}")
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = may attend), got dtype {mask.dtype}")
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1)  # (..., n, m)
    scaled = scores / math.sqrt(d_k)  # (..., n, m)
    if mask is not None:
        scaled = scaled.masked_fill(~mask, float("-inf"))  # masked keys get weight exactly 0
    weights = stable_softmax(scaled, dim=-1)  # (..., n, m)
    output = weights @ v  # (..., n, d_v)
    return {"scores": scores, "scaled": scaled, "weights": weights, "output": output}


def multi_head_steps(
    x_q: Tensor,
    x_k: Tensor,
    x_v: Tensor,
    w_q: Tensor,
    w_k: Tensor,
    w_v: Tensor,
    w_o: Tensor | None,
    n_heads: int,
    mask: Tensor | None = None,
) -> dict[str, Tensor]:
    """Multi-head attention (no biases), returning every step.

    x_q: (..., n, d_in)   x_k, x_v: (..., m, d_in)
    w_q, w_k: (d_in, n_heads * d_k)   w_v: (d_in, n_heads * d_v)   w_o: (n_heads * d_v, d_out) or None
    Head h uses the columns h*d_k ... (h+1)*d_k - 1 of w_q and w_k (and likewise of w_v): splitting the
    projected matrix into column blocks is the same as giving every head its own small projection.
    mask: bool, broadcastable to (..., n_heads, n, m), True = may attend
    returns a dict of
        q (..., n, h*d_k)   k (..., m, h*d_k)   v (..., m, h*d_v)        the projections x @ W
        q_heads (..., h, n, d_k)  k_heads (..., h, m, d_k)  v_heads (..., h, m, d_v)   the split
        scores, scaled, weights (..., h, n, m)   heads (..., h, n, d_v)  attention in every head
        concat (..., n, h*d_v)                                          the heads side by side
        output (..., n, d_out)                                          concat @ w_o (concat if w_o is None)
    """
    if w_q.size(1) % n_heads or w_v.size(1) % n_heads:
        raise ValueError(f"projected widths {w_q.size(1)} and {w_v.size(1)} must be divisible by n_heads={n_heads}")
    q = x_q @ w_q  # (..., n, h*d_k)
    k = x_k @ w_k  # (..., m, h*d_k)
    v = x_v @ w_v  # (..., m, h*d_v)
    # The split: cut the last dim into (h, d) -- head i gets columns i*d ... (i+1)*d - 1 --
    # then move the head dim in front of the sequence dim: (..., T, h*d) -> (..., T, h, d) -> (..., h, T, d).
    q_heads, k_heads, v_heads = (t.unflatten(-1, (n_heads, -1)).transpose(-3, -2) for t in (q, k, v))
    steps = attention_steps(q_heads, k_heads, v_heads, mask)  # each head scales by sqrt(d_k of one head)
    # The concatenation undoes the split: (..., h, n, d_v) -> (..., n, h, d_v) -> (..., n, h*d_v), head 1 first.
    concat = steps["output"].transpose(-3, -2).flatten(-2)
    if w_o is not None and w_o.size(0) != concat.size(-1):
        raise ValueError(
            f"W_O must have one row per concatenated column: concat is (..., {concat.size(-1)}), "
            f"W_O is {tuple(w_o.shape)}"
        )
    output = concat if w_o is None else concat @ w_o  # (..., n, d_out)
    return {
        "q": q, "k": k, "v": v,
        "q_heads": q_heads, "k_heads": k_heads, "v_heads": v_heads,
        "scores": steps["scores"], "scaled": steps["scaled"], "weights": steps["weights"],
        "heads": steps["output"], "concat": concat, "output": output,
    }


# ---------------------------------------------------------------------------------------------
# The worked examples' inputs
# ---------------------------------------------------------------------------------------------


def love_you_qkv(dtype: torch.dtype = DTYPE) -> tuple[Tensor, Tensor, Tensor]:
    """001 §4.1: Q, K, V for "I love you", given directly (no X, no projections). Each (3, 2)."""
    q = torch.tensor([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]], dtype=dtype)
    k = torch.tensor([[0.7, 0.8], [0.9, 1.0], [1.1, 1.2]], dtype=dtype)
    v = torch.tensor([[1.3, 1.4], [1.5, 1.6], [1.7, 1.8]], dtype=dtype)
    return q, k, v


def love_you_head_projections(dtype: torch.dtype = DTYPE) -> tuple[Tensor, Tensor]:
    """001 §4.2: the per-head projection of head 1 and of head 2, each (2, 2).

    The notes use the same matrix for a head's queries, keys and values: Q_i = Q W_i, K_i = K W_i, V_i = V W_i.
    """
    w1 = torch.tensor([[0.1, 0.2], [0.3, 0.4]], dtype=dtype)
    w2 = torch.tensor([[0.5, 0.6], [0.7, 0.8]], dtype=dtype)
    return w1, w2


def love_you_seed_w_o(dtype: torch.dtype = DTYPE) -> Tensor:
    """001 §4.2: W_O exactly as the notes print it, shape (2, 4) -- it cannot right-multiply a (3, 4) concat.

    (2, 4) is the layout of nn.Linear(4, 2).weight, (out_features, in_features); read that way the
    product is concat @ W_Oᵀ.
    """
    return torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8]], dtype=dtype)


def eat_example(dtype: torch.dtype = DTYPE) -> tuple[Tensor, Tensor, Tensor]:
    """002 §2.2.3: the query of 吃 "eat" against the keys of 我 喜欢 苹果.

    returns q (1, 3), k (3, 3), v (3, 2). The notes give no values; v is chapter 02's toy choice,
    features "is a person" and "is food".
    """
    q = torch.tensor([[1.0, 0.0, 1.0]], dtype=dtype)
    k = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 0.0, 1.0]], dtype=dtype)
    v = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]], dtype=dtype)
    return q, k, v


def apples_x(dtype: torch.dtype = DTYPE) -> Tensor:
    """002 §2.2.4: the embeddings of 我 喜欢 苹果, (3, 4), one row per word."""
    return torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8], [0.2, 0.3, 0.4, 0.5]], dtype=dtype)


def apples_projections(dtype: torch.dtype = DTYPE) -> tuple[Tensor, Tensor, Tensor]:
    """W_Q, W_K, W_V for 002 §2.2.4, each (4, 4). The notes only say "4×4"; these are the course's choice.

    Diagonal, so that Q = X W_Q, K = X W_K and V = X W_V can be written down by hand: W_Q triples every
    feature, W_K triples features 1-2 and multiplies features 3-4 by -2, W_V = I passes X on unchanged.
    Split into two heads of width 2, head 1 (features 1-2) and head 2 (features 3-4) then score the
    words in opposite directions.
    """
    w_q = torch.diag(torch.tensor([3.0, 3.0, 3.0, 3.0], dtype=dtype))
    w_k = torch.diag(torch.tensor([3.0, 3.0, -2.0, -2.0], dtype=dtype))
    w_v = torch.eye(4, dtype=dtype)
    return w_q, w_k, w_v


def apples_output_projection(dtype: torch.dtype = DTYPE) -> Tensor:
    """W_O (4, 4) for the two-head 我 喜欢 苹果 example (the course's choice).

    With concat = [head1 | head2] = [a1, a2, b1, b2]: output = [a1 + b1, a2 + b2, a1 - b1, a2 - b2],
    so every output column reads from both heads.
    """
    return torch.tensor(
        [[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0], [1.0, 0.0, -1.0, 0.0], [0.0, 1.0, 0.0, -1.0]], dtype=dtype
    )


def your_turn_qkv(dtype: torch.dtype = DTYPE) -> tuple[Tensor, Tensor, Tensor]:
    """The page's "your turn" example: q (2, 4), k (3, 4), v (3, 2). Its answers are not printed on the page.

    d_k = 4, so the scale sqrt(d_k) = 2 is exact and only the softmax needs a calculator.
    """
    q = torch.tensor([[0.0, 0.0, 1.0, 2.0], [1.0, 0.0, 2.0, 0.0]], dtype=dtype)
    k = torch.tensor([[0.0, 0.0, 0.0, 2.0], [0.0, 2.0, 1.0, 0.0], [1.0, 0.0, 1.0, 1.0]], dtype=dtype)
    v = torch.tensor([[2.0, 0.0], [1.0, 1.0], [2.0, 1.0]], dtype=dtype)
    return q, k, v


# ---------------------------------------------------------------------------------------------
# The "Your turn" exercise: what a learner types (exercise 1 of the chapter's notebook)
# ---------------------------------------------------------------------------------------------

YOUR_TURN_STEPS = ("scores", "scaled", "weights", "output")  # one answer cell each, in this order
YOUR_TURN_DECIMALS = 2  # the exercise asks for two decimals
# Each typed entry is graded within this distance of the exact value. Rounding every intermediate step
# (e^x, their sum, the weights) to two decimals moves an entry by at most 0.009 here (tests pin it), and
# the typical slips move some entry of their step by 0.04 or more.
YOUR_TURN_TOLERANCE = 0.02


def your_turn_answers(dtype: torch.dtype = DTYPE) -> dict[str, Tensor]:
    """The exact steps of the "your turn" example (what the typed answers are graded against)."""
    return attention_steps(*your_turn_qkv(dtype))


def _typed(name: str, t: Tensor, decimals: int = YOUR_TURN_DECIMALS) -> str:
    """`name = [[a, b], [c, d]]` as a learner would type it, one row per line, rounded to `decimals`."""

    def number(x):
        s = f"{x:.{decimals}f}"
        return s[1:] if s.startswith("-") and float(s) == 0 else s  # no "-0.00"

    rows = ["[" + ", ".join(number(x) for x in row) + "]" for row in t.tolist()]
    pad = " " * (len(name) + 4)
    return f"{name} = [" + f",\n{pad}".join(rows) + "]"


# The reference answer cells of exercise 1 (typed-answer cells, by grade id): the exact steps rounded to two
# decimals, as a learner types them. The notebook builder puts each between solution markers, so the
# student notebook never contains them.
ANSWER_CELLS = {name: _typed(name, value) for name, value in your_turn_answers().items()}


# ---------------------------------------------------------------------------------------------
# What the source notes print (quoted, mostly wrong): for side-by-side comparison only
# ---------------------------------------------------------------------------------------------

SEED_PRINTED = {
    # 001 §4.1, "I love you", single head, d_k = 2
    "001_4.1_scores": [[0.14, 0.16, 0.18], [0.38, 0.44, 0.50], [0.62, 0.72, 0.82]],
    "001_4.1_scaled": [[0.10, 0.11, 0.13], [0.27, 0.31, 0.35], [0.44, 0.51, 0.58]],
    "001_4.1_weights": [[0.27, 0.33, 0.40], [0.24, 0.34, 0.42], [0.21, 0.33, 0.46]],
    "001_4.1_output": [[1.43, 1.54], [1.48, 1.60], [1.53, 1.66]],
    # 001 §4.2, "I love you", two heads
    "001_4.2_Q1": [[0.07, 0.10], [0.19, 0.26], [0.31, 0.42]],
    "001_4.2_Q2": [[0.19, 0.22], [0.43, 0.50], [0.67, 0.78]],
    "001_4.2_K1": [[0.31, 0.44], [0.39, 0.56], [0.47, 0.68]],
    "001_4.2_K2": [[0.89, 1.00], [1.07, 1.20], [1.25, 1.40]],
    "001_4.2_V1": [[0.59, 0.76], [0.75, 0.92], [0.91, 1.08]],
    "001_4.2_V2": [[1.61, 1.78], [1.85, 2.02], [2.09, 2.26]],
    "001_4.2_head1": [[1.43, 1.54], [1.48, 1.60], [1.53, 1.66]],
    "001_4.2_head2": [[1.61, 1.78], [1.85, 2.02], [2.09, 2.26]],
    "001_4.2_output": [[1.61, 1.86], [1.85, 2.10], [2.09, 2.34]],
    # 002 §2.2.3, the query of 吃 against 我 喜欢 苹果: divided by sqrt(64) = 8 instead of sqrt(3)
    "002_2.2.3_divisor": 8.0,
    "002_2.2.3_scaled": [0.0, 0.125, 0.25],
    "002_2.2.3_weights": [0.29, 0.33, 0.38],
}


def seed_printed(name: str, dtype: torch.dtype = DTYPE) -> Tensor:
    """One entry of SEED_PRINTED as a tensor (a fresh copy)."""
    return torch.tensor(SEED_PRINTED[name], dtype=dtype)

"""The chapter 03 reference (attention step by step, multi-head step by step, the worked examples' data)
against PyTorch's softmax, scaled_dot_product_attention and nn.MultiheadAttention.

Tolerances: float64 throughout, atol=1e-12 (a few matmuls and one softmax on O(1) values lose far less;
nn.MultiheadAttention computes the same products in another order, still far below 1e-12).
Hand-checked values (e.g. row 1 of the "I love you" scores) are compared to 1e-12 as well: they are sums of
products of one-decimal numbers, exact to 2 decimals.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from solutions import ch02_qkv_attention as ch02
from solutions import ch03_worked_examples as ref

ATOL64 = 1e-12
SHAPES = [  # (batch dims, n, m, d_k, d_v)
    ((), 3, 3, 2, 2),
    ((2,), 4, 6, 8, 5),
    ((2, 3), 5, 5, 16, 16),
]


def close(actual, expected, what):
    torch.testing.assert_close(actual, expected, atol=ATOL64, rtol=0, msg=lambda m: f"{what}: {m}")


# --- attention_steps ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("batch,n,m,d_k,d_v", SHAPES)
def test_attention_steps_agree_with_torch(gen, batch, n, m, d_k, d_v):
    q = torch.randn(*batch, n, d_k, generator=gen, dtype=torch.float64)
    k = torch.randn(*batch, m, d_k, generator=gen, dtype=torch.float64)
    v = torch.randn(*batch, m, d_v, generator=gen, dtype=torch.float64)
    s = ref.attention_steps(q, k, v)
    assert set(s) == {"scores", "scaled", "weights", "output"}
    close(s["scores"], torch.einsum("...id,...jd->...ij", q, k), "step 1, scores = q kᵀ")
    close(s["scaled"], s["scores"] / math.sqrt(d_k), "step 2, scaled = scores / sqrt(d_k)")
    close(s["weights"], torch.softmax(s["scaled"], dim=-1), "step 3, weights = softmax over the keys")
    close(s["output"], F.scaled_dot_product_attention(q, k, v), "step 4, the output")
    close(s["weights"].sum(-1), torch.ones(*batch, n, dtype=torch.float64), "rows of the weights sum to 1")


@pytest.mark.parametrize("batch,n,m,d_k,d_v", SHAPES)
def test_attention_steps_agree_with_chapter_02(gen, batch, n, m, d_k, d_v):
    q = torch.randn(*batch, n, d_k, generator=gen, dtype=torch.float64)
    k = torch.randn(*batch, m, d_k, generator=gen, dtype=torch.float64)
    v = torch.randn(*batch, m, d_v, generator=gen, dtype=torch.float64)
    mask = torch.rand(*batch, n, m, generator=gen) < 0.6
    mask[..., 0] = True  # no fully masked row
    s = ref.attention_steps(q, k, v, mask)
    out02, w02 = ch02.scaled_dot_product_attention(q, k, v, mask)
    close(s["output"], out02, "output vs chapter 02")
    close(s["weights"], w02, "weights vs chapter 02")
    close(s["output"], F.scaled_dot_product_attention(q, k, v, attn_mask=mask), "masked output vs torch (True = attend)")
    assert (s["weights"][~mask] == 0).all(), "masked keys must get weight exactly 0"
    assert torch.isneginf(s["scaled"][~mask]).all(), "masked scaled scores are -inf"
    close(s["scores"], q @ k.transpose(-2, -1), "scores are not masked (the mask acts at step 2)")


def test_attention_steps_rejects_bad_inputs():
    q = torch.randn(3, 4)
    with pytest.raises(ValueError, match="d_k"):
        ref.attention_steps(q, torch.randn(3, 5), torch.randn(3, 2))
    with pytest.raises(ValueError, match="one value per key"):
        ref.attention_steps(q, torch.randn(3, 4), torch.randn(2, 2))
    with pytest.raises(TypeError, match="bool"):
        ref.attention_steps(q, q, q, torch.ones(3, 3))


# --- multi_head_steps --------------------------------------------------------------------------------------


def loop_over_heads(x_q, x_k, x_v, w_q, w_k, w_v, w_o, n_heads):
    """Multi-head attention written the slow, obvious way: one small projection per head, then concat."""
    dk = w_q.size(1) // n_heads
    dv = w_v.size(1) // n_heads
    heads = []
    for h in range(n_heads):
        qh = x_q @ w_q[:, h * dk:(h + 1) * dk]
        kh = x_k @ w_k[:, h * dk:(h + 1) * dk]
        vh = x_v @ w_v[:, h * dv:(h + 1) * dv]
        a = torch.softmax(qh @ kh.transpose(-2, -1) / math.sqrt(dk), dim=-1)
        heads.append(a @ vh)
    return torch.cat(heads, dim=-1) @ w_o


@pytest.mark.parametrize("batch,n,m,d_model,n_heads", [((), 3, 3, 4, 2), ((2,), 5, 7, 12, 3), ((2,), 4, 4, 8, 1)])
def test_multi_head_steps_equal_a_loop_over_heads(gen, batch, n, m, d_model, n_heads):
    x_q = torch.randn(*batch, n, d_model, generator=gen, dtype=torch.float64)
    x_kv = torch.randn(*batch, m, d_model, generator=gen, dtype=torch.float64)
    w_q, w_k, w_v, w_o = (torch.randn(d_model, d_model, generator=gen, dtype=torch.float64) for _ in range(4))
    s = ref.multi_head_steps(x_q, x_kv, x_kv, w_q, w_k, w_v, w_o, n_heads)
    d_k = d_model // n_heads
    assert s["q_heads"].shape == (*batch, n_heads, n, d_k)
    assert s["k_heads"].shape == (*batch, n_heads, m, d_k)
    assert s["weights"].shape == (*batch, n_heads, n, m)
    assert s["concat"].shape == (*batch, n, d_model) and s["output"].shape == (*batch, n, d_model)
    close(s["output"], loop_over_heads(x_q, x_kv, x_kv, w_q, w_k, w_v, w_o, n_heads), "output vs loop over heads")
    for h in range(n_heads):  # the split is the column blocks of the projection
        close(s["q_heads"][..., h, :, :], s["q"][..., h * d_k:(h + 1) * d_k], f"head {h} of q is its column block")
        close(s["heads"][..., h, :, :], s["concat"][..., h * d_k:(h + 1) * d_k], f"head {h} sits in its block of concat")
    close(s["scaled"], s["scores"] / math.sqrt(d_k), "each head scales by sqrt(d_k of one head)")
    close(s["output"], s["concat"] @ w_o, "output = concat @ W_O")


def test_one_head_is_single_head_attention(gen):
    x = torch.randn(2, 5, 6, generator=gen, dtype=torch.float64)
    w_q, w_k, w_v, w_o = (torch.randn(6, 6, generator=gen, dtype=torch.float64) for _ in range(4))
    s = ref.multi_head_steps(x, x, x, w_q, w_k, w_v, w_o, n_heads=1)
    single = ref.attention_steps(x @ w_q, x @ w_k, x @ w_v)
    close(s["weights"][:, 0], single["weights"], "one head's weights")
    close(s["output"], single["output"] @ w_o, "one head's output")


@pytest.mark.parametrize("n_heads", [1, 2, 4])
@pytest.mark.parametrize("with_mask", [False, True])
def test_multi_head_steps_match_nn_multiheadattention(gen, n_heads, with_mask):
    d_model, n, m = 8, 4, 6
    x_q = torch.randn(2, n, d_model, generator=gen, dtype=torch.float64)
    x_k = torch.randn(2, m, d_model, generator=gen, dtype=torch.float64)
    x_v = torch.randn(2, m, d_model, generator=gen, dtype=torch.float64)
    w_q, w_k, w_v, w_o = (torch.randn(d_model, d_model, generator=gen, dtype=torch.float64) for _ in range(4))
    mask = None
    if with_mask:
        mask = torch.rand(n, m, generator=gen) < 0.6
        mask[:, 0] = True
    mha = nn.MultiheadAttention(d_model, n_heads, bias=False, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        # nn.MultiheadAttention packs W_Q, W_K, W_V row-wise into in_proj_weight (3 d_model, d_model) and,
        # like nn.Linear, stores each as (out, in), i.e. transposed: x @ W == F.linear(x, W.T).
        mha.in_proj_weight.copy_(torch.cat([w_q.T, w_k.T, w_v.T], dim=0))
        mha.out_proj.weight.copy_(w_o.T)
    mha.eval()
    # Its boolean attn_mask has the opposite convention: True = may NOT attend.
    out_t, w_t = mha(x_q, x_k, x_v, attn_mask=None if mask is None else ~mask, need_weights=True,
                     average_attn_weights=False)
    s = ref.multi_head_steps(x_q, x_k, x_v, w_q, w_k, w_v, w_o, n_heads, mask)
    close(s["output"], out_t, "output vs nn.MultiheadAttention with copied weights")
    close(s["weights"], w_t, "per-head weights vs nn.MultiheadAttention")


def test_multi_head_steps_rejects_bad_shapes():
    x = torch.randn(3, 4)
    w = torch.randn(4, 4)
    with pytest.raises(ValueError, match="divisible"):
        ref.multi_head_steps(x, x, x, w, w, w, w, n_heads=3)
    with pytest.raises(ValueError, match="W_O"):
        ref.multi_head_steps(x, x, x, w, w, w, torch.randn(2, 4), n_heads=2)


# --- the worked examples -----------------------------------------------------------------------------------


def test_love_you_scores_by_hand():
    q, k, v = ref.love_you_qkv()
    s = ref.attention_steps(q, k, v)
    # q1·k1 = 0.1·0.7 + 0.2·0.8 = 0.23, q1·k2 = 0.09 + 0.20 = 0.29, q1·k3 = 0.11 + 0.24 = 0.35
    close(s["scores"][0], torch.tensor([0.23, 0.29, 0.35], dtype=torch.float64), "row 1 of QKᵀ")
    close(s["scaled"], s["scores"] / math.sqrt(2), "d_k = 2")
    # every row of V has v2 = v1 + 0.1 and the weights sum to 1, so every output row has o2 = o1 + 0.1
    close(s["output"][:, 1] - s["output"][:, 0], torch.full((3,), 0.1, dtype=torch.float64), "o2 - o1")


def test_eat_example_uses_sqrt_3():
    q, k, v = ref.eat_example()
    s = ref.attention_steps(q, k, v)
    close(s["scores"], torch.tensor([[0.0, 1.0, 2.0]], dtype=torch.float64), "scores [0, 1, 2]")
    close(s["scaled"], s["scores"] / math.sqrt(3), "the keys are 3-dimensional")
    assert s["weights"].argmax().item() == 2, "吃 'eat' attends most to 苹果 'apples'"


def test_apples_example_shapes_and_split():
    x = ref.apples_x()
    w_q, w_k, w_v = ref.apples_projections()
    single = ref.attention_steps(x @ w_q, x @ w_k, x @ w_v)
    assert single["weights"].shape == (3, 3) and single["output"].shape == (3, 4)
    s = ref.multi_head_steps(x, x, x, w_q, w_k, w_v, ref.apples_output_projection(), n_heads=2)
    # the single head's scores are the sum of the two heads' scores: QKᵀ = Q1 K1ᵀ + Q2 K2ᵀ
    close(s["scores"].sum(0), single["scores"], "sum of per-head scores")
    # the chosen weights make the two heads disagree: in every row they favour different words
    favourite = s["weights"].argmax(-1)  # (heads, n)
    assert (favourite[0] != favourite[1]).all(), "the two heads should prefer different words"


def test_seed_w_o_does_not_fit_the_concatenation():
    q, k, v = ref.love_you_qkv()
    w1, w2 = ref.love_you_head_projections()
    w = torch.cat([w1, w2], dim=1)  # (2, 4): head 1's projection, then head 2's
    s = ref.multi_head_steps(q, k, v, w, w, w, None, n_heads=2)
    assert s["concat"].shape == (3, 4)
    with pytest.raises(RuntimeError):
        s["concat"] @ ref.love_you_seed_w_o()  # (3, 4) @ (2, 4): undefined
    for h, wh in enumerate((w1, w2)):  # one big projection split into heads == one projection per head
        close(s["q_heads"][h], q @ wh, f"Q_{h + 1}")
        close(s["heads"][h], F.scaled_dot_product_attention(q @ wh, k @ wh, v @ wh), f"Head_{h + 1}")


def correct_value(name):
    """The correct counterpart of SEED_PRINTED[name]."""
    if name.startswith("001_4.1_"):
        return ref.attention_steps(*ref.love_you_qkv())[name.removeprefix("001_4.1_")]
    if name.startswith("001_4.2_head"):
        w = ref.love_you_head_projections()[int(name[-1]) - 1]
        return F.scaled_dot_product_attention(*(t @ w for t in ref.love_you_qkv()))
    if name == "002_2.2.3_weights":
        return ref.attention_steps(*ref.eat_example())["weights"][0]
    raise KeyError(name)


@pytest.mark.parametrize(
    "name",
    ["001_4.1_scores", "001_4.1_scaled", "001_4.1_weights", "001_4.1_output",
     "001_4.2_head1", "001_4.2_head2", "002_2.2.3_weights"],
)
def test_the_seed_numbers_the_page_corrects_are_wrong(name):
    """Every 'Correction to the source notes' on the page stays true: the printed number is off by more
    than its own rounding (0.005)."""
    printed = ref.seed_printed(name)
    assert (printed - correct_value(name)).abs().max() > 0.005, f"{name}: the notes' numbers agree with the correct ones"


def test_seed_projections_001_4_2_are_mostly_wrong():
    q, k, v = ref.love_you_qkv()
    wrong = 0
    for h, w in enumerate(ref.love_you_head_projections(), start=1):
        for name, x in (("Q", q), ("K", k), ("V", v)):
            wrong += ((ref.seed_printed(f"001_4.2_{name}{h}") - x @ w).abs() > 0.005).sum().item()
    # Counted by hand from the notes: Q1 4, Q2 0, K1 3, K2 6, V1 6, V2 6. A different count means that
    # SEED_PRINTED no longer matches what the notes print.
    assert wrong == 25, f"expected 25 of 36 projected numbers to be wrong, found {wrong}"


def test_examples_return_fresh_tensors():
    q, _, _ = ref.love_you_qkv()
    q.zero_()
    assert ref.love_you_qkv()[0].abs().sum() > 0, "changing a returned tensor must not change the example"
    ref.apples_x().zero_()
    assert ref.apples_x().abs().sum() > 0


def test_your_turn_is_hand_friendly():
    q, k, v = ref.your_turn_qkv()
    s = ref.attention_steps(q, k, v)
    assert s["weights"].shape == (2, 3) and s["output"].shape == (2, 2)
    assert math.sqrt(q.size(-1)) == 2.0, "d_k = 4 keeps the scaling exact"
    # the answers, rounded to 2 decimals, must not sit on a rounding edge (x.xx5 +- 0.001)
    for step in ("weights", "output"):
        frac = (s[step] * 100) % 1
        assert ((frac - 0.5).abs() > 0.1).all(), f"{step} has a value on a rounding edge: {s[step]}"
    assert (s["weights"].max(-1).values > 0.5).all(), "each row should have a clear favourite"

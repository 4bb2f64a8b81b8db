"""Reference solutions for chapter 04-multi-head: multi-head attention.

This module is the single source of truth for the chapter's exercises (split_heads, merge_heads,
MultiHeadAttention); later chapters (07 encoder layer, 08 decoder layer, 09 KV cache) build on it.

Conventions used throughout the course:
- batch-first shapes, written as comments: (batch, heads, seq, d_k);
- boolean masks with True = "may attend" (the same convention as
  torch.nn.functional.scaled_dot_product_attention). nn.MultiheadAttention uses the opposite one
  (True = ignore): pass it ~mask.
"""

import torch
from torch import Tensor, nn

from solutions.ch02_qkv_attention import scaled_dot_product_attention


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """Cut the last dimension into n_heads slices of width d_k = D // n_heads, one per head.

    x: (batch, seq, D)  ->  (batch, heads, seq, d_k)

    Head h gets the features h*d_k ... (h+1)*d_k - 1 of every position. The view splits D into
    (heads, d_k); the transpose then moves the head axis in front of the sequence axis. A plain
    reshape to (batch, heads, seq, d_k) without the transpose would be wrong: it would cut the
    flat (seq * D) memory into consecutive blocks, so row t of a head would hold d_k features of
    some other position, not of position t.
    """
    batch, seq, d = x.shape
    if d % n_heads != 0:
        raise ValueError(f"d_model={d} is not divisible by n_heads={n_heads}")
    d_k = d // n_heads
    return x.view(batch, seq, n_heads, d_k).transpose(1, 2)  # (batch, heads, seq, d_k)


def merge_heads(x: Tensor) -> Tensor:
    """Inverse of split_heads: concatenate the heads along the feature dimension.

    x: (batch, heads, seq, d_k)  ->  (batch, seq, heads * d_k)

    After the transpose the tensor is not contiguous, so .reshape (or .contiguous().view) is needed.
    """
    batch, heads, seq, d_k = x.shape
    return x.transpose(1, 2).reshape(batch, seq, heads * d_k)  # (batch, seq, heads * d_k)


class MultiHeadAttention(nn.Module):
    """Multi-head attention (Vaswani et al. 2017, section 3.2.2), batch-first.

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W_O,
    head_i = Attention(Q W_Q^i, K W_K^i, V W_V^i).

    The h per-head projections of width d_k = d_model / h are stored side by side in one
    nn.Linear(d_model, d_model) per role (w_q, w_k, w_v); split_heads cuts their outputs apart.

    forward(query (B, Tq, D), key (B, Tk, D), value (B, Tk, D), mask=None)
        mask: bool, broadcastable to (B, H, Tq, Tk), True = may attend
        returns (out (B, Tq, D), weights (B, H, Tq, Tk))

    Dropout (if any) is applied to the attention weights during training, as in the paper and in
    nn.MultiheadAttention; the returned weights are the ones after dropout.
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True, dropout: float = 0.0):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_k = d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model, bias=bias)  # h query projections of width d_k, side by side
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)  # mixes the concatenated heads
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        q = split_heads(self.w_q(query), self.n_heads)  # (B, H, Tq, d_k)
        k = split_heads(self.w_k(key), self.n_heads)  # (B, H, Tk, d_k)
        v = split_heads(self.w_v(value), self.n_heads)  # (B, H, Tk, d_k)
        heads, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, H, Tq, d_k), (B, H, Tq, Tk)
        if self.training and self.dropout.p > 0:  # dropout on the weights, then mix the values again
            weights = self.dropout(weights)
            heads = weights @ v  # (B, H, Tq, d_k)
        return self.w_o(merge_heads(heads)), weights  # (B, Tq, D), (B, H, Tq, Tk)


def multi_head_attention_loop(
    mha: MultiHeadAttention, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None
) -> Tensor:
    """The same computation as mha(query, key, value, mask)[0], one head at a time in a Python loop.

    Head i uses rows i*d_k ... (i+1)*d_k - 1 of each projection's weight (nn.Linear stores
    (out_features, in_features)). A slow but transparent definition, used to check the batched one.
    mask: bool, broadcastable to (B, Tq, Tk) (no head axis), True = may attend.
    """
    d_k = mha.d_k
    outputs = []
    for i in range(mha.n_heads):
        rows = slice(i * d_k, (i + 1) * d_k)

        def project(lin: nn.Linear, x: Tensor) -> Tensor:
            b = lin.bias[rows] if lin.bias is not None else None
            return nn.functional.linear(x, lin.weight[rows], b)  # (B, T, d_k)

        head, _ = scaled_dot_product_attention(
            project(mha.w_q, query), project(mha.w_k, key), project(mha.w_v, value), mask
        )  # (B, Tq, d_k)
        outputs.append(head)
    return mha.w_o(torch.cat(outputs, dim=-1))  # (B, Tq, D)


def copy_to_torch_mha(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    """An nn.MultiheadAttention(batch_first=True) with the same weights as `mha`.

    nn.MultiheadAttention packs W_Q, W_K, W_V into one in_proj_weight of shape (3D, D) (rows in
    the order q, k, v) and their biases into in_proj_bias (3D,); W_O is out_proj. Remember its
    boolean attn_mask means True = IGNORE: call it with attn_mask=~mask.
    """
    has_bias = mha.w_q.bias is not None
    w = mha.w_q.weight
    torch_mha = nn.MultiheadAttention(
        mha.d_model, mha.n_heads, bias=has_bias, batch_first=True, device=w.device, dtype=w.dtype
    )
    with torch.no_grad():
        torch_mha.in_proj_weight.copy_(torch.cat([mha.w_q.weight, mha.w_k.weight, mha.w_v.weight]))
        torch_mha.out_proj.weight.copy_(mha.w_o.weight)
        if has_bias:
            torch_mha.in_proj_bias.copy_(torch.cat([mha.w_q.bias, mha.w_k.bias, mha.w_v.bias]))
            torch_mha.out_proj.bias.copy_(mha.w_o.bias)
    return torch_mha


def mha_parameter_count(d_model: int, bias: bool = True) -> int:
    """Closed form: four d_model x d_model matrices (W_Q, W_K, W_V, W_O), plus four bias vectors.

    4 d_model^2 + 4 d_model with bias, 4 d_model^2 without. Independent of the number of heads.
    """
    return 4 * d_model * d_model + (4 * d_model if bias else 0)

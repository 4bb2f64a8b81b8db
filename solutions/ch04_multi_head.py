"""Reference solutions for chapter 04-multi-head: multi-head attention.

This module is the single source of truth for the chapter's exercises (split_heads, merge_heads,
MultiHeadAttention, mha_parameter_count, and the fixed SelfAttention of note 003); later chapters
(07 encoder layer, 08 decoder layer, 09 KV cache) build on it.

Conventions used throughout the course:
- batch-first shapes, written as comments: (batch, heads, seq, d_k);
- boolean masks with True = "may attend" (the same convention as
  torch.nn.functional.scaled_dot_product_attention). nn.MultiheadAttention uses the opposite one
  (True = ignore): pass it ~mask.
"""

import torch
from torch import Tensor, nn

from solutions.ch02_qkv_attention import scaled_dot_product_attention, stable_softmax


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """Cut the last dimension into n_heads slices of width d_k = D // n_heads, one per head.

    x: (batch, seq, D)  ->  (batch, heads, seq, d_k), for any batch size.
    Head h, position t holds the features h*d_k ... (h+1)*d_k - 1 of position t.
    Raises ValueError if D is not divisible by n_heads.
    """
    batch, seq, d = x.shape
    if d % n_heads != 0:
        raise ValueError(f"d_model={d} is not divisible by n_heads={n_heads}")
    d_k = d // n_heads
    # view: every position's D features as (heads, d_k), no data moved; transpose: the head axis in front
    # of the positions. A reshape straight to (batch, heads, seq, d_k) has the right shape but cuts the flat
    # (seq * D) memory into consecutive blocks: row t of a head would hold features of other positions.
    return x.view(batch, seq, n_heads, d_k).transpose(1, 2)  # (batch, heads, seq, d_k)


def merge_heads(x: Tensor) -> Tensor:
    """Inverse of split_heads: concatenate the heads along the feature dimension.

    x: (batch, heads, seq, d_k)  ->  (batch, seq, heads * d_k); merge_heads(split_heads(x, h)) == x.
    Position t of the result is [head 0 at t, head 1 at t, ..., head h-1 at t].
    """
    batch, heads, seq, d_k = x.shape
    # back to (batch, seq, heads, d_k), then flatten the last two axes; after the transpose the tensor is
    # not contiguous, so .view would refuse: .reshape (or .contiguous().view) copies when it must.
    return x.transpose(1, 2).reshape(batch, seq, heads * d_k)  # (batch, seq, heads * d_k)


class MultiHeadAttention(nn.Module):
    """Multi-head attention (Vaswani et al. 2017, section 3.2.2), batch-first.

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W_O,
    head_i = Attention(Q W_Q^i, K W_K^i, V W_V^i).

    Parameters (the names and shapes are part of the contract: weights are loaded by name):
        w_q, w_k, w_v, w_o: nn.Linear(d_model, d_model, bias=bias)
    The h per-head projections of width d_k = d_model / h sit side by side in one nn.Linear per role;
    head i uses output features i*d_k ... (i+1)*d_k - 1. Dropout (no parameters): nn.Dropout(dropout),
    applied to the attention weights in training mode only, as in the paper and nn.MultiheadAttention.

    forward(query (B, Tq, D), key (B, Tk, D), value (B, Tk, D), mask=None)
        mask: bool, broadcastable to (B, H, Tq, Tk), True = may attend
        returns (out (B, Tq, D), weights (B, H, Tq, Tk)), the weights after dropout
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
    """The number of learnable numbers (weights and biases) of MultiHeadAttention(d_model, n_heads, bias),
    as a Python int. It does not depend on n_heads, which is why there is no n_heads argument.
    """
    matrices = 4 * d_model * d_model  # W_Q, W_K, W_V, W_O; h per-head d_model x d_k blocks = one d_model x d_model
    biases = 4 * d_model if bias else 0  # one vector of length d_model per nn.Linear
    return matrices + biases


class SelfAttention(nn.Module):
    """Note 003 §6's multi-head SelfAttention with its bugs fixed (chapter 04, "find the bug").

    The notes' class creates queries/keys/values layers of size head_dim x head_dim and never calls them
    (the raw inputs are used as Q, K and V), and divides the scores by sqrt(embed_size) instead of
    sqrt(head_dim). Fixed: the three projections are learned embed_size x embed_size maps applied to the
    inputs before the split into heads (as in the paper), and each head divides by sqrt(head_dim).
    Everything else is the notes' class: argument order (values, keys, query, mask), masked scores filled
    with -1e20 where mask == 0 (so True / 1 = may attend, and a fully masked row gets uniform weights),
    einsum over (batch, seq, heads, head_dim) tensors, fc_out with a bias.

    forward(values (N, Tk, E), keys (N, Tk, E), query (N, Tq, E), mask broadcastable to (N, heads, Tq, Tk)
    or None) -> (N, Tq, E)
    """

    def __init__(self, embed_size: int, heads: int):
        super().__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)  # fix 1: (E, E) maps, used below
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values: Tensor, keys: Tensor, query: Tensor, mask: Tensor | None) -> Tensor:
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        # fix 1: project first, then split into heads; (N, len, heads, head_dim) is the right layout for
        # the einsums below, which name the head axis explicitly (no transpose needed)
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)  # (N, Tk, h, d)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)  # (N, Tk, h, d)
        queries = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)  # (N, Tq, h, d)
        energy = torch.einsum("nqhd,nkhd->nhqk", queries, keys)  # (N, h, Tq, Tk)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e20)
        attention = stable_softmax(energy / self.head_dim**0.5, dim=3)  # fix 2: sqrt(head_dim)
        out = torch.einsum("nhqk,nkhd->nqhd", attention, values)  # (N, Tq, h, d)
        return self.fc_out(out.reshape(N, query_len, self.embed_size))  # (N, Tq, E)

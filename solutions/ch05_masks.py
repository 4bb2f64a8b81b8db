"""Reference solutions for chapter 05-masks: causal masks, padding masks, and masked attention.

This module is the single source of truth for the chapter's exercises: the instructor notebook's
solution cells are generated from these functions, and the hidden grading checks compare learners'
functions against them. Chapter 08 (encoder-decoder) imports the mask builders from here.

Conventions used throughout the course:
- batch-first shapes, written as comments: (batch, heads, seq, d_k);
- boolean masks with True = "may attend" (the same convention as
  torch.nn.functional.scaled_dot_product_attention), broadcastable to (batch, heads, q_len, k_len).
  nn.MultiheadAttention uses the OPPOSITE convention (True = may NOT attend): convert with `to_mha_mask`.
"""

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor


def causal_mask(n: int, device: torch.device | str | None = None) -> Tensor:
    """The (n, n) causal (look-ahead) mask: True on and below the diagonal.

    Row i is query position i; it may attend key positions j <= i, never the future j > i.
    The mask is created on `device`, so it can be used next to tensors that live there.
    """
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()  # (n, n)


def causal_mask_bottom_right(q_len: int, k_len: int, device: torch.device | str | None = None) -> Tensor:
    """The (q_len, k_len) causal mask when the queries are the LAST q_len of k_len positions.

    This is the mask for decoding with a KV cache: the k_len - q_len cached keys come first, and query i
    (absolute position k_len - q_len + i) may attend keys j <= k_len - q_len + i. For q_len == k_len it
    equals causal_mask(k_len). (F.scaled_dot_product_attention(is_causal=True) aligns the triangle to the
    top-left corner instead, which is wrong here whenever q_len < k_len.)
    """
    if q_len > k_len:
        raise ValueError(f"q_len={q_len} > k_len={k_len}: the queries must be among the keys' positions")
    ones = torch.ones(q_len, k_len, dtype=torch.bool, device=device)
    return ones.tril(diagonal=k_len - q_len)  # (q_len, k_len)


def padding_mask(lengths: Tensor | Sequence[int], max_len: int) -> Tensor:
    """The key padding mask (B, 1, 1, max_len): True where key position < that sequence's length.

    lengths: (B,) the number of real (non-padding) tokens of each sequence, padding at the end.
    The two singleton dimensions broadcast over heads and query positions: every query of sequence b
    may attend exactly its real keys. The mask lives on lengths' device.
    """
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be 1-D (batch,), got shape {tuple(lengths.shape)}")
    positions = torch.arange(max_len, device=lengths.device)  # (max_len,)
    mask = positions.unsqueeze(0) < lengths.unsqueeze(1)  # (B, max_len)
    return mask[:, None, None, :]  # (B, 1, 1, max_len)


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of boolean masks, with broadcasting. None entries are ignored; all None gives None.

    A key may be attended only if EVERY mask allows it, e.g.
    combine_masks(causal_mask(T), padding_mask(lengths, T)) -> (B, 1, T, T).
    """
    result = None
    for m in masks:
        if m is None:
            continue
        if m.dtype != torch.bool:
            raise TypeError(f"masks must be bool tensors (True = may attend), got dtype {m.dtype}")
        result = m if result is None else result & m  # broadcasts
    return result


def masked_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    fill_value: float = float("-inf"),
) -> tuple[Tensor, Tensor]:
    """Scaled dot-product attention with a boolean mask (True = may attend).

    q: (batch, heads, q_len, d_k)   k: (batch, heads, k_len, d_k)   v: (batch, heads, k_len, d_v)
    (any leading dimensions work), mask: bool, broadcastable to (batch, heads, q_len, k_len).
    Masked scores are replaced by `fill_value` before the softmax. With the default -inf a row whose keys
    are ALL masked gives NaN (0/0); with a large finite value such as torch.finfo(dtype).min it gives
    uniform weights over the masked keys instead (see the chapter's "truth table").
    returns (output (..., q_len, d_v), weights (..., q_len, k_len))
    """
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = may attend), got dtype {mask.dtype}")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., q_len, k_len)
    if mask is not None:
        scores = scores.masked_fill(~mask, fill_value)
    weights = torch.softmax(scores, dim=-1)  # (..., q_len, k_len)
    return weights @ v, weights  # (..., q_len, d_v), (..., q_len, k_len)


def to_mha_mask(mask: Tensor) -> Tensor:
    """Convert our mask (True = may attend) to nn.MultiheadAttention's (True = may NOT attend).

    Works for both of its arguments: attn_mask (q_len, k_len) and key_padding_mask (batch, k_len)
    (for the latter, squeeze a padding_mask first: padding_mask(lengths, T)[:, 0, 0, :]).
    """
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = may attend), got dtype {mask.dtype}")
    return ~mask


def to_additive_mask(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Convert a boolean mask (True = may attend) to an additive float mask: 0 where allowed, -inf where not.

    Adding it to the scores before the softmax has the same effect as masked_fill(~mask, -inf). This is
    also what F.scaled_dot_product_attention does with a float attn_mask: it ADDS it to the scores.
    """
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = may attend), got dtype {mask.dtype}")
    additive = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return additive.masked_fill(~mask, float("-inf"))


def dependency_matrix(fn: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """How much each output position depends on each input position, measured with gradients.

    fn maps x (T, d_in) to an output (T, d_out). Returns a (T, T) tensor D with
    D[i, j] = || d fn(x)[i] / d x[j] ||  (Frobenius norm of that block of the Jacobian).
    Under a causal mask D[i, j] is exactly 0 for every j > i: no information flows from the future.
    """
    x = x.detach()
    jac = torch.autograd.functional.jacobian(fn, x)  # (T, d_out, T, d_in)
    return jac.pow(2).sum(dim=(1, 3)).sqrt()  # (T, T)

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
    """The (n, n) causal (look-ahead) mask, dtype torch.bool: True on and below the diagonal.

    Row i is query position i; it may attend key positions j <= i (itself included), never the future j > i.
    The mask is created on `device` (None: the CPU), so it can be used next to tensors that live there.
    """
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()  # (n, n)


def causal_mask_bottom_right(q_len: int, k_len: int, device: torch.device | str | None = None) -> Tensor:
    """The (q_len, k_len) causal mask, dtype torch.bool, when the queries are the LAST q_len of k_len positions.

    This is the mask for decoding with a KV cache: the k_len - q_len cached keys come first, and query i
    (absolute position k_len - q_len + i) may attend keys j <= k_len - q_len + i: the triangle is aligned
    to the bottom-right corner. For q_len == k_len it equals causal_mask(k_len).
    (F.scaled_dot_product_attention(is_causal=True) aligns the triangle to the top-left corner instead,
    which is wrong here whenever q_len < k_len.) Raises ValueError if q_len > k_len. Created on `device`.
    """
    if q_len > k_len:
        raise ValueError(f"q_len={q_len} > k_len={k_len}: the queries must be among the keys' positions")
    ones = torch.ones(q_len, k_len, dtype=torch.bool, device=device)
    return ones.tril(diagonal=k_len - q_len)  # (q_len, k_len)


def padding_mask(lengths: Tensor | Sequence[int], max_len: int) -> Tensor:
    """The key padding mask (B, 1, 1, max_len), dtype torch.bool: True where key position < that sequence's length.

    lengths: (B,) integer tensor (or a list), the number of real (non-padding) tokens of each sequence,
    padding at the end. The two singleton dimensions broadcast over heads and query positions: every
    query of sequence b may attend exactly its real keys. The mask lives on lengths' device.
    """
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be 1-D (batch,), got shape {tuple(lengths.shape)}")
    positions = torch.arange(max_len, device=lengths.device)  # (max_len,)
    mask = positions.unsqueeze(0) < lengths.unsqueeze(1)  # (B, max_len)
    return mask[:, None, None, :]  # (B, 1, 1, max_len)


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of boolean masks, with broadcasting. None entries are skipped; no mask at all gives None.

    A key may be attended only if EVERY mask allows it, e.g.
    combine_masks(causal_mask(T), padding_mask(lengths, T)): (T, T) & (B, 1, 1, T) -> (B, 1, T, T).
    A single mask is returned as it is.
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
    (any leading dimensions work), mask: bool, broadcastable to (batch, heads, q_len, k_len), or None.
    Masked scores are replaced by `fill_value` (-inf, not 0) BEFORE the softmax, so that masked keys get
    weight exactly 0. With the default -inf a row whose keys are ALL masked gives NaN weights and a NaN
    output row (0/0); with a large finite fill such as torch.finfo(dtype).min it gives uniform weights
    1/k_len over the masked keys instead (see the chapter's "truth table").
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

    fn maps x (T, d_in) to an output (T, d_out). Returns a (T, T) tensor D, same dtype and device as x, with
    D[i, j] = || d fn(x)[i] / d x[j] ||  (Frobenius norm of that (d_out, d_in) block of the Jacobian).
    Under a causal mask D[i, j] is exactly 0 for every j > i: no information flows from the future.
    """
    x = x.detach()
    jac = torch.autograd.functional.jacobian(fn, x)  # (T, d_out, T, d_in)
    return jac.pow(2).sum(dim=(1, 3)).sqrt()  # (T, T)


# --- Layers the exercises give to dependency_matrix (read-only cells of the notebook) -------------------


def causal_self_attention(x: Tensor) -> Tensor:
    """The smallest causal attention layer, in plain tensor operations: q = k = v = x. x (T, d) -> (T, d).

    It calls none of the exercises' functions, so dependency_matrix can be checked on it on its own.
    `future` marks the keys to hide (True = j > i), the complement of the causal mask.
    """
    T, d = x.shape[-2:]
    scores = x @ x.transpose(-2, -1) / math.sqrt(d)  # (T, T)
    future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(diagonal=1)  # (T, T) True = j > i
    weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)  # (T, T)
    return weights @ x  # (T, d)


def look_ahead(x: Tensor) -> Tensor:
    """A toy layer that looks at the future, no attention: x (T, d) -> (T, 2d).

    Output i is [tanh(x_i), the mean of x_i, ..., x_{T-1}]: it depends on input i and on every later input.
    """
    T = x.size(0)
    counts = torch.arange(T, 0, -1, device=x.device, dtype=x.dtype)  # (T,) T - i inputs from i on
    future_mean = x.flip(0).cumsum(0).flip(0) / counts[:, None]  # (T, d)
    return torch.cat([torch.tanh(x), future_mean], dim=-1)  # (T, 2d)

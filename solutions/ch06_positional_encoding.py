"""Reference solutions for chapter 06-positional-encoding: giving attention a sense of order.

This module is the single source of truth for the chapter's exercises: the instructor notebook's
solution cells are generated from these functions, and the hidden grading checks compare learners'
functions against them.

Conventions used throughout the course:
- batch-first shapes, written as comments: (batch, seq, d_model) or (batch, heads, seq, d_k);
- dimension pairs (2i, 2i+1) share one frequency omega_i = base^(-2i / d_model): dimension 2i holds a
  sine, dimension 2i+1 the cosine of the same angle. The rotation property and RoPE use the same pairs.
"""

import math

import torch
from torch import Tensor, nn


def _check_even(d_model: int) -> None:
    if d_model % 2 != 0:
        raise ValueError(f"d_model must be even (dimensions come in sin/cos pairs), got {d_model}")


def inverse_frequencies(d_model: int, base: float = 10000.0, *, device=None) -> Tensor:
    """omega_i = 1 / base^(2i / d_model) for i = 0 .. d_model/2 - 1, in float64: shape (d_model // 2,)."""
    _check_even(d_model)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64, device=device)  # (d/2,) 0, 2, 4, ...
    return base ** (-two_i / d_model)  # (d/2,) from 1 down to base^(-(d-2)/d)


def wavelengths(d_model: int, base: float = 10000.0) -> Tensor:
    """Wavelength (period in positions) of each sin/cos pair: 2*pi / omega_i, shape (d_model // 2,), float64."""
    return 2 * math.pi / inverse_frequencies(d_model, base)


def sinusoidal_pe(
    max_len: int, d_model: int, base: float = 10000.0, *, dtype: torch.dtype = torch.float32, device=None
) -> Tensor:
    """The Transformer's sinusoidal positional encoding, shape (max_len, d_model).

    PE[pos, 2i]   = sin(pos / base^(2i / d_model))
    PE[pos, 2i+1] = cos(pos / base^(2i / d_model))

    The angles are computed in float64 and the result is cast to `dtype` (float32 by default): in float32
    pos * omega would lose about pos * 6e-8 radians, visible for positions in the thousands.
    """
    if d_model % 2 != 0:
        raise ValueError(f"d_model must be even (dimensions come in sin/cos pairs), got {d_model}")
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64, device=device)  # (d/2,) 0, 2, 4, ...
    omega = base ** (-two_i / d_model)  # (d/2,) omega_i = 1 / base^(2i / d_model)
    pos = torch.arange(max_len, dtype=torch.float64, device=device)  # (max_len,) 0, 1, ..., max_len - 1
    angles = pos[:, None] * omega[None, :]  # (max_len, d/2) angle of pair i at position pos
    pe = torch.empty(max_len, d_model, dtype=torch.float64, device=device)
    pe[:, 0::2] = torch.sin(angles)  # even dimensions: sine
    pe[:, 1::2] = torch.cos(angles)  # odd dimensions: cosine of the same angle
    return pe.to(dtype)


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal encoding to batch-first input: x (batch, seq, d_model) -> x + PE[:seq], then dropout.

    The table is a buffer, not a parameter: it is not trained, it moves with .to(device) / .to(dtype),
    and it is not saved in the state dict (persistent=False) because it is a fixed function of
    (max_len, d_model). It is kept in float64, so that float64 inputs get every digit; forward casts the rows
    it adds to x's dtype. Input embeddings are usually multiplied by sqrt(d_model) before this layer
    (the paper's embedding layer does that); this layer only adds.

    Dropout: nn.Dropout, unless forward is given a torch.Generator (on the CPU); then, in train() mode, with
    y = x + PE, the kept entries are exactly keep = torch.rand(y.shape, generator=generator) >= p, drawn on the
    CPU and moved to y's device, and they are scaled by 1 / (1 - p) (inverted dropout), so that a seed gives the
    same result on every device.
    """

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.0):
        super().__init__()
        self.d_model = d_model
        self.max_len = max_len
        self.dropout = nn.Dropout(dropout)
        pe = sinusoidal_pe(max_len, d_model, dtype=torch.float64)  # (max_len, d_model)
        self.register_buffer("pe", pe, persistent=False)

    def forward(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """x: (batch, seq, d_model) -> (batch, seq, d_model)."""
        if x.dim() != 3 or x.size(-1) != self.d_model:
            raise ValueError(f"expected x of shape (batch, seq, {self.d_model}), got {tuple(x.shape)}")
        seq_len = x.size(1)  # the SEQUENCE axis of batch-first input (not x.size(0), the batch)
        if seq_len > self.max_len:
            raise ValueError(f"sequence length {seq_len} exceeds max_len={self.max_len}")
        y = x + self.pe[:seq_len].to(x.dtype)  # (batch, seq, d_model): PE broadcast over the batch
        p = self.dropout.p
        if generator is None or not self.training or p == 0.0:
            return self.dropout(y)  # nn.Dropout: nothing dropped in eval()
        keep = torch.rand(y.shape, generator=generator) >= p  # (batch, seq, d_model) on the CPU, True w.p. 1 - p
        scale = 1.0 / (1.0 - p) if p < 1.0 else 0.0  # inverted dropout: E[output] = y
        return y * keep.to(y.device) * scale


def rotation_matrix(
    k: float, d_model: int, base: float = 10000.0, *, dtype: torch.dtype = torch.float32, device=None
) -> Tensor:
    """The fixed linear map M_k with M_k @ PE[pos] = PE[pos + k] for every pos: shape (d_model, d_model).

    Block-diagonal with one 2x2 block per pair (2i, 2i+1):
        [[ cos(k w_i), sin(k w_i)],
         [-sin(k w_i), cos(k w_i)]]
    because sin(a + b) = sin a cos b + cos a sin b and cos(a + b) = cos a cos b - sin a sin b.
    It depends on k only, not on pos. For row vectors (a batch of positions), PE[pos + k] = PE[pos] @ M_k.T.
    Computed in float64 and cast to `dtype` (k * w_i in float32 would lose digits for large offsets).
    """
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64, device=device)  # (d/2,) 0, 2, 4, ...
    theta = k * base ** (-two_i / d_model)  # (d/2,) the angle k * omega_i of each pair
    c, s = torch.cos(theta), torch.sin(theta)
    m = torch.zeros(d_model, d_model, dtype=torch.float64, device=device)
    idx = torch.arange(0, d_model, 2, device=device)  # (d/2,) the first dimension of each pair
    m[idx, idx] = c
    m[idx, idx + 1] = s
    m[idx + 1, idx] = -s
    m[idx + 1, idx + 1] = c
    return m.to(dtype)


def apply_rope(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> Tensor:
    """Rotary position embedding (RoPE): rotate each pair (2i, 2i+1) of x by the angle pos * w_i.

    x: (..., seq, d) with d even, e.g. queries or keys of shape (batch, heads, seq, d_k)
    positions: integer or float positions broadcastable to x.shape[:-1] (e.g. (seq,) or (batch, seq) with
        a singleton head axis); default 0, 1, ..., seq-1.
    returns a tensor of the same shape and dtype as x.

    Because a rotation by a followed by the transpose of a rotation by b is a rotation by b - a,
    apply_rope(q, m) · apply_rope(k, n) depends on m and n only through n - m.
    Pairs are interleaved (2i, 2i+1) as in the RoFormer paper (some libraries pair i with i + d/2 instead).
    """
    d = x.size(-1)
    two_i = torch.arange(0, d, 2, dtype=torch.float64, device=x.device)  # (d/2,) 0, 2, 4, ...
    omega = base ** (-two_i / d)  # (d/2,) float64
    if positions is None:
        positions = torch.arange(x.size(-2), device=x.device)
    angles = positions.to(torch.float64)[..., None] * omega  # (..., seq, d/2)
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., seq, d/2) the two members of each pair
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin  # 2-D rotation of (x1, x2) by +angle
    out[..., 1::2] = x1 * sin + x2 * cos
    return out


def alibi_slopes(n_heads: int) -> Tensor:
    """ALiBi's per-head slopes (Press et al., 2022): a geometric sequence starting at 2^(-8 / n_heads).

    For 8 heads: 1/2, 1/4, ..., 1/256. For a head count that is not a power of two, the paper's recipe:
    the slopes of the nearest smaller power of two, then every other slope of the next power of two.
    """

    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if n_heads & (n_heads - 1) == 0:
        slopes = power_of_two(n_heads)
    else:
        closest = 2 ** math.floor(math.log2(n_heads))
        slopes = power_of_two(closest) + power_of_two(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(slopes)


def alibi_bias(n_heads: int, q_len: int, k_len: int | None = None, *, device=None) -> Tensor:
    """ALiBi's additive score bias -slope_h * |i - j|: shape (n_heads, q_len, k_len), float32.

    Added to q·k / sqrt(d_k) before the softmax, with no positional encoding on the input. For a decoder,
    combine it with a causal mask (only j <= i is used). Queries are aligned with the END of the keys
    (query i sits at position k_len - q_len + i), as in decoding with a cache. Head h uses alibi_slopes(n_heads)[h]
    (head 0 the steepest). Computed in float64, returned in float32.
    """
    k_len = q_len if k_len is None else k_len
    q_pos = torch.arange(k_len - q_len, k_len, device=device)[:, None]  # (q_len, 1) positions of the queries
    k_pos = torch.arange(k_len, device=device)[None, :]  # (1, k_len)
    distance = (q_pos - k_pos).abs().double()  # (q_len, k_len) |i - j|
    slopes = alibi_slopes(n_heads).double().to(device)  # (n_heads,)
    return (-slopes[:, None, None] * distance).float()  # (n_heads, q_len, k_len)

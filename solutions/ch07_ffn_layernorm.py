"""Reference solutions for chapter 07-ffn-layernorm: FFN, residuals, LayerNorm and training tricks.

This module is the single source of truth for the chapter's exercises (layer_norm, FeedForward,
EncoderLayer with Post-LN and Pre-LN, the Noam learning-rate schedule, label smoothing, inverted
dropout); chapter 08 builds its decoder layer and full model on FeedForward and EncoderLayer.

Conventions used throughout the course:
- batch-first shapes, written as comments: (batch, heads, seq, d_k);
- boolean masks with True = "may attend" (the same convention as
  torch.nn.functional.scaled_dot_product_attention). nn.TransformerEncoderLayer uses the opposite
  one (True = NOT allowed): pass it ~mask.
"""

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from solutions.ch04_multi_head import MultiHeadAttention, copy_to_torch_mha

def layer_norm(x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float = 1e-5) -> Tensor:
    """LayerNorm over the last dimension, as nn.LayerNorm(d) / F.layer_norm(x, (d,), ...).

    y = (x - mean) / sqrt(var + eps) * weight + bias, where mean and var are taken over the last
    dimension of each position separately, and var is the *biased* variance (divide by d, not d - 1).

    x: (..., d)   weight, bias: (d,) or None (None = no scale / no shift)   returns (..., d)
    """
    mean = x.mean(dim=-1, keepdim=True)  # (..., 1) one mean per position
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # (..., 1) biased variance; x.var() would divide by d - 1
    y = (x - mean) / torch.sqrt(var + eps)  # (..., d) eps inside the root: a constant row gives 0, not NaN
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


class LayerNorm(nn.Module):
    """nn.LayerNorm(d_model) written on layer_norm: a gain `weight` (ones) and a shift `bias` (zeros), both (d_model,).

    The parameter names are nn.LayerNorm's, so an EncoderLayer's state dict maps onto
    nn.TransformerEncoderLayer's (norm1.weight, norm1.bias, ...).

    forward(x (..., d_model)) -> (..., d_model)
    """

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))  # (d_model,) gain
        self.bias = nn.Parameter(torch.zeros(d_model))  # (d_model,) shift
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        return layer_norm(x, self.weight, self.bias, self.eps)


class FeedForward(nn.Module):
    """The position-wise feed-forward network: FFN(x) = linear2(dropout(act(linear1(x)))).

    The same two-layer MLP is applied to every position independently (Vaswani et al. 2017, eq. 2,
    with ReLU; GELU is the BERT/GPT choice). Same layout as inside nn.TransformerEncoderLayer.

    forward(x (B, T, d_model)) -> (B, T, d_model); the hidden layer is (B, T, d_ff).
    Parameters: 2 * d_model * d_ff + d_ff + d_model.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        if activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be 'relu' or 'gelu', got {activation!r}")
        self.linear1 = nn.Linear(d_model, d_ff)  # expand: d_model -> d_ff (usually 4 * d_model)
        self.linear2 = nn.Linear(d_ff, d_model)  # project back: d_ff -> d_model
        self.dropout = nn.Dropout(dropout)  # on the hidden activations, as in PyTorch's layer
        self.activation = activation

    def forward(self, x: Tensor) -> Tensor:
        h = self.linear1(x)  # (B, T, d_ff)
        h = F.relu(h) if self.activation == "relu" else F.gelu(h)  # F.gelu: the exact (erf) GELU, as PyTorch's layers
        return self.linear2(self.dropout(h))  # (B, T, d_model)


class EncoderLayer(nn.Module):
    """One Transformer encoder layer: self-attention and FFN, each in a residual branch with LayerNorm.

    Post-LN (norm_first=False, the 2017 paper):   x = norm1(x + drop(attn(x)));  x = norm2(x + drop(ff(x)))
    Pre-LN  (norm_first=True, GPT-2 and later):   x = x + drop(attn(norm1(x)));  x = x + drop(ff(norm2(x)))

    forward(x (B, T, d_model), mask=None) -> (B, T, d_model)
        mask: bool, broadcastable to (B, H, T, T), True = may attend (e.g. a padding mask
        (B, 1, 1, T) or a causal mask (T, T)).

    With copied weights it equals nn.TransformerEncoderLayer(batch_first=True, same norm_first,
    dropout=0), called with src_mask=~mask for a (T, T) mask or src_key_padding_mask=~mask[:, 0, 0, :]
    for a (B, 1, 1, T) padding mask (PyTorch's True = ignore). A stack of Pre-LN layers needs one
    more LayerNorm after the last layer (nn.TransformerEncoder's `norm`).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)  # dropout on the weights
        self.ff = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = LayerNorm(d_model)  # the course's LayerNorm, built on layer_norm
        self.norm2 = LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)  # on the attention branch, before the residual add
        self.dropout2 = nn.Dropout(dropout)  # on the FFN branch, before the residual add
        self.norm_first = norm_first

    def _attn_branch(self, x: Tensor, mask: Tensor | None) -> Tensor:
        out, _ = self.self_attn(x, x, x, mask)  # (B, T, D); weights discarded
        return self.dropout1(out)

    def _ff_branch(self, x: Tensor) -> Tensor:
        return self.dropout2(self.ff(x))  # (B, T, D)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        if self.norm_first:  # Pre-LN: normalise the branch input; the residual stream is never normalised
            x = x + self._attn_branch(self.norm1(x), mask)
            x = x + self._ff_branch(self.norm2(x))
        else:  # Post-LN: normalise after each residual add
            x = self.norm1(x + self._attn_branch(x, mask))
            x = self.norm2(x + self._ff_branch(x))
        return x  # (B, T, D)


def copy_to_torch_encoder_layer(layer: EncoderLayer) -> nn.TransformerEncoderLayer:
    """An nn.TransformerEncoderLayer(batch_first=True, dropout=0) with the same weights as `layer`.

    Call it as torch_layer(x, src_mask=~mask) for a (T, T) mask, or with
    src_key_padding_mask=~padding[:, 0, 0, :] for a (B, 1, 1, T) padding mask: PyTorch's boolean
    masks mean True = NOT allowed, the opposite of ours.
    """
    w = layer.norm1.weight
    d_model = layer.self_attn.d_model
    torch_layer = nn.TransformerEncoderLayer(
        d_model,
        layer.self_attn.n_heads,
        dim_feedforward=layer.ff.linear1.out_features,
        dropout=0.0,
        activation=layer.ff.activation,
        batch_first=True,
        norm_first=layer.norm_first,
        device=w.device,
        dtype=w.dtype,
    )
    torch_layer.self_attn = copy_to_torch_mha(layer.self_attn)  # packs w_q, w_k, w_v into in_proj_weight
    with torch.no_grad():
        for name in ("linear1", "linear2"):  # our FFN lives in .ff; PyTorch's directly in the layer
            getattr(torch_layer, name).weight.copy_(getattr(layer.ff, name).weight)
            getattr(torch_layer, name).bias.copy_(getattr(layer.ff, name).bias)
        for name in ("norm1", "norm2"):
            getattr(torch_layer, name).weight.copy_(getattr(layer, name).weight)
            getattr(torch_layer, name).bias.copy_(getattr(layer, name).bias)
    return torch_layer


def noam_lr(step: int | float, d_model: int, warmup: int) -> float:
    """The learning rate of Vaswani et al. 2017, eq. 3 ("Noam" schedule):

    lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5),   step = 1, 2, 3, ...

    Linear warm-up for `warmup` steps, then decay like 1/sqrt(step); the peak is at step = warmup,
    with value (d_model * warmup)^-0.5. step = 0 is undefined (0^-0.5): torch's LambdaLR calls its
    function with 0 first, so wrap it as `lambda s: noam_lr(s + 1, d_model, warmup)` (base lr 1.0).
    """
    if step < 1:
        raise ValueError(f"the Noam schedule is defined for step >= 1, got step={step}")
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def label_smoothed_targets(
    target: Tensor, n_classes: int, eps: float, dtype: torch.dtype | None = None
) -> Tensor:
    """The smoothed target distribution q = (1 - eps) * one_hot(target) + eps / n_classes.

    This is the definition of Szegedy et al. 2016 (used by Vaswani et al. 2017 with eps = 0.1) and
    of nn.CrossEntropyLoss(label_smoothing=eps): the true class gets 1 - eps + eps / K, every
    other class eps / K; each row sums to 1.

    target: (...,) int64 class indices   returns (..., n_classes), dtype (default: torch's default dtype)
    """
    one_hot = F.one_hot(target, n_classes).to(dtype or torch.get_default_dtype())  # (..., K)
    return (1.0 - eps) * one_hot + eps / n_classes


def label_smoothed_cross_entropy(logits: Tensor, target: Tensor, eps: float, ignore_index: int = -100) -> Tensor:
    """Mean over the non-padding positions of -sum_k q_k log softmax(logits)_k, q = label_smoothed_targets.

    logits: (N, K)   target: (N,) int64   returns a scalar (logits' dtype); positions whose target is
    ignore_index (padding) count neither in the sum nor in the mean. Equals
    F.cross_entropy(logits, target, label_smoothing=eps, ignore_index=ignore_index).
    """
    keep = target != ignore_index  # (N,) True = a real token
    safe = target.masked_fill(~keep, 0)  # (N,) any valid class for the padding rows: they are dropped below
    n_classes = logits.size(-1)
    one_hot = F.one_hot(safe, n_classes).to(logits.dtype)  # (N, K)
    q = (1.0 - eps) * one_hot + eps / n_classes  # (N, K) smoothed targets (label_smoothed_targets), rows sum to 1
    loss = -(q * torch.log_softmax(logits, dim=-1)).sum(dim=-1)  # (N,) one loss per position
    return (loss * keep).sum() / keep.sum()  # mean over the real tokens only


def inverted_dropout(
    x: Tensor, p: float, generator: torch.Generator | None = None, training: bool = True
) -> Tensor:
    """Dropout as nn.Dropout does it: zero each entry with probability p, multiply the kept ones by 1/(1-p).

    The scaling keeps the expectation: E[output] = (1 - p) * x / (1 - p) = x, so nothing has to
    change at test time, where (training=False) the function is the identity. p = 1 gives zeros.

    generator: draws the mask (on the generator's device; a CPU generator on the CPU), or None.
    x: any shape   returns x's shape, dtype and device
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return torch.zeros_like(x)
    # a generator draws on its own device (a CPU generator on the CPU); the mask then moves to x's device
    device = x.device if generator is None else generator.device
    keep = (torch.rand(x.shape, generator=generator, device=device) >= p).to(x.device)  # True with probability 1 - p
    return x * keep / (1.0 - p)


def parameter_grad_norms(layers) -> list[float]:
    """The L2 norm of the gradient of all parameters of each layer, in order (call after backward()).

    layers: an iterable of nn.Module (e.g. an nn.ModuleList of encoder layers).
    """
    norms = []
    for layer in layers:
        grads = [p.grad.flatten() for p in layer.parameters() if p.grad is not None]
        norms.append(torch.cat(grads).norm().item() if grads else 0.0)
    return norms


def ffn_parameter_count(d_model: int, d_ff: int) -> int:
    """Closed form: W_1 (d_model x d_ff) + b_1 (d_ff) + W_2 (d_ff x d_model) + b_2 (d_model)."""
    return 2 * d_model * d_ff + d_ff + d_model


__all__ = [
    "layer_norm",
    "LayerNorm",
    "FeedForward",
    "EncoderLayer",
    "copy_to_torch_encoder_layer",
    "noam_lr",
    "label_smoothed_targets",
    "label_smoothed_cross_entropy",
    "inverted_dropout",
    "parameter_grad_norms",
    "ffn_parameter_count",
]


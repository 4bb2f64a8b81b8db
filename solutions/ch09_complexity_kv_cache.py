"""Reference solutions for chapter 09-complexity-kv-cache: the cost of attention and the KV cache.

This module is the single source of truth for the chapter's exercises: the instructor notebook's
solution cells are generated from these functions, and the hidden grading checks compare learners'
functions against them.

What is here:
- FLOP counting: `matmul_flops`, `attention_flops` (one multi-head self-attention layer, term by term),
  `decoder_forward_flops` and `generation_flops` (the tiny decoder below, with and without a cache);
- memory: `attention_matrix_bytes` (the n x n weights) and `kv_cache_bytes` (2 * L * h * d_k * n * bytes);
- the KV cache: `causal_mask_with_offset`, `attention_step` (one cached attention step as a pure function: it
  returns the grown cache, torch.cat style), `KVCache` (preallocated keys and values of one layer, and
  `fill_kv_cache`, the driver the exercises grade it through), `CausalSelfAttention` with `forward(x)` (full
  causal recomputation) and `forward_step(x_new, past)` (new tokens only, attending to the cached prefix), a
  small decoder-only `TinyDecoder`, and greedy `generate(..., use_cache, return_logits)`;
- measurement helpers: `median_time`, `loglog_slope`, `peak_rss_growth`.

Conventions used throughout the course:
- batch-first shapes, written as comments: (batch, heads, seq, d_k);
- boolean masks with True = "may attend" (the same convention as
  torch.nn.functional.scaled_dot_product_attention).

FLOP convention: a matrix product (m x k) @ (k x p) costs 2 * m * k * p FLOPs (one multiply and one add per
term), the convention of torch.utils.flop_counter.FlopCounterMode. Elementwise work on the n x n scores is
counted as 1 FLOP per element for the 1/sqrt(d_k) scale and SOFTMAX_FLOPS_PER_ELEMENT (= 5: max, subtract,
exp, sum, divide) for the softmax; these are conventions (an exp is really several instructions), and they
are small next to the matmuls (2 * d_k FLOPs per score).
"""

from __future__ import annotations

import ctypes
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

SOFTMAX_FLOPS_PER_ELEMENT = 5  # max, subtract the max, exp, sum, divide (exp counted as one FLOP)
MATMUL_TERMS = ("q_proj", "k_proj", "v_proj", "scores", "weighted_sum", "out_proj")


# --------------------------------------------------------------------------------------------------
# Counting FLOPs
# --------------------------------------------------------------------------------------------------


def matmul_flops(m: int, k: int, p: int, batch: int = 1) -> int:
    """FLOPs of `batch` products (m x k) @ (k x p): 2 * batch * m * k * p (a multiply and an add per term)."""
    return 2 * batch * m * k * p


def attention_flops(
    n: int,
    d_model: int,
    n_heads: int = 1,
    n_kv: int | None = None,
    *,
    batch: int = 1,
    output_projection: bool = True,
) -> dict[str, int]:
    """FLOPs of one multi-head self-attention layer (no biases), term by term.

    The layer projects the `n` new tokens to queries, keys and values (each d_model -> d_model, split into
    n_heads heads of width d_k = d_model // n_heads), lets the n queries attend to `n_kv` keys, and projects
    the result with W_O. Without a cache n_kv = n (the default); a cached decoding step has n = 1 and n_kv =
    the number of tokens so far. A causal mask does not change the count: the full n x n_kv score matrix is
    computed and the masked half is thrown away.

    Returns a dict with the FLOPs of
        q_proj, k_proj, v_proj   2 * n * d_model * d_model each               (the n d^2 terms)
        scores                   2 * h * n * n_kv * d_k  = 2 * n * n_kv * d_model   (Q K^T, the n^2 d term)
        scale                    h * n * n_kv                                  (divide by sqrt(d_k))
        softmax                  SOFTMAX_FLOPS_PER_ELEMENT * h * n * n_kv
        weighted_sum             2 * h * n * n_kv * d_k                        (A V, the other n^2 d term)
        out_proj                 2 * n * d_model * d_model                     (0 if output_projection=False)
        total                    the sum of the above
    all multiplied by `batch`.
    """
    if d_model % n_heads:
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    n_kv = n if n_kv is None else n_kv
    d_k = d_model // n_heads
    proj = matmul_flops(n, d_model, d_model, batch)  # (n, d_model) @ (d_model, d_model)
    elems = batch * n_heads * n * n_kv  # entries of the score tensor (batch, heads, n, n_kv)
    counts = {
        "q_proj": proj,
        "k_proj": proj,
        "v_proj": proj,
        "scores": matmul_flops(n, d_k, n_kv, batch * n_heads),  # (n, d_k) @ (d_k, n_kv) per head
        "scale": elems,
        "softmax": SOFTMAX_FLOPS_PER_ELEMENT * elems,
        "weighted_sum": matmul_flops(n, n_kv, d_k, batch * n_heads),  # (n, n_kv) @ (n_kv, d_k) per head
        "out_proj": proj if output_projection else 0,
    }
    counts["total"] = sum(counts.values())
    return counts


def attention_matrix_bytes(
    n: int, bytes_per_elem: int = 4, n_heads: int = 1, n_layers: int = 1, batch: int = 1
) -> int:
    """Bytes of the n x n attention-weight matrices: batch * n_layers * n_heads * n * n * bytes_per_elem."""
    return batch * n_layers * n_heads * n * n * bytes_per_elem


def kv_cache_bytes(
    n_layers: int, n_heads: int, d_k: int, seq_len: int, bytes_per_elem: int, batch: int = 1
) -> int:
    """Bytes of a KV cache: 2 (K and V) * n_layers * n_heads * d_k * seq_len * bytes_per_elem * batch.

    n_heads is the number of heads that *store* keys and values (with grouped-query attention, the number of
    K/V heads, which can be smaller than the number of query heads).
    """
    for name, value in [("n_layers", n_layers), ("n_heads", n_heads), ("d_k", d_k), ("seq_len", seq_len),
                        ("bytes_per_elem", bytes_per_elem), ("batch", batch)]:
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    return 2 * n_layers * n_heads * d_k * seq_len * bytes_per_elem * batch


# --------------------------------------------------------------------------------------------------
# The KV cache and a causal self-attention layer that can use it
# --------------------------------------------------------------------------------------------------


class KVCache:
    """Keys and values of one attention layer for the tokens processed so far, in preallocated buffers.

    k, v: (batch, heads, max_len, d_k) buffers, allocated once; the first `length` positions are filled.
    `append` writes the new tokens' keys and values after them (no copy of the old ones, unlike torch.cat)
    and returns views of everything cached so far.
    """

    def __init__(self, batch: int, n_heads: int, max_len: int, d_k: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None):
        self.k = torch.zeros(batch, n_heads, max_len, d_k, dtype=dtype, device=device)  # (B, H, max_len, d_k)
        self.v = torch.zeros(batch, n_heads, max_len, d_k, dtype=dtype, device=device)  # (B, H, max_len, d_k)
        self.max_len = max_len
        self.length = 0  # positions filled so far

    def append(self, k_new: Tensor, v_new: Tensor) -> tuple[Tensor, Tensor]:
        """k_new, v_new: (B, H, s, d_k) -> all cached keys and values (B, H, length + s, d_k) (views)."""
        start, s = self.length, k_new.size(2)
        if start + s > self.max_len:
            raise RuntimeError(f"KV cache full: {start} cached + {s} new > max_len {self.max_len}")
        self.k[:, :, start:start + s] = k_new  # the sequence dimension is dim 2
        self.v[:, :, start:start + s] = v_new
        self.length = start + s
        return self.k[:, :, :self.length], self.v[:, :, :self.length]


def kv_cache_nbytes(cache: KVCache) -> int:
    """Bytes held by a KVCache's two buffers (the whole preallocated capacity, filled or not)."""
    return cache.k.numel() * cache.k.element_size() + cache.v.numel() * cache.v.element_size()


def fill_kv_cache(k: Tensor, v: Tensor, max_len: int, *chunks: int):
    """Append k, v (B, H, T, d_k) to a new KVCache(..., max_len, ...) in chunks of the given sizes, as a decoder
    does (a prompt, then one token at a time). Returns (keys, values) of the last append and the cache's length."""
    b, h, _, d_k = k.shape
    cache = KVCache(b, h, max_len, d_k, dtype=k.dtype, device=k.device)
    k_all, v_all, start = None, None, 0
    for s in chunks:
        k_all, v_all = cache.append(k[:, :, start:start + s], v[:, :, start:start + s])
        start += s
    return k_all, v_all, cache.length


def causal_mask_with_offset(n_new: int, n_past: int, device: torch.device | str | None = None) -> Tensor:
    """(n_new, n_past + n_new) bool, True = may attend: new token i sits at position n_past + i and may
    attend to every key j <= n_past + i (all the cached prefix, itself, the new tokens before it)."""
    return torch.ones(n_new, n_past + n_new, dtype=torch.bool, device=device).tril(diagonal=n_past)


def attention_step(
    q_new: Tensor, k_new: Tensor, v_new: Tensor, k_cache: Tensor | None = None, v_cache: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """Attention for s new tokens with a KV cache, as a pure function (the cache is returned, not mutated).

    q_new, k_new, v_new: (B, H, s, d_k) queries, keys, values of the s new tokens
    k_cache, v_cache:    (B, H, p, d_k) keys and values of the p earlier tokens, or None when p = 0
    returns (out (B, H, s, d_k), k_all (B, H, p + s, d_k), v_all (B, H, p + s, d_k))

    New token i sits at position p + i and attends to keys 0 .. p + i: the causal mask shifted by p.
    Output row i equals row p + i of causal attention over all p + s tokens.
    """
    if k_cache is not None:
        k_new = torch.cat([k_cache, k_new], dim=-2)  # (B, H, p + s, d_k): the cached keys, then the new ones
        v_new = torch.cat([v_cache, v_new], dim=-2)
    s, total = q_new.size(-2), k_new.size(-2)
    mask = causal_mask_with_offset(s, total - s, device=q_new.device)  # (s, p + s)
    scores = q_new @ k_new.transpose(-2, -1) / math.sqrt(q_new.size(-1))  # (B, H, s, p + s)
    scores = scores.masked_fill(mask.logical_not(), float("-inf"))  # False = may not attend
    out = torch.softmax(scores, dim=-1) @ v_new  # (B, H, s, d_k)
    return out, k_new, v_new


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with W_Q, W_K, W_V, W_O (nn.Linear(d_model, d_model, bias=False)).

    forward(x)                x: (B, T, D) -> (B, T, D), every position recomputed from scratch
    forward_step(x_new, past) x_new: (B, s, D), past: (keys, values) (B, H, p, d_k) of the p earlier tokens or
                              None -> (out (B, s, D), (keys, values) of all p + s tokens): the new tokens attend
                              to the cached prefix and to themselves (causally).
    """

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model, bias=False)
        self.w_k = nn.Linear(d_model, d_model, bias=False)
        self.w_v = nn.Linear(d_model, d_model, bias=False)
        self.w_o = nn.Linear(d_model, d_model, bias=False)

    def _heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, self.d_k).transpose(1, 2)  # (B, T, D) -> (B, H, T, d_k)

    def _merge(self, x: Tensor) -> Tensor:
        b, _, t, _ = x.shape
        return x.transpose(1, 2).reshape(b, t, self.d_model)  # (B, H, T, d_k) -> (B, T, D)

    def forward(self, x: Tensor) -> Tensor:
        out, _ = self.forward_step(x, None)  # no cache: every position, under the causal mask
        return out

    def forward_step(self, x_new: Tensor, past: tuple[Tensor, Tensor] | None):
        q, k, v = self._heads(self.w_q(x_new)), self._heads(self.w_k(x_new)), self._heads(self.w_v(x_new))
        out, k_all, v_all = attention_step(q, k, v, *(past or (None, None)))  # (B, H, s, d_k)
        return self.w_o(self._merge(out)), (k_all, v_all)  # (B, s, D), the cache of all p + s tokens


# --------------------------------------------------------------------------------------------------
# A tiny decoder-only model and greedy generation
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecoderConfig:
    vocab_size: int = 64
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 256
    max_len: int = 256


class DecoderBlock(nn.Module):
    """Pre-LN block: x + attn(ln1(x)), then + ffn(ln2(x)). LayerNorm and the FFN act on each position
    separately, so only the attention needs a cache."""

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg.d_model, cfg.n_heads)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.ff = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff, bias=False), nn.GELU(),
                                nn.Linear(cfg.d_ff, cfg.d_model, bias=False))

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_step(x, None)[0]

    def forward_step(self, x_new: Tensor, past):
        a, present = self.attn.forward_step(self.ln1(x_new), past)
        x_new = x_new + a
        return x_new + self.ff(self.ln2(x_new)), present


class TinyDecoder(nn.Module):
    """Decoder-only language model: token + learned position embeddings, n_layers DecoderBlocks, LayerNorm,
    a linear head to vocabulary logits. TinyDecoder(cfg) or TinyDecoder(vocab_size=..., d_model=..., ...).

    forward(idx)               idx: (B, T) token ids -> logits (B, T, vocab), recomputing every position
    forward_step(idx, caches)  idx: (B, s) the *new* token ids -> logits (B, s, vocab); `caches` (from
                               new_cache()) holds each layer's keys and values and is updated in place
    """

    def __init__(self, cfg: DecoderConfig | None = None, **sizes):
        super().__init__()
        cfg = cfg or DecoderConfig(**sizes)
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(DecoderBlock(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def new_cache(self, batch: int) -> list:
        """An empty cache: one entry per layer, None until the layer has seen tokens, then its (keys, values)."""
        return [None] * len(self.blocks)

    def _embed(self, idx: Tensor, start: int) -> Tensor:
        t = idx.size(1)
        if start + t > self.cfg.max_len:
            raise ValueError(f"sequence of {start + t} tokens is longer than max_len={self.cfg.max_len}")
        pos = torch.arange(start, start + t, device=idx.device)  # positions continue after the cached ones
        return self.tok_emb(idx) + self.pos_emb(pos)  # (B, t, D)

    def forward(self, idx: Tensor) -> Tensor:
        return self.forward_step(idx, self.new_cache(idx.size(0)))

    def forward_step(self, idx: Tensor, caches: list) -> Tensor:
        x = self._embed(idx, 0 if caches[0] is None else caches[0][0].size(2))
        for i, block in enumerate(self.blocks):
            x, caches[i] = block.forward_step(x, caches[i])
        return self.head(self.ln_f(x))  # (B, s, vocab)


@torch.no_grad()
def generate(model: TinyDecoder, idx: Tensor, max_new_tokens: int, use_cache: bool = True,
             return_logits: bool = False):
    """Greedy decoding: append the most likely next token max_new_tokens times.

    idx: (B, P) prompt token ids, P >= 1 -> (B, P + max_new_tokens); with return_logits=True also the logits
    each new token was chosen from, (B, max_new_tokens, vocab).
    use_cache=False runs the whole sequence through the model at every step (P, P+1, ..., P+T-1 tokens);
    use_cache=True runs the prompt once (filling the caches) and then only the newest token.
    """
    chosen_from = []
    if use_cache:
        caches = model.new_cache(idx.size(0))
    for step in range(max_new_tokens):
        if not use_cache:
            logits = model(idx)  # (B, t, vocab): everything again
        elif step == 0:
            logits = model.forward_step(idx, caches)  # (B, P, vocab): the prompt, once
        else:
            logits = model.forward_step(idx[:, -1:], caches)  # (B, 1, vocab): only the newest token
        chosen_from.append(logits[:, -1])  # (B, vocab)
        next_id = logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
        idx = torch.cat([idx, next_id], dim=1)
    if return_logits:
        return idx, torch.stack(chosen_from, dim=1)  # (B, max_new_tokens, vocab)
    return idx


def decoder_forward_flops(cfg: DecoderConfig, n: int, n_kv: int | None = None, batch: int = 1,
                          matmul_only: bool = False) -> int:
    """Matmul and softmax FLOPs of TinyDecoder on n new tokens attending to n_kv keys (default n).

    Per layer: attention_flops (projections, scores, scale, softmax, A V, W_O) + the FFN's two matmuls
    2 * 2 * n * d_model * d_ff; plus the output head 2 * n * d_model * vocab. Embeddings, LayerNorms, GELU and
    residual additions (O(n * d) each) are not counted. matmul_only=True leaves out the scale and softmax
    terms too (what torch.utils.flop_counter.FlopCounterMode counts).
    """
    attn = attention_flops(n, cfg.d_model, cfg.n_heads, n_kv, batch=batch)
    per_layer = sum(attn[key] for key in MATMUL_TERMS) if matmul_only else attn["total"]
    per_layer += 2 * matmul_flops(n, cfg.d_model, cfg.d_ff, batch)
    return cfg.n_layers * per_layer + matmul_flops(n, cfg.d_model, cfg.vocab_size, batch)


def generation_flops(cfg: DecoderConfig, prompt_len: int, max_new_tokens: int, use_cache: bool, batch: int = 1,
                     matmul_only: bool = False) -> int:
    """FLOPs (as decoder_forward_flops counts them) of generate(model, prompt, max_new_tokens, use_cache).

    Without a cache, step t runs the full model on t tokens, t = P, ..., P + T - 1.
    With a cache, the prompt runs once (P tokens), then T - 1 steps of one token attending to t keys,
    t = P + 1, ..., P + T - 1.
    """
    p, t_new = prompt_len, max_new_tokens
    if t_new <= 0:
        return 0
    if not use_cache:
        return sum(decoder_forward_flops(cfg, t, t, batch, matmul_only) for t in range(p, p + t_new))
    return decoder_forward_flops(cfg, p, p, batch, matmul_only) + sum(
        decoder_forward_flops(cfg, 1, t, batch, matmul_only) for t in range(p + 1, p + t_new))


# --------------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------------


def median_time(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
    """Median wall-clock seconds of fn() over `repeats` runs (time.perf_counter), after `warmup` untimed runs.

    The median ignores the occasional slow run (another process, a page fault, the first touch of memory).
    """
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def loglog_slope(x, y) -> float:
    """Least-squares slope of log(y) against log(x): the exponent p in y ~ c * x^p."""
    lx = torch.log(torch.as_tensor(x, dtype=torch.float64))
    ly = torch.log(torch.as_tensor(y, dtype=torch.float64))
    lx_c = lx - lx.mean()
    return float((lx_c * (ly - ly.mean())).sum() / (lx_c * lx_c).sum())


def _proc_status_bytes(key: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024  # the kernel reports kB
    raise RuntimeError(f"{key} not found in /proc/self/status")


def peak_rss_growth(fn: Callable[[], object]) -> int:
    """Bytes by which this process's peak resident memory (RSS) grew above its current RSS while fn() ran.

    Linux only. Free heap memory is first handed back to the OS (glibc malloc_trim), then the kernel's
    peak-RSS counter VmHWM is reset to the current RSS (writing 5 to /proc/self/clear_refs); after fn() the
    new VmHWM minus the starting RSS is the growth. This sees *every* allocation, including scratch buffers
    that a fused kernel allocates and frees internally, but only at page granularity, and memory that the
    allocator reuses without touching new pages is not counted: treat it as an estimate of the peak extra
    memory, good to within a small factor for allocations of a megabyte and more.
    """
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: the measurement still works, with more reuse of already-resident memory
    base = _proc_status_bytes("VmRSS:")
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")  # reset VmHWM to the current RSS
    except OSError as e:
        raise RuntimeError("peak_rss_growth needs Linux with a writable /proc/self/clear_refs") from e
    fn()
    return max(0, _proc_status_bytes("VmHWM:") - base)

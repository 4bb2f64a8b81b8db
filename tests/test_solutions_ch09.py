"""The chapter 09 reference: FLOP counts, KV-cache sizes, and cached decoding against full recomputation.

Tolerances:
- float64 cached vs full recomputation, atol=1e-12: both paths do the same arithmetic on O(1) values, only
  in differently shaped matmuls (so the summation order can differ); float64 rounding is ~1e-16 per operation.
- float32, atol=1e-5: the same comparison with float32 rounding (~1e-7 per operation, a few dozen operations
  deep through a 2-layer model with LayerNorm).
- FLOP counts and byte counts are integers and must match exactly.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from solutions import ch09_complexity_kv_cache as ref

ATOL64 = 1e-12
ATOL32 = 1e-5

CFG = ref.DecoderConfig(vocab_size=37, d_model=24, n_heads=3, n_layers=2, d_ff=48, max_len=40)


def make_model(dtype=torch.float64, cfg=CFG, seed=0):
    torch.manual_seed(seed)
    return ref.TinyDecoder(cfg).to(dtype).eval()


# ---------------------------------------------------------------- the cache equals full recomputation


@pytest.mark.parametrize("chunks", [[1] * 9, [4, 1, 1, 3], [9], [2, 5, 2]])
def test_cached_steps_equal_full_recomputation_float64(gen, chunks):
    """Feeding the sequence in chunks (a prompt, then single tokens) through the cache gives the same logits
    at every position as one full causal forward pass."""
    model = make_model()
    idx = torch.randint(0, CFG.vocab_size, (2, sum(chunks)), generator=gen)
    full = model(idx)  # (B, T, vocab)
    caches = model.new_cache(2)
    pieces, start = [], 0
    for s in chunks:
        pieces.append(model.forward_step(idx[:, start:start + s], caches))
        start += s
    stepped = torch.cat(pieces, dim=1)
    assert caches[0][0].size(2) == sum(chunks), "every processed token must leave its k, v in the cache"
    torch.testing.assert_close(stepped, full, atol=ATOL64, rtol=0,
                               msg=lambda m: f"cached logits differ from full recomputation (chunks {chunks}): {m}")


def test_cached_steps_equal_full_recomputation_float32(gen):
    model = make_model(torch.float32)
    idx = torch.randint(0, CFG.vocab_size, (3, 12), generator=gen)
    with torch.no_grad():
        full = model(idx)
        caches = model.new_cache(3)
        stepped = torch.cat([model.forward_step(idx[:, t:t + 1], caches) for t in range(12)], dim=1)
    torch.testing.assert_close(stepped, full, atol=ATOL32, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("prompt_len", [1, 5])
def test_generate_with_and_without_cache_agree(gen, dtype, prompt_len):
    model = make_model(dtype)
    prompt = torch.randint(0, CFG.vocab_size, (2, prompt_len), generator=gen)
    cached = ref.generate(model, prompt, 20, use_cache=True)
    uncached = ref.generate(model, prompt, 20, use_cache=False)
    assert cached.shape == (2, prompt_len + 20)
    assert torch.equal(cached[:, :prompt_len], prompt), "generate must keep the prompt"
    assert torch.equal(cached, uncached), f"cached and uncached greedy decoding disagree:\n{cached}\n{uncached}"


def test_step_attention_is_last_row_of_causal_attention(gen):
    """One query against all cached keys equals the last row of causal attention over the whole sequence,
    computed by PyTorch (F.scaled_dot_product_attention, is_causal=True) with the layer's own weights."""
    torch.manual_seed(1)
    d_model, n_heads, T = 16, 4, 7
    layer = ref.CausalSelfAttention(d_model, n_heads).double()
    x = torch.randn(2, T, d_model, generator=gen, dtype=torch.float64)

    def heads(t):  # (B, T, D) -> (B, H, T, d_k)
        return t.view(2, -1, n_heads, d_model // n_heads).transpose(1, 2)

    with torch.no_grad():
        q, k, v = heads(layer.w_q(x)), heads(layer.w_k(x)), heads(layer.w_v(x))
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, d_k)
        expected = layer.w_o(attn.transpose(1, 2).reshape(2, T, d_model))  # (B, T, D)
        past = None
        for t in range(T):
            out_t, past = layer.forward_step(x[:, t:t + 1], past)  # (B, 1, D): one query
            torch.testing.assert_close(
                out_t[:, 0], expected[:, t], atol=ATOL64, rtol=0,
                msg=lambda m: f"step {t}: one-query attention != row {t} of causal attention: {m}")
        torch.testing.assert_close(layer(x), expected, atol=ATOL64, rtol=0)


@pytest.mark.parametrize("chunks", [[1] * 6, [3, 1, 2], [6]])
def test_attention_step_matches_causal_sdpa(gen, chunks):
    """The pure cached step, fed chunk by chunk, reproduces F.scaled_dot_product_attention(is_causal=True)."""
    q, k, v = (torch.randn(2, 3, sum(chunks), 4, generator=gen, dtype=torch.float64) for _ in range(3))
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, d_k)
    k_cache = v_cache = None
    outs, start = [], 0
    for s in chunks:
        sl = slice(start, start + s)
        out, k_cache, v_cache = ref.attention_step(q[:, :, sl], k[:, :, sl], v[:, :, sl], k_cache, v_cache)
        outs.append(out)
        start += s
    assert k_cache.shape == k.shape, "the returned cache must hold every key so far"
    torch.testing.assert_close(torch.cat(outs, dim=2), expected, atol=ATOL64, rtol=0)


def test_full_forward_matches_nn_multihead_attention(gen):
    """The full (uncached) layer equals nn.MultiheadAttention with the same weights and a causal mask.
    Note nn.MultiheadAttention's opposite boolean convention: True = may NOT attend."""
    torch.manual_seed(2)
    d_model, n_heads, T = 12, 3, 6
    layer = ref.CausalSelfAttention(d_model, n_heads).double()
    mha = nn.MultiheadAttention(d_model, n_heads, bias=False, batch_first=True).double()
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([layer.w_q.weight, layer.w_k.weight, layer.w_v.weight]))
        mha.out_proj.weight.copy_(layer.w_o.weight)
        x = torch.randn(2, T, d_model, generator=gen, dtype=torch.float64)
        blocked = ~torch.ones(T, T, dtype=torch.bool).tril()
        expected, _ = mha(x, x, x, attn_mask=blocked, need_weights=False)
        torch.testing.assert_close(layer(x), expected, atol=ATOL64, rtol=0)


def test_offset_causal_mask():
    mask = ref.causal_mask_with_offset(2, 3)
    expected = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(mask, expected), f"new token i at position 3 + i sees keys 0..3 + i, got\n{mask}"
    assert torch.equal(ref.causal_mask_with_offset(4, 0), torch.ones(4, 4, dtype=torch.bool).tril())


def test_cache_overflow():
    cache = ref.KVCache(1, 2, 3, 4)
    k = torch.zeros(1, 2, 2, 4)
    cache.append(k, k)
    with pytest.raises(RuntimeError, match="full"):
        cache.append(k, k)


@pytest.mark.parametrize("chunks", [(3, 1, 1), (1, 1, 1, 1, 1), (5,)])
def test_kv_cache_holds_what_was_appended(gen, chunks):
    k, v = (torch.randn(2, 3, 5, 4, generator=gen, dtype=torch.float64) for _ in range(2))
    k_all, v_all, length = ref.fill_kv_cache(k, v, 7, *chunks)
    assert length == 5 and torch.equal(k_all, k) and torch.equal(v_all, v)


def test_generate_returns_the_logits_it_chose_from(gen):
    model = make_model()
    prompt = torch.randint(0, CFG.vocab_size, (2, 3), generator=gen)
    tokens, logits = ref.generate(model, prompt, 6, return_logits=True)
    assert logits.shape == (2, 6, CFG.vocab_size) and torch.equal(logits.argmax(-1), tokens[:, 3:])
    with torch.no_grad():
        full = model(tokens)[:, 2:-1]  # the logits at positions P-1 .. P+T-2 choose tokens P .. P+T-1
    torch.testing.assert_close(logits, full, atol=ATOL64, rtol=0)
    assert ref.TinyDecoder(vocab_size=5, d_model=4, n_heads=2, n_layers=1, d_ff=8, max_len=6).cfg.vocab_size == 5


# ---------------------------------------------------------------- FLOP counts


def test_attention_flops_by_hand():
    # n = 2 tokens, d_model = 4, one head: each projection (2x4)@(4x4) = 2*2*4*4 = 64 FLOPs;
    # Q K^T (2x4)@(4x2) = 32; A V (2x2)@(2x4) = 32; 4 score entries: scale 4, softmax 5*4 = 20.
    c = ref.attention_flops(2, 4)
    assert c == {"q_proj": 64, "k_proj": 64, "v_proj": 64, "scores": 32, "scale": 4, "softmax": 20,
                 "weighted_sum": 32, "out_proj": 64, "total": 344}, c


@pytest.mark.parametrize("n,d_model,n_heads", [(5, 8, 2), (16, 32, 4), (40, 16, 1)])
def test_attention_flops_closed_form(n, d_model, n_heads):
    c = ref.attention_flops(n, d_model, n_heads)
    assert sum(c[k] for k in ("q_proj", "k_proj", "v_proj", "out_proj")) == 8 * n * d_model**2  # the n d^2 part
    assert c["scores"] + c["weighted_sum"] == 4 * n * n * d_model  # the n^2 d part, independent of n_heads
    assert c["scale"] + c["softmax"] == 6 * n_heads * n * n


@pytest.mark.parametrize("batch,n,d_model,n_heads", [(1, 7, 16, 2), (3, 10, 24, 4), (2, 1, 8, 1)])
def test_attention_flops_matches_flop_counter_mode(batch, n, d_model, n_heads):
    """The matmul terms equal what PyTorch's FlopCounterMode counts from the actual matmul sizes."""
    torch.manual_seed(3)
    layer = ref.CausalSelfAttention(d_model, n_heads)
    x = torch.randn(batch, n, d_model)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        layer(x)
    c = ref.attention_flops(n, d_model, n_heads, batch=batch)
    assert counter.get_total_flops() == sum(c[k] for k in ref.MATMUL_TERMS)


def test_cached_step_flops_match_flop_counter_mode():
    torch.manual_seed(4)
    layer = ref.CausalSelfAttention(16, 4)
    with torch.no_grad():
        _, past = layer.forward_step(torch.randn(2, 6, 16), None)  # 6 cached tokens
        with FlopCounterMode(display=False) as counter:
            layer.forward_step(torch.randn(2, 1, 16), past)  # 1 query, 7 keys
    c = ref.attention_flops(1, 16, 4, n_kv=7, batch=2)
    assert counter.get_total_flops() == sum(c[k] for k in ref.MATMUL_TERMS)


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("prompt_len", [1, 4])
def test_generation_flops_match_flop_counter_mode(use_cache, prompt_len):
    model = make_model(torch.float32)
    prompt = torch.zeros(2, prompt_len, dtype=torch.long)
    with FlopCounterMode(display=False) as counter:
        ref.generate(model, prompt, 9, use_cache=use_cache)
    expected = ref.generation_flops(CFG, prompt_len, 9, use_cache, batch=2, matmul_only=True)
    assert counter.get_total_flops() == expected, f"use_cache={use_cache}"


def test_cache_saves_flops_growing_with_length():
    ratios = [ref.generation_flops(CFG, 1, t, False) / ref.generation_flops(CFG, 1, t, True) for t in (4, 16, 32)]
    assert ratios[0] > 1 and ratios == sorted(ratios), f"uncached/cached FLOP ratio should grow with T: {ratios}"


# ---------------------------------------------------------------- bytes


def test_kv_cache_bytes_by_hand():
    assert ref.kv_cache_bytes(1, 1, 1, 1, 1) == 2  # one key and one value of one byte
    assert ref.kv_cache_bytes(2, 3, 4, 5, 2) == 2 * 2 * 3 * 4 * 5 * 2 == 480
    assert ref.kv_cache_bytes(2, 3, 4, 5, 2, batch=3) == 3 * 480
    # 12 layers, 12 heads of 64, 1024 tokens, float32: 2*12*12*64*1024*4 bytes = 72 MiB
    assert ref.kv_cache_bytes(12, 12, 64, 1024, 4) == 72 * 2**20
    assert ref.kv_cache_bytes(3, 2, 8, 0, 4) == 0
    with pytest.raises(ValueError):
        ref.kv_cache_bytes(1, 1, 1, -1, 4)


def test_kv_cache_bytes_match_the_buffers():
    caches = [ref.KVCache(3, CFG.n_heads, CFG.max_len, CFG.d_model // CFG.n_heads) for _ in range(CFG.n_layers)]
    held = sum(ref.kv_cache_nbytes(c) for c in caches)
    assert held == ref.kv_cache_bytes(CFG.n_layers, CFG.n_heads, CFG.d_model // CFG.n_heads, CFG.max_len, 4, batch=3)


def test_attention_matrix_bytes():
    assert ref.attention_matrix_bytes(512) == 2**20  # 512^2 float32 = 1 MiB
    assert ref.attention_matrix_bytes(32768) == 4 * 2**30  # 4 GiB
    assert ref.attention_matrix_bytes(8, bytes_per_elem=2, n_heads=3, n_layers=2, batch=5) == 5 * 2 * 3 * 64 * 2


# ---------------------------------------------------------------- measuring


def test_loglog_slope_recovers_exponents():
    xs = [16, 32, 64, 128]
    assert math.isclose(ref.loglog_slope(xs, [3 * x**2 for x in xs]), 2.0, rel_tol=1e-12)
    assert math.isclose(ref.loglog_slope(xs, [0.5 * x for x in xs]), 1.0, rel_tol=1e-12)


def test_median_time_is_positive_and_runs_fn():
    calls = []
    t = ref.median_time(lambda: calls.append(1), repeats=3, warmup=2)
    assert t >= 0 and len(calls) == 5


def test_peak_rss_growth_sees_a_large_allocation():
    try:
        ref.peak_rss_growth(lambda: None)
    except RuntimeError:
        pytest.skip("needs Linux /proc/self/clear_refs")
    size = 64 * 2**20  # 64 MiB, touched by torch.ones
    grew = ref.peak_rss_growth(lambda: torch.ones(size // 4))
    assert 0.9 * size <= grew <= 1.5 * size, f"peak RSS grew by {grew} bytes for a {size}-byte tensor"

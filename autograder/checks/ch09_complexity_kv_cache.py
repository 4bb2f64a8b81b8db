"""Checks for chapter 09-complexity-kv-cache.

- *_MISTAKES: the typical wrong implementations, used to name a learner's mistake (the builder evaluates them on
  the visible-check inputs, the hidden checks on grading-time inputs).
- FORBIDDEN: the built-ins the chapter's functions must not call; SHORTCUT_NAMES: names the static reading of a
  solution cell refuses. Both composed from autograder/checks/builtins.py groups.
- CHECKS: the hidden check of each graded cell, by grade id.

Counts (matmul_flops, attention_flops, kv_cache_bytes) are exact integers, called once per case (dtypes=None, no
meta pass), as chapter 05's size-taking functions. The KV cache class is graded through `fill_kv_cache`, a driver
the notebook gives in a read-only cell (it appends chunks and returns what the cache holds); `generate` is called
on a TinyDecoder the grader builds in the sandbox (cases.Model) from the notebook's course-given class, whose
attention calls the learner's `attention_step`: `callees=("attention_step",)`, so a mistake there costs
attention_step's points only. Tokens are compared exactly; the hidden models are drawn until every greedy choice
has a comfortable margin (top-2 logit gap >= MIN_MARGIN in float64), so rounding can never flip a token.
"""

import math

import torch

from autograder.checks import builtins
from autograder.checks import Case, Dev, Returned, function_check, generator
from autograder.checks.cases import Model, grader_weights
from solutions import ch09_complexity_kv_cache as ref

ATTENTION_NAMES = ("q_proj", "k_proj", "v_proj", "scores", "scale", "softmax", "weighted_sum", "out_proj", "total")

# --- Known mistakes: counting ------------------------------------------------------------------------

MATMUL_MISTAKES = {
    "one FLOP per multiply-add (m * k * p): this course counts a multiply and an add, 2 * m * k * p": lambda m, k, p, batch=1: batch * m * k * p,
    "the batch is ignored: `batch` products cost batch times one": lambda m, k, p, batch=1: 2 * m * k * p,
}


def _attention_variant(n, d_model, n_heads=1, n_kv=None, *, batch=1, output_projection=True, macs=False, no_elementwise=False,
                       heads_in_elementwise=True, d_per_head=None, ignore_n_kv=False, ignore_batch=False):
    c = dict(ref.attention_flops(n, d_model, n_heads, n if ignore_n_kv else n_kv, batch=1 if ignore_batch else batch,
                                 output_projection=output_projection))
    c.pop("total")
    if macs:
        for key in ref.MATMUL_TERMS:
            c[key] //= 2
    if no_elementwise:
        c["scale"] = c["softmax"] = 0
    if not heads_in_elementwise:
        c["scale"] //= n_heads
        c["softmax"] //= n_heads
    if d_per_head:
        c["scores"] *= n_heads
        c["weighted_sum"] *= n_heads
    c["total"] = sum(c.values())
    return c


ATTENTION_MISTAKES = {
    "matmuls counted as multiply-adds (m * k * p): this course counts 2 * m * k * p FLOPs per product (use matmul_flops)":
        lambda *a, **k: _attention_variant(*a, **k, macs=True),
    "scale and softmax not counted: 1 FLOP per score for the scale and SOFTMAX_FLOPS_PER_ELEMENT per score for the softmax":
        lambda *a, **k: _attention_variant(*a, **k, no_elementwise=True),
    "scale and softmax counted for one head: every head has its own n x n_kv scores (h * n * n_kv of them)":
        lambda *a, **k: _attention_variant(*a, **k, heads_in_elementwise=False),
    "each head's scores and weighted sum computed with width d_model: a head has width d_k = d_model // n_heads":
        lambda *a, **k: _attention_variant(*a, **k, d_per_head=True),
    "n_kv ignored (the queries attend to n keys): a cached step has n = 1 query and n_kv keys":
        lambda *a, **k: _attention_variant(*a, **k, ignore_n_kv=True),
    "the batch is ignored: every term is multiplied by `batch`":
        lambda *a, **k: _attention_variant(*a, **k, ignore_batch=True),
}


def _bytes(n_layers, n_heads, d_k, seq_len, bytes_per_elem, batch=1, factor=2):
    return factor * n_layers * n_heads * d_k * seq_len * bytes_per_elem * batch


KV_BYTES_MISTAKES = {
    "the factor 2 is missing: the cache holds keys AND values": lambda *a, **k: _bytes(*a, **k, factor=1),
    "the layers are missing: every layer has its own cache": lambda L, h, d_k, n, b, batch=1: _bytes(1, h, d_k, n, b, batch),
    "the batch is ignored: every sequence of the batch has its own cache": lambda L, h, d_k, n, b, batch=1: _bytes(L, h, d_k, n, b, 1),
    "bytes_per_elem is ignored (4 bytes, float32, assumed): use the bytes per number you are given (2 for float16)":
        lambda L, h, d_k, n, b, batch=1: _bytes(L, h, d_k, n, 4, batch),
}

# --- Known mistakes: the mask, the cached step, the cache ----------------------------------------------

INVERTED = "inverted convention (True = masked): in this course True means 'may attend'"


def _tril(n_new, n_past, diagonal, device=None):
    return torch.ones(n_new, n_past + n_new, dtype=torch.bool, device=device).tril(diagonal=diagonal)


MASK_MISTAKES = {
    "the diagonal is at 0 (tril() with no offset): new token i sits at position n_past + i, so tril(diagonal=n_past)":
        lambda n_new, n_past, device=None: _tril(n_new, n_past, 0, device),
    "off by one: diagonal=n_past - 1 hides each new token's own key": lambda n_new, n_past, device=None: _tril(n_new, n_past, n_past - 1, device),
    "off by one: diagonal=n_past + 1 shows each new token the next one": lambda n_new, n_past, device=None: _tril(n_new, n_past, n_past + 1, device),
    INVERTED: lambda n_new, n_past, device=None: ~ref.causal_mask_with_offset(n_new, n_past, device),
    "the mask is (n_new, n_new), the new tokens only: the keys are the n_past cached ones AND the new ones, (n_new, n_past + n_new)":
        lambda n_new, n_past, device=None: torch.ones(n_new, n_new, dtype=torch.bool, device=device).tril(),
}


def _step_variant(q_new, k_new, v_new, k_cache=None, v_cache=None, *, mask="offset", cache_after=False, scale=True, grow=True,
                  by_d_k=False):
    if k_cache is not None:
        k_all = torch.cat([k_new, k_cache] if cache_after else [k_cache, k_new], dim=-2)
        v_all = torch.cat([v_new, v_cache] if cache_after else [v_cache, v_new], dim=-2)
    else:
        k_all, v_all = k_new, v_new
    s, total = q_new.size(-2), k_all.size(-2)
    scores = q_new @ k_all.transpose(-2, -1) / (q_new.size(-1) if by_d_k else math.sqrt(q_new.size(-1)) if scale else 1.0)
    if mask == "offset":
        keep = ref.causal_mask_with_offset(s, total - s, device=q_new.device)
    elif mask == "top_left":
        keep = torch.ones(s, total, dtype=torch.bool, device=q_new.device).tril()
    else:
        keep = None
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v_all
    return (out, k_all, v_all) if grow else (out, k_new, v_new)


STEP_MISTAKES = {
    "no mask: with several new tokens (a prompt), each would see the new tokens after it; new token i may attend keys 0 .. p + i":
        lambda *a: _step_variant(*a, mask=None),
    "the causal mask is not shifted by the p cached tokens (tril() with no offset): new token i sits at position p + i":
        lambda *a: _step_variant(*a, mask="top_left"),
    "the new keys are put BEFORE the cached ones (torch.cat([k_new, k_cache])): the cache holds the earlier positions, so it comes first":
        lambda *a: _step_variant(*a, cache_after=True),
    "the returned cache is only the new tokens' keys and values: return all p + s of them, the cache for the next step":
        lambda *a: _step_variant(*a, grow=False),
    "missing scale: the scores are divided by sqrt(d_k)": lambda *a: _step_variant(*a, scale=False),
    "the scores are divided by d_k instead of sqrt(d_k)": lambda *a: _step_variant(*a, by_d_k=True),
}


class _Cache:
    """ref.KVCache with one mistake switched on (for the catalogue of fill_kv_cache)."""

    def __init__(self, batch, n_heads, max_len, d_k, dtype=torch.float32, device=None, *, mistake=None):
        self.mistake = mistake
        dtype = torch.float32 if mistake == "dtype" else dtype
        self.k = torch.zeros(batch, n_heads, max_len, d_k, dtype=dtype, device=device)
        self.v = torch.zeros(batch, n_heads, max_len, d_k, dtype=dtype, device=device)
        self.length = 0

    def append(self, k_new, v_new):
        start = 0 if self.mistake == "from_zero" else self.length
        s = k_new.size(2)
        self.k[:, :, start:start + s] = k_new
        self.v[:, :, start:start + s] = v_new
        if self.mistake != "no_advance":
            self.length += s
        if self.mistake == "whole_buffer":
            return self.k, self.v
        if self.mistake == "new_only":
            return k_new, v_new
        return self.k[:, :, :self.length], self.v[:, :, :self.length]


def _fill_with(mistake):
    def fill(k, v, max_len, *chunks):
        b, h, _, d_k = k.shape
        cache = _Cache(b, h, max_len, d_k, dtype=k.dtype, device=k.device, mistake=mistake)
        k_all = v_all = None
        start = 0
        for s in chunks:
            k_all, v_all = cache.append(k[:, :, start:start + s], v[:, :, start:start + s])
            start += s
        return k_all, v_all, cache.length

    return fill


CACHE_MISTAKES = {
    "every append writes at position 0 (the start is not self.length): each chunk overwrites the one before": _fill_with("from_zero"),
    "append returns only the new keys and values: return everything cached so far, self.k[:, :, :self.length]": _fill_with("new_only"),
}
CACHE_SHAPE_MISTAKES = {
    "self.length is never advanced: after writing s new positions add s to it (the next append writes after them)": _fill_with("no_advance"),
    "append returns the whole buffer, the unfilled positions too: return the filled part, [:, :, :self.length]": _fill_with("whole_buffer"),
}


# --- Known mistakes: generation -------------------------------------------------------------------------


@torch.no_grad()
def _generate_variant(model, idx, max_new_tokens, use_cache=True, return_logits=False, *, mistake):
    chosen = []
    caches = model.new_cache(idx.size(0))
    for step in range(max_new_tokens):
        if not use_cache:
            logits = model(idx)
        elif mistake == "new_cache_each_step":
            logits = model.forward_step(idx if step == 0 else idx[:, -1:], model.new_cache(idx.size(0)) if step else caches)
        elif mistake == "last_prompt_token_only":
            logits = model.forward_step(idx[:, -1:], caches)  # the prompt's earlier tokens never enter the cache
        else:
            logits = model.forward_step(idx if step == 0 else idx[:, -1:], caches)
        row = logits[:, 0] if mistake == "first_position" else logits[:, -1]
        chosen.append(row)
        idx = torch.cat([idx, row.argmax(dim=-1, keepdim=True)], dim=1)
    return (idx, torch.stack(chosen, dim=1)) if return_logits else idx


GENERATE_MISTAKES = {
    "a new cache at every step: the newest token then attends to itself only; create the cache once, before the loop":
        lambda *a, **k: _generate_variant(*a, **k, mistake="new_cache_each_step"),
    "only the last prompt token is fed at the first step: the whole prompt must go through the model once, to fill the cache":
        lambda *a, **k: _generate_variant(*a, **k, mistake="last_prompt_token_only"),
    "the next token is chosen from the logits of the first position (logits[:, 0]): it is predicted by the last one, logits[:, -1]":
        lambda *a, **k: _generate_variant(*a, **k, mistake="first_position"),
}

def mistake_values(catalogue, *args, **kwargs):
    """What each mistake of a catalogue of counting functions gives on these sizes (for the visible checks)."""
    return [wrong(*args, **kwargs) for wrong in catalogue.values()]


# --- Hints for errors ---------------------------------------------------------------------------------

DEVICE_HINTS = {
    "Expected all tensors to be on the same device": "a tensor created on the CPU next to one on another device: pass device=... when you create it.",
    "Expected a proper Tensor but got": "a tensor created on another device: pass device=... (or use the inputs' device) when you create it.",
}
ERROR_HINTS = {
    "matmul_flops": {"unsupported operand": "return a Python int: 2 * batch * m * k * p."},
    "attention_flops": {
        "has no attribute": "return a dict with one int per term (and 'total'), e.g. {'q_proj': ..., ..., 'total': ...}.",
    },
    "kv_cache_bytes": {},
    "causal_mask_with_offset": {
        "must be Tensor, not int": "torch.tril takes a tensor: build torch.ones(n_new, n_past + n_new, dtype=torch.bool, device=device) first.",
        **DEVICE_HINTS,
    },
    "attention_step": {
        "The size of tensor a": "a shape mismatch: the scores are (B, H, s, p + s), so the mask must be (s, p + s); and the cache is "
                                "concatenated along the sequence dimension, dim=-2.",
        "Sizes of tensors must match": "torch.cat along the sequence dimension (dim=-2): the cached keys (B, H, p, d_k) and the new ones (B, H, s, d_k) "
                                       "differ only there.",
        "NoneType": "k_cache and v_cache are None at the first step (nothing cached yet): use k_new and v_new alone then.",
        **DEVICE_HINTS,
    },
    "fill_kv_cache": {
        "The expanded size of the tensor": "write the new keys along the sequence dimension, self.k[:, :, start:start + s] (dim 2 of (B, H, max_len, d_k)).",
        "must match the size of tensor": "write the new keys along the sequence dimension, self.k[:, :, start:start + s] (dim 2 of (B, H, max_len, d_k)).",
        "has no attribute 'length'": "set self.length = 0 in __init__ and advance it in append.",
        **DEVICE_HINTS,
    },
    "generate": {
        "Sizes of tensors must match": "each sequence of the batch gets its own next token: logits[:, -1].argmax(dim=-1, keepdim=True) has shape (B, 1), "
                                       "which torch.cat(..., dim=1) appends to idx (B, t).",
        "longer than max_len": "with the cache, the whole sequence was fed again: the cached tokens are then counted twice and take positions "
                               "after themselves; after the prompt feed only the newest token, idx[:, -1:].",
        "not enough values to unpack": "with return_logits=True return a pair: (tokens (B, P + T), logits (B, T, vocab)).",
        "stack expects a non-empty": "collect the logits of each step (logits[:, -1], (B, vocab)) in a list and torch.stack(..., dim=1) them.",
        **DEVICE_HINTS,
    },
}

# --- Hidden checks --------------------------------------------------------------------------------------

FORBIDDEN = builtins.forbidden("attention", "multi_head_attention", "causal_masks")


def _ints(g, low, high):
    return int(torch.randint(low, high, (), generator=g))


def _matmul_cases(seed):
    g = generator(seed, "matmul_flops_hidden")
    m, k, p = _ints(g, 3, 40), _ints(g, 3, 40), _ints(g, 3, 40)
    return [
        Case(f"matmul_flops({m}, {k}, {p})", (m, k, p)),
        Case(f"matmul_flops({p}, {m}, {k}, batch={k % 5 + 3})", (p, m, k), {"batch": k % 5 + 3}),
        Case("matmul_flops(1, 4096, 4096) (one token through a 4096 x 4096 weight)", (1, 4096, 4096)),
    ]


def _attention_cases(seed):
    g = generator(seed, "attention_flops_hidden")
    h = _ints(g, 2, 5)
    d = h * _ints(g, 3, 9)
    n = _ints(g, 5, 30)
    n_kv = n + _ints(g, 3, 20)
    return [
        Case(f"attention_flops({n}, {d}, {h}, batch=2)", (n, d, h), {"batch": 2}),
        Case(f"attention_flops(1, {d}, {h}, {n_kv}) (a cached step: one query, {n_kv} keys)", (1, d, h, n_kv)),
        Case(f"attention_flops({n}, {d}, {h}, {n_kv}, batch=3, output_projection=False)", (n, d, h, n_kv), {"batch": 3, "output_projection": False}),
        Case("attention_flops(1024, 512, 8) (the base model)", (1024, 512, 8)),
        Case(f"attention_flops({n}, {d + 1}, {h}) (d_model not divisible by n_heads)", (n, d + 1, h), raises=ValueError,
             why=f"{d + 1} dimensions cannot be split into {h} heads of equal width"),
    ]


def _bytes_cases(seed):
    g = generator(seed, "kv_cache_bytes_hidden")
    # Every factor different from the others (and from the 2 of keys and values and the bytes per element): a
    # mistake that leaves out one factor must not give the number of one that leaves out another.
    L, h, d_k, n = _ints(g, 3, 13), _ints(g, 3, 17), 2 ** _ints(g, 4, 8), _ints(g, 100, 5000)
    L = L + 1 if L == 4 else L
    while h in (L, d_k, 4):
        h += 1
    batch = h % 7 + 3
    while batch in (L, h, d_k, 2, 4):
        batch += 1
    return [
        Case(f"kv_cache_bytes({L}, {h}, {d_k}, {n}, 2) (float16)", (L, h, d_k, n, 2)),
        Case(f"kv_cache_bytes({L}, {h}, {d_k}, {n}, 4, batch={batch}) (float32)", (L, h, d_k, n, 4), {"batch": batch}),
        Case("kv_cache_bytes(32, 8, 128, 4096, 1) (8 key/value heads, 8-bit)", (32, 8, 128, 4096, 1)),
        Case(f"kv_cache_bytes({L}, {h}, {d_k}, 0, 2) (nothing cached yet)", (L, h, d_k, 0, 2)),
        Case(f"kv_cache_bytes({L}, {h}, {d_k}, -{n}, 2) (a negative length)", (L, h, d_k, -n, 2), raises=ValueError,
             why="a cache cannot hold a negative number of tokens"),
    ]


def _mask_cases(seed):
    g = generator(seed, "causal_mask_with_offset_hidden")
    s, p = _ints(g, 2, 6), _ints(g, 2, 9)
    pairs = [(s, p), (1, p + 3), (s + 1, 0), (1, 0)]  # a chunk after a cache first: it tells the most mistakes apart
    return [Case(f"causal_mask_with_offset({a}, {b}, device=<the device>)", (a, b), {"device": Dev()}) for a, b in pairs]


def _step_cases(seed):
    g = generator(seed, "attention_step_hidden")

    def r(*shape, scale=1.0):
        return scale * torch.randn(*shape, generator=g, dtype=torch.float64)

    b, h, d_k = 2, _ints(g, 1, 4), 2 * _ints(g, 2, 5)
    s, p = _ints(g, 2, 5), _ints(g, 2, 6)
    return [
        Case(f"a chunk of {s} new tokens after {p} cached: q, k, v ({b}, {h}, {s}, {d_k}), cache ({b}, {h}, {p}, {d_k})",
             (r(b, h, s, d_k), r(b, h, s, d_k), r(b, h, s, d_k), r(b, h, p, d_k), r(b, h, p, d_k))),
        Case(f"one new token after {p + 2} cached: q, k, v ({b}, {h}, 1, {d_k}), cache ({b}, {h}, {p + 2}, {d_k})",
             (r(b, h, 1, d_k), r(b, h, 1, d_k), r(b, h, 1, d_k), r(b, h, p + 2, d_k), r(b, h, p + 2, d_k))),
        Case(f"the prompt, nothing cached (None): q, k, v (3, {h}, {s + 1}, {d_k})",
             (r(3, h, s + 1, d_k), r(3, h, s + 1, d_k), r(3, h, s + 1, d_k))),
        Case(f"large scores (entries of q and k about 30): {s} new tokens after {p} cached, ({b}, {h}, ., {d_k})",
             (r(b, h, s, d_k, scale=30.0), r(b, h, s, d_k, scale=30.0), r(b, h, s, d_k), r(b, h, p, d_k, scale=30.0), r(b, h, p, d_k))),
    ]


def _cache_cases(seed):
    g = generator(seed, "fill_kv_cache_hidden")
    h, d_k = _ints(g, 1, 4), 2 * _ints(g, 1, 4)
    prompt = _ints(g, 2, 5)
    chunks = (prompt, 1, 1, 1)
    T = sum(chunks)
    return [
        Case(f"a prompt of {prompt}, then 3 single tokens, into KVCache(max_len={T + 3}): k, v (2, {h}, {T}, {d_k})",
             (torch.randn(2, h, T, d_k, generator=g), torch.randn(2, h, T, d_k, generator=g), T + 3, *chunks)),
        Case(f"single tokens only (5 of them), max_len 5 (filled to the end): k, v (1, {h}, 5, {d_k})",
             (torch.randn(1, h, 5, d_k, generator=g), torch.randn(1, h, 5, d_k, generator=g), 5, 1, 1, 1, 1, 1)),
        Case(f"one chunk of 3, max_len 8: k, v (3, 2, 3, {d_k})",
             (torch.randn(3, 2, 3, d_k, generator=g), torch.randn(3, 2, 3, d_k, generator=g), 8, 3)),
        # The contract's "If the cache is full, raise RuntimeError" (the visible check asks the same): a cache that
        # grows by torch.cat past max_len instead of writing into its preallocated buffers does not raise.
        Case(f"a prompt of 3, then 2 tokens at once, into KVCache(max_len=4): k, v (1, {h}, 5, {d_k})",
             (torch.randn(1, h, 5, d_k, generator=g), torch.randn(1, h, 5, d_k, generator=g), 4, 3, 2),
             raises=RuntimeError, why="the cache is full: 3 cached + 2 new > max_len 4"),
    ]


# The visible check's model: torch.manual_seed(VISIBLE_MODEL_SEED), TinyDecoder(vocab 10, d_model 8, 2 heads, 2 layers,
# d_ff 16, max_len 16) in float64, head weights times 4. Its greedy choices on the visible prompts win by 0.094 or more
# (tests/test_checks_ch09.py checks it), so rounding cannot flip a token there either.
VISIBLE_MODEL_SEED = 8
MIN_MARGIN = 0.05  # smallest gap between the two largest logits of any greedy choice in a hidden case (float64)
HIDDEN_SIZES = [
    dict(vocab_size=11, d_model=12, n_heads=2, n_layers=2, d_ff=24, max_len=16),
    dict(vocab_size=9, d_model=8, n_heads=2, n_layers=1, d_ff=16, max_len=12),
]


def _margin(model, prompt, max_new_tokens):
    _, logits = ref.generate(model, prompt, max_new_tokens, use_cache=False, return_logits=True)
    top2 = logits.topk(2, dim=-1).values  # (B, T, 2)
    return float((top2[..., 0] - top2[..., 1]).min())


def model_case(seed, salt, init, batch, prompt_len, max_new_tokens, head_scale=4.0):
    """A TinyDecoder of sizes `init` with grader-drawn weights and a prompt, redrawn until every greedy choice (without
    a cache, float64) wins by at least MIN_MARGIN: (Model, prompt)."""
    for attempt in range(50):
        g = generator(seed, f"{salt}/{attempt}")
        state = grader_weights(ref.TinyDecoder(**init), g)
        state["head.weight"] = head_scale * state["head.weight"]  # logits a few units apart
        model = ref.TinyDecoder(**init).double().eval()
        model.load_state_dict(state, strict=False)
        prompt = torch.randint(0, init["vocab_size"], (batch, prompt_len), generator=g)
        if _margin(model, prompt, max_new_tokens) >= MIN_MARGIN:
            return Model("TinyDecoder", init, state), prompt
    raise RuntimeError(f"no model with a margin of {MIN_MARGIN} for {salt}")


def _generate_cases(seed):
    big, small = HIDDEN_SIZES
    cases = []
    for i, (init, batch, prompt_len, T, use_cache) in enumerate([
        (big, 2, 3, 5, True), (big, 1, 1, 6, True), (small, 3, 2, 4, True), (small, 2, 2, 4, False)]):
        model, prompt = model_case(seed, f"generate_hidden#{i}", init, batch, prompt_len, T)
        words = "with the cache" if use_cache else "without the cache (use_cache=False)"
        layers = f"{init['n_layers']} layer{'s' if init['n_layers'] > 1 else ''}"
        cases.append(Case(f"a TinyDecoder (d_model={init['d_model']}, {layers}, vocab {init['vocab_size']}): batch {batch}, "
                          f"a prompt of {prompt_len} token{'s' if prompt_len > 1 else ''}, {T} new tokens, {words}",
                          (model, prompt, T), {"use_cache": use_cache, "return_logits": True}))
    return cases


def _bool_mask(call, record, got, expected):
    """extra(): a mask that is not boolean gets its own message (before the generic dtype comparison)."""
    g = got[0] if got else None
    if isinstance(g, Returned) and g.dtype != "bool":
        raise AssertionError(f"causal_mask_with_offset on {call.label}: its dtype is {g.dtype}, but masks in this course are boolean "
                             "(dtype torch.bool, True = may attend): create it with dtype=torch.bool (or compare positions, j <= n_past + i).")


def _count_check(reference, cases_fn, names, mistakes, callees=(), keyed=False):
    return function_check(reference, cases_fn, names, mistakes, ERROR_HINTS[reference.__name__], FORBIDDEN, callees=callees,
                          meta=False, dtypes=None, keyed=keyed, categories=("values",))


CHECKS = {
    "matmul_flops_hidden": _count_check(ref.matmul_flops, _matmul_cases, ("FLOPs",), MATMUL_MISTAKES),
    "attention_flops_hidden": _count_check(ref.attention_flops, _attention_cases, ATTENTION_NAMES, ATTENTION_MISTAKES,
                                           callees=("matmul_flops",), keyed=True),
    "kv_cache_bytes_hidden": _count_check(ref.kv_cache_bytes, _bytes_cases, ("bytes",), KV_BYTES_MISTAKES),
    "causal_mask_with_offset_hidden": function_check(
        ref.causal_mask_with_offset, _mask_cases, ("mask",), MASK_MISTAKES, ERROR_HINTS["causal_mask_with_offset"], FORBIDDEN, dtypes=None,
        categories=("values", "dtype", "device"), extra=_bool_mask),
    "attention_step_hidden": function_check(
        ref.attention_step, _step_cases, ("output", "keys", "values"), STEP_MISTAKES, ERROR_HINTS["attention_step"], FORBIDDEN,
        callees=("causal_mask_with_offset",), categories=("values",)),
    "KVCache_hidden": function_check(
        ref.fill_kv_cache, _cache_cases, ("keys", "values", "length"), CACHE_MISTAKES, ERROR_HINTS["fill_kv_cache"], FORBIDDEN,
        shape_mistakes=CACHE_SHAPE_MISTAKES, categories=("values", "dtype", "device")),
    "generate_hidden": function_check(
        ref.generate, _generate_cases, ("tokens", "logits"), GENERATE_MISTAKES, ERROR_HINTS["generate"], FORBIDDEN,
        callees=("attention_step",), categories=("values",)),
}

# Names whose appearance in a solution cell's code earns no points (read by autograder.grading.shortcuts, never run).
SHORTCUT_NAMES = builtins.shortcut_names("attention", "multi_head_attention", "causal_masks")

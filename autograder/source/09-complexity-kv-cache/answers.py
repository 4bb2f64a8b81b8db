"""Test data of chapter 09-complexity-kv-cache: typical wrong answers (WRONG_ANSWERS) and correct answers written
unlike the reference (VALID_ANSWERS), as edits of the reference source in solutions/ch09_complexity_kv_cache.py.

Used by the chapter contract (tests/test_chapter_contract.py), the learner trials, the demo and
scripts/grading_corpus.py, through `autograder.registry.answers("09-complexity-kv-cache")`; never loaded by a
grading host.
"""

from autograder.authoring.answers import Edit, ValidAnswer, WrongAnswer

_K_LINE = "        self.k = torch.zeros(batch, n_heads, max_len, d_k, dtype=dtype, device=device)  # (B, H, max_len, d_k)"
_V_LINE = "        self.v = torch.zeros(batch, n_heads, max_len, d_k, dtype=dtype, device=device)  # (B, H, max_len, d_k)"

WRONG_ANSWERS = {
    # issue 30's learner trial: the cache contract, exact integers, dtypes, devices, callee/caller pairs
    "cache_append_returns_whole_buffer": WrongAnswer("KVCache", "        return self.k[:, :, :self.length], self.v[:, :, :self.length]",
                                                     "        return self.k, self.v", "append returns the whole buffer"),
    "matmul_flops_true_division": WrongAnswer("matmul_flops", "return 2 * batch * m * k * p", "return batch * m * k * p / 0.5", "an int is expected"),
    "step_scaled_by_d_k": WrongAnswer("attention_step", "    scores = q_new @ k_new.transpose(-2, -1) / math.sqrt(q_new.size(-1))  # (B, H, s, p + s)",
                                      "    scores = q_new @ k_new.transpose(-2, -1) / q_new.size(-1)", "divided by d_k instead of sqrt(d_k)"),
    "mask_wrong_step_right": WrongAnswer("causal_mask_with_offset", ".tril(diagonal=n_past)", ".tril(diagonal=n_past + 1)", "off by one"),
    "bytes_batch_ignored": WrongAnswer("kv_cache_bytes", "return 2 * n_layers * n_heads * d_k * seq_len * bytes_per_elem * batch",
                                       "return 2 * n_layers * n_heads * d_k * seq_len * bytes_per_elem", "the batch is ignored"),
    "generate_prompt_each_step": WrongAnswer("generate", "            logits = model.forward_step(idx[:, -1:], caches)  # (B, 1, vocab): only the newest token",
                                             "            logits = model.forward_step(idx, caches)", "the course's model that generate is given"),
    "matmul_multiply_adds": WrongAnswer("matmul_flops", "return 2 * batch * m * k * p", "return batch * m * k * p",
                                        "one FLOP per multiply-add"),
    "attention_no_softmax": WrongAnswer(
        "attention_flops", '"scale": elems,\n        "softmax": SOFTMAX_FLOPS_PER_ELEMENT * elems,', '"scale": 0,\n        "softmax": 0,',
        "scale and softmax not counted"),
    "bytes_no_factor_2": WrongAnswer("kv_cache_bytes", "return 2 * n_layers *", "return n_layers *", "the factor 2 is missing"),
    # causal_mask_with_offset: a wrong mask costs its own exercise only (attention_step and generate are graded apart)
    "mask_diagonal_0": WrongAnswer("causal_mask_with_offset", ".tril(diagonal=n_past)", ".tril()", "the diagonal is at 0"),
    "mask_float": WrongAnswer("causal_mask_with_offset", "torch.ones(n_new, n_past + n_new, dtype=torch.bool, device=device)",
                              "torch.ones(n_new, n_past + n_new, device=device)", "bool", category="dtype"),
    "mask_no_device": WrongAnswer("causal_mask_with_offset", "dtype=torch.bool, device=device)", "dtype=torch.bool)",
                                  "device", category="device"),
    # attention_step
    "step_mask_not_shifted": WrongAnswer(
        "attention_step", "mask = causal_mask_with_offset(s, total - s, device=q_new.device)",
        "mask = torch.ones(s, total, dtype=torch.bool, device=q_new.device).tril()", "not shifted by the p cached tokens"),
    "step_new_keys_first": WrongAnswer(
        "attention_step", "torch.cat([k_cache, k_new], dim=-2)", "torch.cat([k_new, k_cache], dim=-2)", "BEFORE the cached ones",
        also=(Edit("attention_step", "torch.cat([v_cache, v_new], dim=-2)", "torch.cat([v_new, v_cache], dim=-2)"),)),
    # KVCache (graded through fill_kv_cache)
    "cache_length_not_advanced": WrongAnswer("KVCache", "self.length = start + s", "self.length = start",
                                             "self.length is never advanced"),
    "cache_dtype_ignored": WrongAnswer(
        "KVCache", _K_LINE, _K_LINE.replace("dtype=dtype, ", ""), "dtype", category="dtype",
        also=(Edit("KVCache", _V_LINE, _V_LINE.replace("dtype=dtype, ", "")),)),
    "cache_device_ignored": WrongAnswer(
        "KVCache", _K_LINE, _K_LINE.replace(", device=device", ""), "device", category="device",
        also=(Edit("KVCache", _V_LINE, _V_LINE.replace(", device=device", "")),)),
    # generate
    "generate_new_cache_each_step": WrongAnswer(
        "generate", "logits = model.forward_step(idx[:, -1:], caches)", "logits = model.forward_step(idx[:, -1:], model.new_cache(idx.size(0)))",
        "a new cache at every step"),
    # issue 30's learner trial, second round
    "attn_out_proj_always": WrongAnswer("attention_flops", '        "out_proj": proj if output_projection else 0,',
                                        '        "out_proj": proj,', "output_projection=False"),
    "attn_n_kv_ignored": WrongAnswer("attention_flops", "    n_kv = n if n_kv is None else n_kv", "    n_kv = n", "n_kv ignored"),
    "generate_logits_softmaxed": WrongAnswer("generate", "        chosen_from.append(logits[:, -1])  # (B, vocab)",
                                             "        chosen_from.append(logits[:, -1].softmax(dim=-1))", "logits of generate"),
    "matmul_batch_ignored_attention_right": WrongAnswer("matmul_flops", "    return 2 * batch * m * k * p", "    return 2 * m * k * p", "the batch is ignored"),
}

_MASK_ARANGE = '''def causal_mask_with_offset(n_new, n_past, device=None):
    rows = torch.arange(n_new, device=device)[:, None] + n_past  # (n_new, 1) the new tokens' positions
    cols = torch.arange(n_past + n_new, device=device)[None, :]  # (1, n_past + n_new) every key's position
    return cols <= rows
'''

_STEP_EINSUM = '''def attention_step(q_new, k_new, v_new, k_cache=None, v_cache=None):
    k_all = k_new if k_cache is None else torch.cat((k_cache, k_new), dim=2)
    v_all = v_new if v_cache is None else torch.cat((v_cache, v_new), dim=2)
    s, p = q_new.shape[-2], k_all.shape[-2] - q_new.shape[-2]
    scores = torch.einsum("bhsd,bhtd->bhst", q_new, k_all) * q_new.shape[-1] ** -0.5
    allowed = causal_mask_with_offset(s, p, device=q_new.device)
    weights = torch.where(allowed, scores, torch.full_like(scores, float("-inf"))).softmax(dim=-1)
    return torch.einsum("bhst,bhtd->bhsd", weights, v_all), k_all, v_all
'''

_CACHE_NARROW = '''class KVCache:
    def __init__(self, batch, n_heads, max_len, d_k, dtype=torch.float32, device=None):
        shape = (batch, n_heads, max_len, d_k)
        self.k = torch.empty(shape, dtype=dtype, device=device)
        self.v = torch.empty(shape, dtype=dtype, device=device)
        self.max_len, self.length = max_len, 0

    def append(self, k_new, v_new):
        s = k_new.shape[2]
        if self.length + s > self.max_len:
            raise RuntimeError("the cache is full")
        self.k.narrow(2, self.length, s).copy_(k_new)
        self.v.narrow(2, self.length, s).copy_(v_new)
        self.length += s
        return self.k.narrow(2, 0, self.length), self.v.narrow(2, 0, self.length)
'''

_GENERATE_PROMPT_TOKEN_BY_TOKEN = '''@torch.no_grad()
def generate(model, idx, max_new_tokens, use_cache=True, return_logits=False):
    rows = []
    cache = model.new_cache(idx.shape[0]) if use_cache else None
    fed = 0  # tokens of idx already in the cache
    for _ in range(max_new_tokens):
        if use_cache:
            while fed < idx.shape[1]:  # the prompt one token at a time, then the newest token
                last = model.forward_step(idx[:, fed:fed + 1], cache)[:, -1]
                fed += 1
        else:
            last = model(idx)[:, -1]
        rows.append(last)
        idx = torch.cat((idx, last.argmax(-1)[:, None]), dim=1)
    return (idx, torch.stack(rows, 1)) if return_logits else idx
'''

_ATTENTION_FLOPS_CLOSED_FORM = '''def attention_flops(n, d_model, n_heads=1, n_kv=None, *, batch=1, output_projection=True):
    if d_model % n_heads != 0:
        raise ValueError("d_model must be divisible by n_heads")
    m = n if n_kv is None else n_kv
    proj = 2 * batch * n * d_model * d_model
    pairs = batch * n_heads * n * m
    out = {"q_proj": proj, "k_proj": proj, "v_proj": proj,
           "scores": 2 * pairs * (d_model // n_heads), "scale": pairs, "softmax": SOFTMAX_FLOPS_PER_ELEMENT * pairs,
           "weighted_sum": 2 * pairs * (d_model // n_heads), "out_proj": proj * int(output_projection)}
    out["total"] = sum(out.values())
    return out
'''

VALID_ANSWERS = {
    # issue 30's learner trial
    "matmul_flops_by_loop": ValidAnswer((Edit("matmul_flops", "", '''def matmul_flops(m, k, p, batch=1):
    flops = 0
    for _ in range(batch):
        flops += m * p * (2 * k)  # each output entry: k multiplies and k adds
    return flops
'''),), "a loop over the batch"),
    "cache_index_copy": ValidAnswer((Edit("KVCache", "        self.k[:, :, start:start + s] = k_new  # the sequence dimension is dim 2\n        self.v[:, :, start:start + s] = v_new",
        "        where = torch.arange(start, start + s, device=self.k.device)\n        self.k.index_copy_(2, where, k_new)\n        self.v.index_copy_(2, where, v_new)"),),
        "index_copy_ into the preallocated buffers"),
    "mask_by_arange_compare": ValidAnswer((Edit("causal_mask_with_offset", "", '''def causal_mask_with_offset(n_new, n_past, device=None):
    rows = torch.arange(n_new, device=device)[:, None] + n_past
    return torch.arange(n_past + n_new, device=device)[None, :] <= rows
'''),), "positions compared, no tril"),
    "step_scaled_queries_where": ValidAnswer((Edit("attention_step", "", '''def attention_step(q_new, k_new, v_new, k_cache=None, v_cache=None):
    k_all = k_new if k_cache is None else torch.cat([k_cache, k_new], dim=2)
    v_all = v_new if v_cache is None else torch.cat([v_cache, v_new], dim=2)
    s, total = q_new.shape[2], k_all.shape[2]
    allowed = causal_mask_with_offset(s, total - s, q_new.device)
    scores = (q_new / math.sqrt(q_new.shape[-1])) @ k_all.transpose(2, 3)
    scores = torch.where(allowed, scores, torch.tensor(float("-inf"), dtype=scores.dtype, device=scores.device))
    return torch.softmax(scores, dim=-1) @ v_all, k_all, v_all
'''),), "queries scaled first, torch.where, the learner's own mask function as a callee"),
    "bytes_by_math_prod": ValidAnswer((Edit("kv_cache_bytes", "return 2 * n_layers * n_heads * d_k * seq_len * bytes_per_elem * batch",
        "return 2 * math.prod((n_layers, n_heads, d_k, seq_len, bytes_per_elem, batch))"),), "math.prod of the sizes"),
    "mask_arange": ValidAnswer((Edit("causal_mask_with_offset", "", _MASK_ARANGE),), why="two aranges compared, no tril"),
    "step_einsum": ValidAnswer((Edit("attention_step", "", _STEP_EINSUM),), why="einsum, torch.where, Tensor.softmax, ** -0.5, cat on dim=2"),
    "cache_narrow_copy": ValidAnswer((Edit("KVCache", "", _CACHE_NARROW),), why="torch.empty buffers, narrow(...).copy_ to write and read"),
    "generate_prompt_token_by_token": ValidAnswer((Edit("generate", "", _GENERATE_PROMPT_TOKEN_BY_TOKEN),),
                                                  why="the prompt fed one token at a time through the cache (other attention_step calls)"),
    "attention_flops_closed_form": ValidAnswer((Edit("attention_flops", "", _ATTENTION_FLOPS_CLOSED_FORM),),
                                               why="closed forms, without matmul_flops"),
    # issue 30's learner trial, second round
    "generate_preallocated_ids": ValidAnswer((Edit("generate", "", '''def generate(model, idx, max_new_tokens, use_cache=True, return_logits=False):
    b, p = idx.shape
    out = torch.empty(b, p + max_new_tokens, dtype=idx.dtype, device=idx.device)
    out[:, :p] = idx
    chosen = []
    caches = model.new_cache(b) if use_cache else None
    for t in range(p, p + max_new_tokens):
        if caches is None:
            logits = model(out[:, :t])
        else:
            logits = model.forward_step(out[:, :t] if t == p else out[:, t - 1:t], caches)
        chosen.append(logits[:, -1])
        out[:, t] = logits[:, -1].argmax(dim=-1)
    if return_logits:
        return out, torch.stack(chosen, dim=1)
    return out
'''),), "the output ids preallocated and filled column by column"),
    "step_manual_softmax": ValidAnswer((Edit("attention_step", "    out = torch.softmax(scores, dim=-1) @ v_new  # (B, H, s, d_k)",
                                             "    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))\n"
                                             "    out = (e / e.sum(dim=-1, keepdim=True)) @ v_new"),),
                                       "softmax written out, the row maximum subtracted first"),
}

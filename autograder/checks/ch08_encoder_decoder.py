"""Checks for chapter 08-encoder-decoder.

- DecoderLayer (a module exercise): the grader draws the weights (LayerNorm gains and biases too, so a swapped
  norm shows), the sandbox loads them into the learner's class and compares it with the reference, which equals
  nn.TransformerDecoderLayer with copied weights (tests/test_solutions_ch08.py): Post-LN and Pre-LN, tgt_len !=
  src_len, the causal mask combined with a target padding mask, a source padding mask, and no masks at all.
  The learner's layer builds on the course's MultiHeadAttention and FeedForward, given in a read-only cell.
- transformer_parameter_count: exact integers, for the paper's base model and grader-chosen configurations
  (dtypes=None, meta=False, as chapter 05's size-taking functions).
- greedy_decode and train_step take a model: autograder.checks.cases.Model builds the notebook's ToyTranslator
  (a course-given class in a read-only cell, independent of the learner's DecoderLayer, so a wrong layer costs
  nothing here) with the grader's weights. For greedy_decode the grader picks, for its weights, an end token
  that the rows of a batch reach at different steps (and a case where one row never reaches it), and refuses
  weights whose greedy path has a near tie (top-two logits closer than GAP_MIN in float64: float32 kernels or
  a per-row loop must not flip an argmax). greedy_decode ends with a data-dependent `break`, which cannot run
  on 'meta': no meta pass. Its first two cases give the model in eval() and in train() mode with mode_after=True:
  the mode the learner's greedy_decode leaves the model in is graded too (the ToyTranslator has no dropout, so
  the tokens alone would not show a model left in eval()). train_step is graded with state_after=True: the
  losses and every parameter after the steps.

Forbidden built-ins: the transformer layers (nn.TransformerDecoderLayer would be the whole exercise) and
nn.MultiheadAttention (the given MultiHeadAttention is the course's). F.cross_entropy is allowed, with
label_smoothing and ignore_index: writing the label-smoothed loss is chapter 07's exercise
(label_smoothed_cross_entropy); here the exercise is what goes into it (the shifted targets, the padding, the
optimiser step), and a learner who writes it by hand (log-softmax and a masked mean) is graded the same way.
The guard switches off the union of these groups for the whole notebook: no exercise here needs them.
"""

import math

import torch

from autograder.checks import Optim, builtins
from autograder.checks import Case, ModuleCase, Returned, function_check, generator, grader_weights, module_check
from autograder.checks.cases import Model
from solutions import ch08_encoder_decoder as ref

FORBIDDEN = builtins.forbidden("transformer_layers", "multi_head_attention")
SHORTCUT_NAMES = builtins.shortcut_names("transformer_layers", "multi_head_attention")

# --- Known mistakes: DecoderLayer (wrong classes with the reference's parameter names) -----------------


class _Dec(ref.DecoderLayer):
    """The reference's parameters, with a forward that can make each typical mistake (class attributes)."""

    invert_masks = False
    causal = True  # False: tgt_mask ignored in the self-attention
    kv_from_target = False
    memory_mask_used = True
    post_ln_always = False
    norm_on_branch = False  # x + norm(sublayer(x)) instead of norm(x + sublayer(x))
    cross_first = False
    branch_dropout = True  # False: dropout1..3 left out of the residual branches (seen in train() mode)
    ff_drop = "branch"  # where dropout3 sits: on the FFN branch, on the residual sum (x + ff(x)), or on ff's input

    def _masks(self, tgt_mask, memory_mask):
        if self.invert_masks:
            tgt_mask = None if tgt_mask is None else ~tgt_mask
            memory_mask = None if memory_mask is None else ~memory_mask
        return (tgt_mask if self.causal else None), (memory_mask if self.memory_mask_used else None)

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        tgt_mask, memory_mask = self._masks(tgt_mask, memory_mask)
        kv = (lambda y: y) if self.kv_from_target else (lambda y: memory)

        def self_block(y):
            return self.self_attn(y, y, y, tgt_mask)[0]

        def cross_block(y):
            return self.cross_attn(y, kv(y), kv(y), memory_mask)[0]

        same = (lambda t: t)
        drops = (self.dropout1, self.dropout2, self.dropout3) if self.branch_dropout else (same,) * 3
        blocks = [(self_block, self.norm1), (cross_block, self.norm2), (self.ff, self.norm3)]
        if self.cross_first:
            blocks[0], blocks[1] = (cross_block, self.norm1), (self_block, self.norm2)
        wheres = ("branch", "branch", self.ff_drop)
        for (b, norm), d, where in zip(blocks, drops, wheres):
            block = (lambda y, b=b, d=d: d(b(y))) if where == "branch" else (lambda y, b=b, d=d: b(d(y))) if where == "input" else b
            after = d if where == "sum" else same
            if self.norm_first and not self.post_ln_always:
                x = after(x + block(norm(x)))
            elif self.norm_on_branch:
                x = after(x + norm(block(x)))
            else:
                x = norm(after(x + block(x)))
        return x


def _dec(**mistake):
    return type("WrongDecoderLayer", (_Dec,), mistake)


INVERTED = ("masks inverted (PyTorch's convention, True = NOT allowed): the course's MultiHeadAttention takes True = "
            "may attend, so pass tgt_mask and memory_mask as they are; only nn.TransformerDecoderLayer wants ~mask")

DECODER_MISTAKES = {
    INVERTED: _dec(invert_masks=True),
    "the self-attention has no mask: pass tgt_mask (the causal mask) to self.self_attn, or position i sees the "
    "target tokens after it": _dec(causal=False),
    "the cross-attention takes its keys and values from the target: queries come from the decoder (x), keys and "
    "values from the encoder's output, self.cross_attn(x, memory, memory, memory_mask)": _dec(kv_from_target=True),
    "memory_mask is not used: pass it to the cross-attention, or the decoder attends to the padded source "
    "positions": _dec(memory_mask_used=False),
    "norm_first is ignored (always Post-LN): with norm_first=True each sub-layer is x = x + sublayer(norm(x))":
        _dec(post_ln_always=True),
    "the LayerNorm is applied to the sub-layer's output inside the residual, x + norm(sublayer(x)): Post-LN is "
    "norm(x + sublayer(x))": _dec(norm_on_branch=True),
    "the sub-layers are in the wrong order (cross-attention before self-attention): self-attention, then "
    "cross-attention, then the feed-forward network": _dec(cross_first=True),
    "no dropout on the residual branches in train() mode: each sub-layer's output goes through its dropout "
    "(dropout1, dropout2, dropout3) before the residual add": _dec(branch_dropout=False),
    "the feed-forward sub-layer's dropout is applied to the residual sum, dropout3(x + ff(x)), which also drops the "
    "residual stream: drop the branch only, x + dropout3(ff(x))": _dec(ff_drop="sum"),
    "the feed-forward sub-layer's dropout is applied to its input, ff(dropout3(x)): drop its output, "
    "x + dropout3(ff(x))": _dec(ff_drop="input"),
}

DECODER_HINTS = {
    "parameter names differ": "keep the names of the exercise: self_attn, cross_attn (MultiHeadAttention each), "
    "ff (FeedForward), norm1, norm2, norm3 (nn.LayerNorm(d_model) each).",
    "must match the size of tensor": "two tensors do not broadcast: the self-attention gets tgt_mask (Tt, Tt) or "
    "(B, 1, Tt, Tt), the cross-attention memory_mask (B, 1, 1, Ts); and cross-attention's keys and values are the "
    "memory (B, Ts, D).",
    "unexpected keyword argument": "keep the signature DecoderLayer(d_model, n_heads, d_ff, dropout=0.0, "
    "norm_first=False, activation='relu') and forward(x, memory, tgt_mask=None, memory_mask=None).",
    "bitwise_not": "~ works on a bool mask; a mask may also be None (then pass None on).",
}

# --- Known mistakes: transformer_parameter_count -------------------------------------------------------


def _count(no_attn_bias=False, no_ffn_bias=False, no_norms=False, dec_like_enc=False, ignore_sharing=False,
           out_bias=False, one_final_norm=False, ignore_tie=False):
    def count(src_vocab, tgt_vocab, d_model, d_ff, n_layers, share_embeddings=False, tie_output=False, final_norm=False):
        d = d_model
        attn = 4 * d * d + (0 if no_attn_bias else 4 * d)
        ffn = 2 * d * d_ff + (0 if no_ffn_bias else d_ff + d)
        ln = 0 if no_norms else 2 * d
        enc = attn + ffn + 2 * ln
        dec = enc if dec_like_enc else 2 * attn + ffn + 3 * ln
        share = share_embeddings and not ignore_sharing
        tie = tie_output and not ignore_tie
        emb = src_vocab * d + (0 if share else tgt_vocab * d)
        out = (0 if tie else tgt_vocab * d) + (tgt_vocab if out_bias else 0)
        finals = (1 if one_final_norm else 2) * ln if final_norm else 0
        return n_layers * (enc + dec) + emb + out + finals
    return count


COUNT_MISTAKES = {
    "the attention biases are not counted: each of W_Q, W_K, W_V, W_O has a bias of d_model numbers (4 d^2 + 4 d per "
    "attention block)": _count(no_attn_bias=True),
    "the feed-forward biases are not counted: linear1 has d_ff, linear2 d_model (2 d d_ff + d_ff + d)": _count(no_ffn_bias=True),
    "the LayerNorms are not counted: each has a gain and a bias, 2 d_model numbers (2 per encoder layer, 3 per "
    "decoder layer)": _count(no_norms=True),
    "the decoder layer is counted like an encoder layer: it has two attention blocks (self and cross) and three "
    "LayerNorms": _count(dec_like_enc=True),
    "share_embeddings is ignored: one matrix shared by source and target is counted once": _count(ignore_sharing=True),
    "tie_output is ignored: a tied output projection reuses the target embedding, it adds nothing": _count(ignore_tie=True),
    "the output projection is counted with a bias: it has none (a bias would be the only untied part)": _count(out_bias=True),
    "one final LayerNorm instead of two: with final_norm the encoder and the decoder stack each end with one": _count(one_final_norm=True),
}

COUNT_HINTS = {
    "unexpected keyword argument": "keep the signature transformer_parameter_count(src_vocab, tgt_vocab, d_model, d_ff, "
    "n_layers, share_embeddings=False, tie_output=False, final_norm=False).",
}

# --- Known mistakes: greedy_decode ----------------------------------------------------------------------


@torch.no_grad()
def _greedy(model, src, max_len, bos_id, eos_id, src_mask=None, pad_id=None, *, stop="all", fill=True, keep_bos=True,
            position=-1, use_mask=True, fill_with_eos=False, mask_to="both", mode=None):
    if mode == "left_eval":
        model.eval()
    fill_id = eos_id if (pad_id is None or fill_with_eos) else pad_id
    mask = src_mask if use_mask else None
    memory = model.encode(src, mask if mask_to in ("both", "encode") else None)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
    finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        next_tok = model.decode(ys, memory, mask if mask_to in ("both", "decode") else None)[:, position].argmax(-1)
        if fill:
            next_tok = torch.where(finished, torch.full_like(next_tok, fill_id), next_tok)
        ys = torch.cat([ys, next_tok[:, None]], dim=1)
        finished |= next_tok == eos_id
        if stop == "all" and finished.all() or stop == "any" and finished.any():
            break
    if mode == "train_at_end":
        model.train()
    return ys if keep_bos else ys[:, 1:]


def _greedy_variant(**kw):
    def decode(model, src, max_len, bos_id, eos_id, src_mask=None, pad_id=None):
        return _greedy(model, src, max_len, bos_id, eos_id, src_mask, pad_id, **kw)
    return decode


GREEDY_MISTAKES = {
    "finished rows keep emitting tokens after </s>: once a row has produced eos_id, fill its later positions with "
    "pad_id (eos_id when pad_id is None)": _greedy_variant(fill=False),
    "src_mask is not passed on, to model.encode nor to model.decode: both need it, or the padded source "
    "positions are attended":
        _greedy_variant(use_mask=False),
    "src_mask is not passed on to model.encode (decode gets it): the encoder's self-attention attends the padded "
    "source positions": _greedy_variant(mask_to="decode"),
    "src_mask is not passed on to model.decode (encode gets it): the cross-attention attends the padded source "
    "positions": _greedy_variant(mask_to="encode"),
    "the next token is read from the first position's logits: the prediction for the next token is at the LAST "
    "position, logits[:, -1]": _greedy_variant(position=0),
    "finished rows are filled with eos_id although pad_id is given: fill with pad_id (eos_id only when pad_id is None)":
        _greedy_variant(fill_with_eos=True),
    "the model is left in eval() mode: a model given in train() mode must be given back in train() mode (remember "
    "was_training = model.training at the start, call model.train(was_training) before returning)":
        _greedy_variant(mode="left_eval"),
    "the model is put in train() mode before returning, whatever mode it was given: a model given in eval() mode "
    "stays in eval() (model.train(was_training), not model.train())": _greedy_variant(mode="train_at_end"),
}

GREEDY_SHAPE_MISTAKES = {
    "decoding does not stop once every row has produced </s>: stop as soon as all rows are finished (or after max_len steps)":
        _greedy_variant(stop="never"),
    "decoding stops as soon as ANY row has produced </s>: the other rows are not finished yet; stop when ALL are":
        _greedy_variant(stop="any"),
    "the <s> column is missing: the result starts with bos_id, (B, 1 + n)": _greedy_variant(keep_bos=False),
}

GREEDY_HINTS = {
    "Boolean value of Tensor with more than one value is ambiguous": "`if finished:` on a (B,) tensor: use finished.all().",
    "expected scalar type Long": "token ids are torch.long: create them with dtype=torch.long.",
    "Expected tensor for argument #1 'indices' to have one of the following scalar types": "token ids are torch.long: "
    "create ys with dtype=torch.long, not the default float.",
}

# --- Known mistakes: train_step -------------------------------------------------------------------------


def _train(model, src, tgt, src_mask, pad_id, eps=0.0, lr=0.1, steps=1, optimizer=None, *, shift="right", ignore=True,
           smoothing=True, zero_grad=True, reduction="mean", pad_is_zero=False, own_optimizer=False, loss_after_step=False):
    import torch.nn.functional as F
    optimizer = torch.optim.SGD(model.parameters(), lr=lr) if own_optimizer or optimizer is None else optimizer
    if shift == "right":
        dec_in, labels = tgt[:, :-1], tgt[:, 1:]
    else:  # the labels are the decoder's own inputs
        dec_in, labels = tgt[:, :-1], tgt[:, :-1]
    ignore_index = (0 if pad_is_zero else pad_id) if ignore else -100
    losses = []
    for _ in range(steps):
        logits = model(src, dec_in, src_mask)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=ignore_index,
                               label_smoothing=eps if smoothing else 0.0, reduction=reduction)
        if zero_grad:
            optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if loss_after_step:  # the loss of the updated model, computed again
            logits = model(src, dec_in, src_mask)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=ignore_index,
                                   label_smoothing=eps if smoothing else 0.0, reduction=reduction)
        losses.append(loss.detach())
    return torch.stack(losses)


def _train_variant(**kw):
    def step(model, src, tgt, src_mask, pad_id, eps=0.0, lr=0.1, steps=1, optimizer=None):
        return _train(model, src, tgt, src_mask, pad_id, eps, lr, steps, optimizer, **kw)
    return step


TRAIN_MISTAKES = {
    "the labels are not shifted: the decoder input is tgt[:, :-1] and the labels are tgt[:, 1:] (position i predicts "
    "the token AFTER it), not the input itself": _train_variant(shift="none"),
    "the padding is in the loss: leave the pad_id labels out (ignore_index=pad_id, or a mean over the real labels only)":
        _train_variant(ignore=False),
    "pad_id is taken as 0: use the pad_id argument (here the padding token is another id)": _train_variant(pad_is_zero=True),
    "label smoothing is missing: use eps (F.cross_entropy(..., label_smoothing=eps), or (1 - eps) times the "
    "cross-entropy plus eps times the mean over the classes of -log p)": _train_variant(smoothing=False),
    "the gradients are never cleared: call optimizer.zero_grad() in every step, or the second step adds the first "
    "step's gradients to its own": _train_variant(zero_grad=False),
    "the loss is summed over the positions instead of averaged over the real (non-padding) labels": _train_variant(reduction="sum"),
    "the optimizer it is given is ignored (a new SGD is made every call): step the `optimizer` argument when one is "
    "given, and make SGD(model.parameters(), lr=lr) only when it is None": _train_variant(own_optimizer=True),
    "the losses are those of the model after each step (computed again after optimizer.step()): return the loss "
    "each step minimised, computed before its update": _train_variant(loss_after_step=True),
}

TRAIN_HINTS = {
    "Expected input batch_size": "the logits and the labels must line up: flatten the logits to (B * (T - 1), V) and "
    "the labels to (B * (T - 1),), with the decoder input tgt[:, :-1] and the labels tgt[:, 1:].",
    "element 0 of tensors does not require grad": "the loss has no graph: do not compute it under torch.no_grad(), "
    "and call .detach() only on what you return.",
    "Trying to backward through the graph a second time": "compute the forward pass again in every step.",
}

# --- Hidden checks: DecoderLayer ------------------------------------------------------------------------

DECODER_SALT = "DecoderLayer"


def _lengths_mask(lengths, max_len):
    return (torch.arange(max_len)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]  # (B, 1, 1, T)


def _decoder_cases(seed):
    g = generator(seed, "DecoderLayer#inputs")

    def r(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    causal5 = torch.ones(5, 5, dtype=torch.bool).tril()
    tgt_pad = _lengths_mask([4, 2, 3], 4)  # (3, 1, 1, 4)
    both = torch.ones(4, 4, dtype=torch.bool).tril() & tgt_pad  # (3, 1, 4, 4): causal AND target padding
    return [
        ModuleCase("Post-LN, d_model = 8, 2 heads, d_ff = 16: x (2, 5, 8), memory (2, 7, 8), causal mask (5, 5), "
                   "memory padding mask (2, 1, 1, 7)", {"d_model": 8, "n_heads": 2, "d_ff": 16},
                   (r(2, 5, 8), r(2, 7, 8), causal5, _lengths_mask([7, 4], 7))),
        ModuleCase("Pre-LN, d_model = 12, 3 heads, d_ff = 20: x (3, 4, 12), memory (3, 6, 12), causal AND target "
                   "padding mask (3, 1, 4, 4), memory padding mask (3, 1, 1, 6)",
                   {"d_model": 12, "n_heads": 3, "d_ff": 20, "norm_first": True},
                   (r(3, 4, 12), r(3, 6, 12), both, _lengths_mask([6, 3, 5], 6))),
        ModuleCase("Post-LN, d_model = 8, 4 heads, d_ff = 8, no masks: x (1, 6, 8), memory (1, 3, 8)",
                   {"d_model": 8, "n_heads": 4, "d_ff": 8}, (r(1, 6, 8), r(1, 3, 8), None, None)),
        ModuleCase("Pre-LN, d_model = 16, 2 heads, d_ff = 16: x (2, 3, 16), memory (2, 5, 16), causal mask (3, 3), "
                   "memory padding mask (2, 1, 1, 5)", {"d_model": 16, "n_heads": 2, "d_ff": 16, "norm_first": True},
                   (r(2, 3, 16), r(2, 5, 16), torch.ones(3, 3, dtype=torch.bool).tril(), _lengths_mask([2, 5], 5))),
        # train() with dropout: the grader's seeded masks, the same for the reference (runner.seeded_dropout)
        ModuleCase("Post-LN, train() with dropout = 0.4 (the grader's dropout masks), d_model = 8, 2 heads, d_ff = 16: "
                   "x (2, 5, 8), memory (2, 7, 8), causal mask (5, 5), memory padding mask (2, 1, 1, 7)",
                   {"d_model": 8, "n_heads": 2, "d_ff": 16, "dropout": 0.4},
                   (r(2, 5, 8), r(2, 7, 8), causal5, _lengths_mask([7, 3], 7)), train=True),
        ModuleCase("Pre-LN, train() with dropout = 0.4 (the grader's dropout masks), d_model = 12, 3 heads, d_ff = 20: "
                   "x (3, 4, 12), memory (3, 6, 12), causal AND target padding mask (3, 1, 4, 4), memory padding mask (3, 1, 1, 6)",
                   {"d_model": 12, "n_heads": 3, "d_ff": 20, "norm_first": True, "dropout": 0.4},
                   (r(3, 4, 12), r(3, 6, 12), both, _lengths_mask([6, 2, 4], 6)), train=True),
    ]


# --- Hidden checks: transformer_parameter_count ---------------------------------------------------------


def _count_cases(seed):
    """Grader-chosen configurations first (d_ff never 4 d_model, where two mistakes would give the same wrong
    count, and every combination of sharing, tying and final norms), then the paper's base model."""
    g = generator(seed, "transformer_parameter_count#cases")
    cases = []
    for i, (share, tie, final) in enumerate(((True, False, False), (False, True, False), (True, True, True), (False, False, True))):
        d = 8 * int(torch.randint(1, 65, (1,), generator=g))
        d_ff = 4 * d + 8 * int(torch.randint(1, 9, (1,), generator=g))
        v = int(torch.randint(50, 5000, (1,), generator=g))
        w = v if share else int(torch.randint(50, 5000, (1,), generator=g))
        cases.append(Case(f"src_vocab {v}, tgt_vocab {w}, d_model {d}, d_ff {d_ff}, {i + 1} layers, "
                          f"share_embeddings={share}, tie_output={tie}, final_norm={final}",
                          (v, w, d, d_ff, i + 1), {"share_embeddings": share, "tie_output": tie, "final_norm": final}))
    cases += [
        Case("the paper's base model: shared 37000-token vocabulary, d_model 512, d_ff 2048, 6 layers, tied output",
             (37000, 37000, 512, 2048, 6), {"share_embeddings": True, "tie_output": True}),
        Case("the base model with separate vocabularies of 32000 and 30000 tokens, nothing shared",
             (32000, 30000, 512, 2048, 6)),
    ]
    return cases


def _count_is_int(call, record, got, expected):
    value = got[0] if got else None
    if isinstance(value, int) and not isinstance(value, bool):
        return
    kind = "a tensor" if isinstance(value, Returned) else f"a {type(value).__name__}"
    raise AssertionError(
        f"count of transformer_parameter_count on {call.label}: {kind}, expected a Python int. A count of parameters "
        "is a whole number: return an int (no / division, float(...) or torch.tensor(...))."
    )


# --- Hidden checks: greedy_decode -----------------------------------------------------------------------

GAP_MIN = 1e-3  # the smallest gap between the top two logits on the greedy path (float64), on the grader's weights
PAD, BOS = 0, 1


def toy_state(init, g, skeleton=None):
    """Grader weights for ToyTranslator(**init), rescaled so that the greedy path depends on the source and the
    position (embeddings x 6) and its argmaxes are clear (output weights x 2, output bias x 0.2). skeleton: a
    ToyTranslator(**init) to read the parameters' shapes from (default: a new one; its own values are not used)."""
    state = grader_weights(skeleton if skeleton is not None else ref.ToyTranslator(**init), g)
    for name in ("src_embed.weight", "tgt_embed.weight", "pos.weight"):
        state[name] = state[name] * 6
    state["out_proj.weight"] = state["out_proj.weight"] * 2
    state["out_proj.bias"] = state["out_proj.bias"] * 0.2
    return state


def toy_model(init, state):
    """ToyTranslator(**init) in float64 and eval() mode, with `state` loaded (None: its own initial weights)."""
    model = ref.ToyTranslator(**init).double()
    if state is not None:
        model.load_state_dict(state)
    return model.eval()


@torch.no_grad()
def free_run(model, src, src_mask, steps):
    """The greedy path with no end token (steps tokens per row) and its smallest top-two logit gap."""
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), BOS, dtype=torch.long)
    gap = math.inf
    for _ in range(steps):
        logits = model.decode(ys, memory, src_mask)[:, -1]  # (B, V)
        top2 = logits.topk(2, dim=-1).values
        gap = min(gap, float((top2[:, 0] - top2[:, 1]).min()))
        ys = torch.cat([ys, logits.argmax(-1)[:, None]], dim=1)
    return ys[:, 1:], gap


def first_steps(path, token):
    """Per row, the step (1-based) at which `token` first appears on the path, or None."""
    out = []
    for row in path.tolist():
        out.append(row.index(token) + 1 if token in row else None)
    return out


def ends_well(path, eos, max_len, all_finish):
    """Does the free-run greedy path (B, max_len) make a good case for end token `eos`? all_finish: every row
    produces it before step max_len, the first and the last to finish at least two steps apart (so that
    stopping at the first finished row and dropping the <s> column give different shapes); else some row
    produces it and another never does. Either way a finished row would go on with another token than `eos`
    (so that emitting after </s> and filling with eos_id differ)."""
    steps = first_steps(path, eos)
    found = [s for s in steps if s is not None]
    if all_finish:
        if len(found) != len(steps) or max(found) - min(found) < 2 or max(found) >= max_len:
            return False
        stop = max(found)
    else:
        if not 1 <= len(found) < len(steps):
            return False
        stop = max_len
    return any(s is not None and any(t != eos for t in row[s:stop]) for s, row in zip(steps, path.tolist()))


class _MaskLeftOut:
    """A model whose encode or decode (`where`) is called without the source mask: a caller's mistake, simulated."""

    def __init__(self, model, where):
        self.model, self.where = model, where

    def encode(self, src, src_mask=None):
        return self.model.encode(src, None if self.where in ("encode", "both") else src_mask)

    def decode(self, tgt, memory, src_mask=None):
        return self.model.decode(tgt, memory, None if self.where in ("decode", "both") else src_mask)


def decoding_setup(g, init, batch, src_len, lengths, max_len, all_finish, name_left_out=False):
    """Weights, a source batch and an end token for greedy_decode, drawn with `g`, whose greedy path has no
    near tie, ends as ends_well asks, and changes at its first token when src_mask is left out of encode or of
    decode (so every case sees the mask dropped from either call, and the first case is the one reported).
    With name_left_out (the first case), the paths with the mask left out (of encode, of decode, of both) have no
    near tie either and give three results different from each other and from the right one, so that whichever
    of the three a learner made is named as itself on any CPU (about 1 draw in 45 qualifies).
    Returns (state, src, src_mask, eos_id)."""
    # One skeleton for the shapes and one float64 model reloaded with each draw: building two models per draw was
    # most of the search's time (about 1 draw in 45 qualifies), and the draws from g are the same.
    skeleton, model = ref.ToyTranslator(**init), toy_model(init, None)
    for _ in range(2000 if name_left_out else 400):
        state = toy_state(init, g, skeleton)
        src = torch.randint(3, init["src_vocab"], (batch, src_len), generator=g)
        mask = _lengths_mask(lengths, src_len)
        src = torch.where(mask[:, 0, 0], src, PAD)
        model.load_state_dict(state)
        first = free_run(model, src, mask, 1)[0][:, 0]  # the cheap test first: it rejects most draws
        if any(bool((free_run(_MaskLeftOut(model, where), src, mask, 1)[0][:, 0] == first).all()) for where in ("encode", "decode")):
            continue
        path, gap = free_run(model, src, mask, max_len)
        if gap < GAP_MIN:
            continue
        if name_left_out and any(free_run(_MaskLeftOut(model, where), src, mask, max_len)[1] < GAP_MIN
                                 for where in ("encode", "decode", "both")):
            continue
        for eos in range(2, init["tgt_vocab"]):
            if not ends_well(path, eos, max_len, all_finish):
                continue
            if name_left_out:
                results = [_greedy(model, src, max_len, BOS, eos, mask, PAD)] + [
                    _greedy(model, src, max_len, BOS, eos, mask, PAD, use_mask=False)] + [
                    _greedy(model, src, max_len, BOS, eos, mask, PAD, mask_to=to) for to in ("encode", "decode")]
                if any(a.shape == b.shape and torch.equal(a, b) for i, a in enumerate(results) for b in results[i + 1:]):
                    continue
            return state, src, mask, eos
    raise RuntimeError("no decoding case found")  # does not happen for the sizes below (tests/test_checks_ch08.py)


def _greedy_cases(seed):
    g = generator(seed, "greedy_decode#cases")
    cases = []
    init = {"src_vocab": 9, "tgt_vocab": 10, "d_model": 8, "n_heads": 2}
    state, src, mask, eos = decoding_setup(g, init, 3, 5, [5, 3, 4], 8, all_finish=True, name_left_out=True)
    cases.append(Case(f"ToyTranslator(9, 10, d_model 8, 2 heads) in eval() mode, a batch of 3 padded sources (3, 5), "
                      f"max_len 8, eos_id {eos}: the rows end at different steps; pad_id 0",
                      (Model("ToyTranslator", init, state, mode_after=True), src, 8, BOS, eos), {"src_mask": mask, "pad_id": PAD}))
    init = {"src_vocab": 11, "tgt_vocab": 12, "d_model": 16, "n_heads": 4}
    state, src, mask, eos = decoding_setup(g, init, 2, 6, [6, 2], 5, all_finish=False)
    cases.append(Case(f"ToyTranslator(11, 12, d_model 16, 4 heads) in train() mode, 2 padded sources (2, 6), max_len 5, "
                      f"eos_id {eos}: one row never produces it; pad_id None (finished rows are filled with eos_id)",
                      (Model("ToyTranslator", init, state, train=True, mode_after=True), src, 5, BOS, eos), {"src_mask": mask}))
    init = {"src_vocab": 9, "tgt_vocab": 10, "d_model": 8, "n_heads": 1}
    state, src, mask, eos = decoding_setup(g, init, 4, 4, [4, 4, 1, 3], 6, all_finish=True)
    cases.append(Case(f"ToyTranslator(9, 10, d_model 8, 1 head), 4 padded sources (4, 4), max_len 6, eos_id {eos}, "
                      "pad_id 0", (Model("ToyTranslator", init, state), src, 6, BOS, eos), {"src_mask": mask, "pad_id": PAD}))
    return cases


# --- Hidden checks: train_step --------------------------------------------------------------------------

TOY_PARAMETERS = tuple(name for name, _ in ref.ToyTranslator(9, 10, 8, 2).named_parameters())


def target_batch(g, lengths, width, vocab, pad_id, eos_id=2):
    """(B, width) targets <s> y_1 ... y_n </s> then pad_id; the tokens y are any id but <s>, </s> and pad_id.
    When pad_id is not 0, the first row starts with the real token 0 (a pad_id taken as 0 shows)."""
    allowed = torch.tensor([t for t in range(vocab) if t not in (BOS, eos_id, pad_id)])
    rows = []
    for i, n in enumerate(lengths):
        tokens = allowed[torch.randint(len(allowed), (n,), generator=g)].tolist()
        if i == 0 and pad_id != 0:
            tokens[0] = 0
        rows.append([BOS] + tokens + [eos_id] + [pad_id] * (width - n - 2))
    return torch.tensor(rows)


def _train_cases(seed):
    g = generator(seed, "train_step#cases")
    cases = []
    for label, init, src_lengths, tgt_lengths, ts, width, pad_id, eps, lr, steps in (
        ("3 sources (3, 5), targets (3, 7) padded with pad_id 0, eps 0.1, lr 0.5, 2 steps",
         {"src_vocab": 9, "tgt_vocab": 10, "d_model": 8, "n_heads": 2}, [5, 3, 4], [5, 2, 3], 5, 7, 0, 0.1, 0.5, 2),
        ("2 sources (2, 4), targets (2, 6) padded with pad_id 7 (not 0), eps 0.2, lr 0.3, 3 steps",
         {"src_vocab": 8, "tgt_vocab": 11, "d_model": 12, "n_heads": 3}, [4, 2], [4, 1], 4, 6, 7, 0.2, 0.3, 3),
    ):
        state = grader_weights(ref.ToyTranslator(**init), g)
        src = torch.randint(3, init["src_vocab"], (len(src_lengths), ts), generator=g)
        mask = _lengths_mask(src_lengths, ts)
        tgt = target_batch(g, tgt_lengths, width, init["tgt_vocab"], pad_id)
        cases.append(Case(f"ToyTranslator{tuple(init.values())}: {label}",
                          (Model("ToyTranslator", init, state, train=True, state_after=True), src, tgt, mask, pad_id),
                          {"eps": eps, "lr": lr, "steps": steps}))
    # The optimizer argument: Adam (stateful, its steps differ from SGD's at any lr), built on the model's parameters
    init = {"src_vocab": 9, "tgt_vocab": 10, "d_model": 8, "n_heads": 2}
    state = grader_weights(ref.ToyTranslator(**init), g)
    src, mask = torch.randint(3, init["src_vocab"], (2, 5), generator=g), _lengths_mask([5, 3], 5)
    tgt = target_batch(g, [4, 2], 7, init["tgt_vocab"], 0)
    cases.append(Case(f"ToyTranslator{tuple(init.values())}: 2 sources (2, 5), targets (2, 7) padded with pad_id 0, "
                      "eps 0.1, 3 steps of the optimizer it is given, Adam(lr=0.05) (lr=0.5 is for the SGD made without one)",
                      (Model("ToyTranslator", init, state, train=True, state_after=True), src, tgt, mask, 0),
                      {"eps": 0.1, "lr": 0.5, "steps": 3, "optimizer": Optim("Adam", {"lr": 0.05})}))
    return cases


CHECKS = {
    "DecoderLayer_hidden": module_check(ref.DecoderLayer, _decoder_cases, ("output",), DECODER_MISTAKES, DECODER_HINTS,
                                       FORBIDDEN, salt=DECODER_SALT),
    "transformer_parameter_count_hidden": function_check(
        ref.transformer_parameter_count, _count_cases, ("count",), COUNT_MISTAKES, COUNT_HINTS, FORBIDDEN, meta=False,
        dtypes=None, extra=_count_is_int),
    "greedy_decode_hidden": function_check(
        ref.greedy_decode, _greedy_cases, ("tokens", "the model's mode after the call (model.training)"), GREEDY_MISTAKES, GREEDY_HINTS, FORBIDDEN, meta=False,
        categories=("values", "shape"), shape_mistakes=GREEDY_SHAPE_MISTAKES),
    "train_step_hidden": function_check(
        ref.train_step, _train_cases, ("losses",) + TOY_PARAMETERS, TRAIN_MISTAKES, TRAIN_HINTS, FORBIDDEN,
        categories=("values", "shape", "dtype", "device")),
}


# --- Build-time helpers of the notebook's visible checks ------------------------------------------------
# `make` is the authoring kit's demo_module (the template passes kit.demo_module): the checks never import the kit.


def count_mistake_values(*args, **kwargs):
    """{wrong count: mistake} for a visible check of transformer_parameter_count (the right count left out)."""
    right = ref.transformer_parameter_count(*args, **kwargs)
    values = {}
    for description, fn in COUNT_MISTAKES.items():
        values.setdefault(fn(*args, **kwargs), description)
    values.pop(right, None)
    return values


def visible_decoding(make, init, batch, src_len, lengths, max_len, all_finish, seed):
    """(salt, src, src_mask, eos_id) of a visible greedy_decode case on ToyTranslator with demo weights (the
    first salt whose greedy path has no near tie and ends as decoding_setup asks)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, init["src_vocab"], (batch, src_len), generator=g)
    mask = _lengths_mask(lengths, src_len)
    src = torch.where(mask[:, 0, 0], src, PAD)
    for salt in range(500):
        path, gap = free_run(make(ref.ToyTranslator, init, salt).eval(), src, mask, max_len)
        if gap < 10 * GAP_MIN or (path == PAD).any():  # no pad_id among the real tokens: less confusing to read
            continue
        for eos in range(2, init["tgt_vocab"]):
            if ends_well(path, eos, max_len, all_finish):
                return salt, src, mask, eos
    raise RuntimeError("no visible decoding case")


def decode_run(make, init, salt, variant=ref.greedy_decode):
    """variant(ToyTranslator with demo weights (salt), *args): for mistakes() and literal()."""

    def run(*args, **kwargs):
        return variant(make(ref.ToyTranslator, init, salt).eval(), *args, **kwargs)

    return run


def decode_variants(make, init, salt):
    return {d: decode_run(make, init, salt, f) for d, f in {**GREEDY_MISTAKES, **GREEDY_SHAPE_MISTAKES}.items()}


def train_run(make, init, variant=ref.train_step):
    """The losses of variant on ToyTranslator with demo weights, then its out_proj.weight after the steps
    (flattened): what the visible check of train_step compares."""

    def run(src, tgt, src_mask, pad_id, **kwargs):
        model = make(ref.ToyTranslator, init)
        losses = variant(model, src, tgt, src_mask, pad_id, **kwargs)
        return torch.cat([losses, model.out_proj.weight.detach().flatten()])

    return run


def train_variants(make, init):
    return {d: train_run(make, init, f) for d, f in TRAIN_MISTAKES.items()}

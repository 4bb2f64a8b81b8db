"""Test data of chapter 08-encoder-decoder: typical wrong answers (WRONG_ANSWERS) and correct answers written unlike
the reference (VALID_ANSWERS), as edits of the reference source in solutions/ch08_encoder_decoder.py.

Used by the chapter contract (tests/test_chapter_contract.py), the learner trials, the demo and
scripts/grading_corpus.py, through `autograder.registry.answers("08-encoder-decoder")`; never loaded by a grading
host. The rest of each hidden check's catalogue (the causal mask left out, the keys and values of cross-attention
taken from the target, the gradients never cleared, ...) is shown named in-process by tests/test_checks_ch08.py,
which costs far less CI time than a notebook per mistake.
"""

from autograder.authoring.answers import Edit, ValidAnswer, WrongAnswer

WRONG_ANSWERS = {
    # DecoderLayer
    # issue 30's learner trial: train-mode dropout, stateful optimizers, masks
    "train_own_sgd_always": WrongAnswer("train_step", "    if optimizer is None:\n        optimizer = torch.optim.SGD(model.parameters(), lr=lr)",
                                        "    optimizer = torch.optim.SGD(model.parameters(), lr=lr)  # always its own", "the optimizer it is given is ignored"),
    "train_no_zero_grad": WrongAnswer("train_step", "        optimizer.zero_grad()  # gradients add up in .grad: clear the previous step's\n",
                                      "", "the gradients are never cleared"),
    "train_loss_after_step": WrongAnswer("train_step", "        losses.append(loss.detach())",
                                         "        losses.append(F.cross_entropy(model(src, dec_in, src_mask).reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=pad_id, label_smoothing=eps).detach())",
                                         "the losses are those of the model after each step"),
    "greedy_src_mask_not_in_decode": WrongAnswer("greedy_decode", "        logits = model.decode(ys, memory, src_mask)",
                                                 "        logits = model.decode(ys, memory, None)", "src_mask is not passed on to model.decode"),
    "greedy_src_mask_not_in_encode": WrongAnswer("greedy_decode", "    memory = model.encode(src, src_mask)",
                                                 "    memory = model.encode(src, None)", "src_mask is not passed on to model.encode"),
    "greedy_leaves_eval_mode": WrongAnswer("greedy_decode", "    model.train(was_training)\n", "",
                                           "the model is left in eval() mode"),
    "greedy_train_at_end": WrongAnswer("greedy_decode", "    model.train(was_training)\n", "    model.train()\n",
                                       "the model is put in train() mode before returning"),
    "decoder_dropout_after_residual": WrongAnswer("DecoderLayer", "            x = self.norm3(x + self._ff_block(x))",
                                                  "            x = self.norm3(self.dropout3(x + self.ff(x)))", "dropout is applied to the residual sum"),
    "decoder_ff_input_dropped": WrongAnswer("DecoderLayer", "        return self.dropout3(self.ff(x))",
                                            "        return self.ff(self.dropout3(x))", "dropout is applied to its input"),
    "count_final_norm_once": WrongAnswer("transformer_parameter_count", "    finals = 2 * ln if final_norm else 0",
                                         "    finals = ln if final_norm else 0", "one final LayerNorm instead of two"),
    "decoder_masks_inverted": WrongAnswer(
        "DecoderLayer", "        if self.norm_first:\n",
        "        # PyTorch's decoder layer wants ~mask\n"
        "        tgt_mask = None if tgt_mask is None else ~tgt_mask\n"
        "        memory_mask = None if memory_mask is None else ~memory_mask\n"
        "        if self.norm_first:\n",
        "masks inverted"),
    "decoder_returns_weights_too": WrongAnswer("DecoderLayer", "        return x  # (B, Tt, D)", "        return x, self.cross_weights",
                                               "should return 1 value", category="shape"),
    "decoder_output_float32": WrongAnswer("DecoderLayer", "        return x  # (B, Tt, D)", "        return x.float()  # (B, Tt, D)",
                                          "dtype", category="dtype"),
    "decoder_default_mask_on_cpu": WrongAnswer(
        "DecoderLayer", "        if self.norm_first:\n",
        "        if memory_mask is None:  # every source position may be attended\n"
        "            memory_mask = torch.ones(1, 1, 1, memory.size(1), dtype=torch.bool)\n"
        "        if self.norm_first:\n",
        "device", category="device"),
    "decoder_cross_attention_renamed": WrongAnswer(
        "DecoderLayer", "self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)",
        "self.enc_dec_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)\n        self.cross_attn = self.enc_dec_attn",
        "do not have the names", category="weights"),
    # transformer_parameter_count
    "count_no_attention_biases": WrongAnswer("transformer_parameter_count", "attn = 4 * d * d + 4 * d", "attn = 4 * d * d",
                                             "attention biases are not counted"),
    # greedy_decode
    "greedy_emits_after_eos": WrongAnswer(
        "greedy_decode", "        next_tok = torch.where(finished, torch.full_like(next_tok, fill), next_tok)\n", "",
        "keep emitting tokens after"),
    "greedy_stops_at_any": WrongAnswer("greedy_decode", "if finished.all():", "if finished.any():", "ANY row", category="shape"),
    # train_step
    "train_labels_not_shifted": WrongAnswer("train_step", "dec_in, labels = tgt[:, :-1], tgt[:, 1:]",
                                            "dec_in, labels = tgt[:, :-1], tgt[:, :-1]", "labels are not shifted"),
    "train_returns_last_loss": WrongAnswer("train_step", "    return torch.stack(losses)  # (steps,)", "    return losses[-1]",
                                           "shape", category="shape"),
    "train_losses_as_floats": WrongAnswer(
        "train_step", "        losses.append(loss.detach())\n    return torch.stack(losses)  # (steps,)",
        "        losses.append(loss.item())\n    return torch.tensor(losses)  # (steps,)",
        "dtype", category="dtype"),
    "train_losses_moved_to_cpu": WrongAnswer("train_step", "    return torch.stack(losses)  # (steps,)",
                                              "    return torch.stack(losses).cpu()  # (steps,) for logging", "device",
                                              category="device"),
    # issue 30's learner trial, second round
    "train_eps_ignored": WrongAnswer("train_step", "                               label_smoothing=eps)",
                                     "                               )", "label smoothing is missing"),
    "train_losses_preallocated_float32": WrongAnswer("train_step", "", '''def train_step(model, src, tgt, src_mask, pad_id, eps=0.0, lr=0.1, steps=1, optimizer=None):
    opt = optimizer if optimizer is not None else torch.optim.SGD(model.parameters(), lr=lr)
    losses = torch.empty(steps)
    for i in range(steps):
        model.zero_grad()
        logits = model(src, tgt[:, :-1], src_mask)  # (B, T - 1, V)
        loss = F.cross_entropy(logits.transpose(1, 2), tgt[:, 1:], ignore_index=pad_id, label_smoothing=eps)
        loss.backward()
        opt.step()
        losses[i] = loss.item()
    return losses
''', "dtype float32, expected torch.float64", category="dtype"),
}

VALID_ANSWERS = {
    "decoder_loop_over_sublayers": ValidAnswer((Edit("DecoderLayer", (
        "        if self.norm_first:\n"
        "            x = x + self._self_block(self.norm1(x), tgt_mask)\n"
        "            x = x + self._cross_block(self.norm2(x), memory, memory_mask)\n"
        "            x = x + self._ff_block(self.norm3(x))\n"
        "        else:\n"
        "            x = self.norm1(x + self._self_block(x, tgt_mask))\n"
        "            x = self.norm2(x + self._cross_block(x, memory, memory_mask))\n"
        "            x = self.norm3(x + self._ff_block(x))\n"), (
        "        sublayers = [\n"
        "            (self.norm1, lambda y: self.dropout1(self.self_attn(y, y, y, tgt_mask)[0])),\n"
        "            (self.norm2, lambda y: self.dropout2(self.cross_attn(y, memory, memory, memory_mask)[0])),\n"
        "            (self.norm3, lambda y: self.dropout3(self.ff(y))),\n"
        "        ]\n"
        "        for norm, sublayer in sublayers:\n"
        "            x = x + sublayer(norm(x)) if self.norm_first else norm(x + sublayer(x))\n")),),
        "the three sub-layers as a list of (norm, sublayer) pairs in a loop, calling the attentions directly"),
    "decoder_norms_also_in_a_module_list": ValidAnswer((Edit("DecoderLayer",
        "        self.norm3 = nn.LayerNorm(d_model)\n",
        "        self.norm3 = nn.LayerNorm(d_model)\n"
        "        self.norms = nn.ModuleList([getattr(self, f\"norm{i}\") for i in (1, 2, 3)])  # the same modules, twice registered\n"),),
        "the named norms also kept in a ModuleList (each parameter under two names in state_dict)"),
    "decoder_getattr_sublayers": ValidAnswer((Edit("DecoderLayer", (
        "        if self.norm_first:\n"
        "            x = x + self._self_block(self.norm1(x), tgt_mask)\n"
        "            x = x + self._cross_block(self.norm2(x), memory, memory_mask)\n"
        "            x = x + self._ff_block(self.norm3(x))\n"
        "        else:\n"
        "            x = self.norm1(x + self._self_block(x, tgt_mask))\n"
        "            x = self.norm2(x + self._cross_block(x, memory, memory_mask))\n"
        "            x = self.norm3(x + self._ff_block(x))\n"), (
        "        blocks = (lambda y: self._self_block(y, tgt_mask), lambda y: self._cross_block(y, memory, memory_mask), self._ff_block)\n"
        "        for i, block in enumerate(blocks, start=1):\n"
        "            norm = getattr(self, f\"norm{i}\")\n"
        "            x = x + block(norm(x)) if self.norm_first else norm(x + block(x))\n")),),
        "the three sub-layers in a loop, each norm read with getattr(self, f'norm{i}')"),
    "train_step_zero_first_sum_over_real_tokens": ValidAnswer((Edit("train_step", "", '''def train_step(model, src, tgt, src_mask, pad_id, eps=0.0, lr=0.1, steps=1, optimizer=None):
    optimizer = optimizer if optimizer is not None else torch.optim.SGD(model.parameters(), lr=lr)
    dec_in, labels = tgt[:, :-1], tgt[:, 1:]
    losses = []
    for i in range(steps):
        optimizer.zero_grad(set_to_none=True)
        logits = model(src, dec_in, src_mask)
        total = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=pad_id, label_smoothing=eps, reduction="sum")
        loss = total / (labels != pad_id).sum()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return torch.tensor(losses, dtype=logits.dtype, device=src.device)
'''),), "zero_grad first, classes on dim 1 with reduction='sum' over the real tokens, losses gathered with .item()"),
    "greedy_preallocated": ValidAnswer((Edit("greedy_decode", "", '''@torch.no_grad()
def greedy_decode(model, src, max_len, bos_id, eos_id, src_mask=None, pad_id=None):
    was_training = model.training
    model.eval()
    fill = eos_id if pad_id is None else pad_id
    memory = model.encode(src, src_mask)
    out = torch.full((src.size(0), max_len + 1), fill, dtype=torch.long, device=src.device)
    out[:, 0] = bos_id
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    t = 0
    while t < max_len and not bool(done.all()):
        nxt = model.decode(out[:, : t + 1], memory, src_mask)[:, -1].argmax(-1)
        out[:, t + 1] = torch.where(done, torch.full_like(nxt, fill), nxt)
        done = done | (nxt == eos_id)
        t += 1
    model.train(was_training)
    return out[:, : t + 1]
'''),), "a preallocated output filled column by column in a while loop"),
    "count_from_own_decoder_layer": ValidAnswer((Edit("transformer_parameter_count", "", '''def transformer_parameter_count(src_vocab, tgt_vocab, d_model, d_ff, n_layers, share_embeddings=False, tie_output=False,
                                final_norm=False):
    def size(module):
        return sum(p.numel() for p in module.parameters())

    with torch.device("meta"):
        dec = size(DecoderLayer(d_model, 1, d_ff))
        attn, ffn, norm = size(MultiHeadAttention(d_model, 1)), size(FeedForward(d_model, d_ff)), size(nn.LayerNorm(d_model))
    enc = attn + ffn + 2 * norm
    vocab = src_vocab * d_model + (0 if share_embeddings else tgt_vocab * d_model) + (0 if tie_output else tgt_vocab * d_model)
    return n_layers * (enc + dec) + vocab + (2 * norm if final_norm else 0)
'''),), "the decoder layer counted on the learner's own DecoderLayer built on the meta device"),
    "count_by_building_blocks_on_meta": ValidAnswer((Edit("transformer_parameter_count", "", '''def transformer_parameter_count(src_vocab, tgt_vocab, d_model, d_ff, n_layers, share_embeddings=False, tie_output=False,
                                final_norm=False):
    def size(module):
        return sum(p.numel() for p in module.parameters())

    with torch.device("meta"):  # shapes only: nothing is allocated
        attn, ffn, norm = size(MultiHeadAttention(d_model, 1)), size(FeedForward(d_model, d_ff)), size(nn.LayerNorm(d_model))
    layers = n_layers * ((attn + ffn + 2 * norm) + (2 * attn + ffn + 3 * norm))
    embeddings = src_vocab * d_model + (0 if share_embeddings else tgt_vocab * d_model)
    return layers + embeddings + (0 if tie_output else tgt_vocab * d_model) + (2 * norm if final_norm else 0)
'''),), "counting the given blocks built on the meta device instead of a closed formula"),
    "greedy_row_by_row": ValidAnswer((Edit("greedy_decode", "", '''@torch.no_grad()
def greedy_decode(model, src, max_len, bos_id, eos_id, src_mask=None, pad_id=None):
    was_training = model.training
    model.eval()
    fill = eos_id if pad_id is None else pad_id
    rows = []
    for b in range(src.size(0)):  # one sentence at a time
        mask_b = None if src_mask is None else src_mask[b:b + 1]
        memory = model.encode(src[b:b + 1], mask_b)
        row = [bos_id]
        while len(row) <= max_len and (len(row) == 1 or row[-1] != eos_id):
            ys = torch.tensor([row], dtype=torch.long, device=src.device)
            row.append(int(model.decode(ys, memory, mask_b)[0, -1].argmax()))
        rows.append(row)
    width = max(len(r) for r in rows)
    model.train(was_training)
    return torch.tensor([r + [fill] * (width - len(r)) for r in rows], dtype=torch.long, device=src.device)
'''),), "each sentence decoded on its own (batch of one, a Python list), then padded to the longest"),
    "train_masked_mean_manual_sgd": ValidAnswer((Edit("train_step", "", '''def train_step(model, src, tgt, src_mask, pad_id, eps=0.0, lr=0.1, steps=1, optimizer=None):
    labels = tgt[:, 1:]                                      # (B, T - 1)
    real = (labels != pad_id).to(next(model.parameters()).dtype)
    losses = []
    for _ in range(steps):
        logp = F.log_softmax(model(src, tgt[:, :-1], src_mask), dim=-1)  # (B, T - 1, V)
        nll = -logp.gather(-1, labels[..., None])[..., 0]   # (B, T - 1)
        per_label = (1 - eps) * nll - eps * logp.mean(dim=-1)
        loss = (per_label * real).sum() / real.sum()          # mean over the real labels
        if optimizer is None:
            for p in model.parameters():
                p.grad = None
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    if p.grad is not None:
                        p -= lr * p.grad
        else:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses)
'''),), "label smoothing and the masked mean by hand (log_softmax, gather), and plain SGD written out"),
    # issue 30's learner trial, second round
    "train_class_dim_second_model_zero_grad": ValidAnswer((Edit("train_step", "", '''def train_step(model, src, tgt, src_mask, pad_id, eps=0.0, lr=0.1, steps=1, optimizer=None):
    opt = optimizer if optimizer is not None else torch.optim.SGD(model.parameters(), lr=lr)
    p = next(model.parameters())
    losses = torch.empty(steps, dtype=p.dtype, device=p.device)  # the model's dtype and device
    for i in range(steps):
        model.zero_grad()
        logits = model(src, tgt[:, :-1], src_mask)  # (B, T - 1, V)
        loss = F.cross_entropy(logits.transpose(1, 2), tgt[:, 1:], ignore_index=pad_id, label_smoothing=eps)
        loss.backward()
        opt.step()
        losses[i] = loss.detach()
    return losses
'''),), "the class dimension second (B, V, T - 1), model.zero_grad(), losses preallocated"),
    "count_per_layer_loop": ValidAnswer((Edit("transformer_parameter_count", "", '''def transformer_parameter_count(src_vocab, tgt_vocab, d_model, d_ff, n_layers, share_embeddings=False,
                                tie_output=False, final_norm=False):
    def linear(n_in, n_out):
        return n_in * n_out + n_out

    attention = 4 * linear(d_model, d_model)
    ffn = linear(d_model, d_ff) + linear(d_ff, d_model)
    norm = 2 * d_model
    total = src_vocab * d_model
    if not share_embeddings:
        total += tgt_vocab * d_model
    if not tie_output:
        total += tgt_vocab * d_model
    for _ in range(n_layers):
        total += attention + ffn + 2 * norm  # encoder layer
        total += 2 * attention + ffn + 3 * norm  # decoder layer
    if final_norm:
        total += 2 * norm
    return total
'''),), "a helper for a linear layer's parameters, the layers added up in a loop"),
}

"""Test data of chapter 10-capstone: typical wrong answers (WRONG_ANSWERS) and correct answers written unlike the
reference (VALID_ANSWERS), as edits of the reference source in solutions/ch10_capstone.py.

Used by the chapter contract (tests/test_chapter_contract.py), the learner trials and scripts, through
`autograder.registry.answers("10-capstone")`; never loaded by a grading host. The learning check trains a model
(train_hidden, Check.costly): the contract runs it only for the answers that say they lose it (`fails`). The
training bugs that only training shows (a large rate without warm-up, a model with dropout left in train() mode,
padding in the loss) are shown with their diagnoses by tests/test_checks_ch10.py on small budgets, and through
the real CLI by tests/test_capstone_grading.py.
"""

from autograder.authoring.answers import Edit, ValidAnswer, WrongAnswer

MODEL, LEARN = "CapstoneTransformer_hidden", "train_hidden"

WRONG_ANSWERS = {
    # CapstoneTransformer
    "model_no_causal_mask": WrongAnswer(
        "CapstoneTransformer", "            y = layer(y, memory, tgt_mask, src_mask)  # (B, Tt, D)",
        "            y = layer(y, memory, None, src_mask)  # (B, Tt, D)",
        "has no causal mask", fails=frozenset({MODEL, LEARN})),  # the learning check's probe: no training run
    "model_no_cross_attention_mask": WrongAnswer(
        "CapstoneTransformer", "            y = layer(y, memory, tgt_mask, src_mask)  # (B, Tt, D)",
        "            y = layer(y, memory, tgt_mask)  # (B, Tt, D)",
        "the source padding mask is not passed to the cross-attention"),
    "model_embeddings_not_scaled": WrongAnswer(
        "CapstoneTransformer", "        x = self.pos(self.embed(src) * math.sqrt(self.d_model))  # (B, Ts, D)",
        "        x = self.pos(self.embed(src))  # (B, Ts, D)", "not multiplied by sqrt(d_model)",
        also=(Edit("CapstoneTransformer", "        y = self.pos(self.embed(tgt) * math.sqrt(self.d_model))  # (B, Tt, D)",
                   "        y = self.pos(self.embed(tgt))  # (B, Tt, D)"),)),
    "model_last_position_only": WrongAnswer(
        "CapstoneTransformer", "        return self.out_proj(self.decoder_norm(y))  # (B, Tt, VOCAB)",
        "        return self.out_proj(self.decoder_norm(y))[:, -1]  # (B, VOCAB): the next token only",
        "shape", category="shape"),
    # train_step
    "step_targets_not_shifted": WrongAnswer(
        "train_step", "    dec_in, labels = tgt[:, :-1], tgt[:, 1:]  # (B, T - 1) each",
        "    dec_in, labels = tgt[:, :-1], tgt[:, :-1]  # (B, T - 1) each",
        "targets not shifted", fails=frozenset({"train_step_hidden", LEARN})),  # one real training run
    "step_padding_in_loss": WrongAnswer(
        "train_step", "    loss = sequence_loss(logits, labels)",
        "    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), label_smoothing=LABEL_SMOOTHING)",
        "padding counted in the loss"),
    "step_no_clipping": WrongAnswer(
        "train_step", "    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)\n", "", "no gradient clipping"),
    "step_loss_kept_as_batch": WrongAnswer(
        "train_step", "    return loss.detach()", "    return loss.detach().reshape(1)", "shape", category="shape"),
    "step_loss_in_float32": WrongAnswer(
        "train_step", "    return loss.detach()", "    return loss.detach().float()", "dtype", category="dtype"),
    # train
    "train_rate_zero": WrongAnswer(
        "train", "        losses.append(train_step(model, optimizer, src, tgt, lengths, warmup_lr(step, n_steps)).item())",
        "        losses.append(train_step(model, optimizer, src, tgt, lengths, 0.0).item())  # the rate is set below",
        "loss did not move", category="learning", fails=frozenset({LEARN})),  # one real training run
}

VALID_ANSWERS = {
    "model_tied_the_other_way_with_helpers": ValidAnswer((
        Edit("CapstoneTransformer", "        self.out_proj.weight = self.embed.weight  # tied: one Parameter for input and output",
             "        self.embed.weight = self.out_proj.weight  # tied the other way round: still one Parameter"),
        Edit("CapstoneTransformer", "        x = self.pos(self.embed(src) * math.sqrt(self.d_model))  # (B, Ts, D)",
             "        x = self._embed(src)  # (B, Ts, D)"),
        Edit("CapstoneTransformer", "        y = self.pos(self.embed(tgt) * math.sqrt(self.d_model))  # (B, Tt, D)",
             "        y = self._embed(tgt)  # (B, Tt, D)"),
        Edit("CapstoneTransformer", "    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None) -> Tensor:",
             "    def _embed(self, ids):\n        return self.pos(self.embed(ids) * self.d_model ** 0.5)\n\n"
             "    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None) -> Tensor:"),
    ), "the output projection's weight given to the embedding, and the scaled embedding in a helper method"),
    "model_eight_heads_wider_ffn": ValidAnswer((
        Edit("CapstoneTransformer", "        n_heads: int = N_HEADS,", "        n_heads: int = 8,  # twice the reference's heads"),
        Edit("CapstoneTransformer", "        d_ff: int = D_FF,", "        d_ff: int = 256,  # twice the reference's FFN"),
    ), "another size: 8 heads and d_ff = 256 by default (100% on the learning check's draw for seeds 0-4, about twice "
       "the reference's training time)"),
    "step_class_dim_second_loss": ValidAnswer((
        Edit("train_step", "    loss = sequence_loss(logits, labels)",
             "    loss = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=PAD, label_smoothing=LABEL_SMOOTHING)"),
    ), "its own cross-entropy with the classes in dimension 1, no flattening"),
    "train_adamw_own_loop": ValidAnswer((
        Edit("train", "", '''def train(model, budget, generator, log_every=0):
    steps = budget // BATCH_SIZE
    optimizer = torch.optim.AdamW(model.parameters(), lr=PEAK_LR, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.01)
    losses = []
    for step in range(steps):
        batch = make_batch(BATCH_SIZE, generator)
        rate = PEAK_LR * min((step + 1) / WARMUP, (steps - step) / max(steps - WARMUP + 1, 1))
        losses.append(float(train_step(model, optimizer, *batch, rate)))
        if log_every and (step + 1) % log_every == 0:
            print(step + 1, sum(losses[-log_every:]) / log_every)
    return losses
'''),
    ), "AdamW with weight decay, its own schedule written inline, no model.eval() (greedy_decode sets it)"),
}

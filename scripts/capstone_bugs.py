"""What the capstone's diagnoses can see, and how cheaply: the reference and each typical training bug, through the
probes that part 3's checks are to use (chapter 10, issue 28). Prints one line per variant; evidence for choosing
the probes and their thresholds, not a test.

    python scripts/capstone_bugs.py [steps]     (default 150 training steps per variant, one thread)

Probes:
- leak: max |change| of the decoder's output at positions < 4 when decoder input position 4 changes (causal: 0);
- step: the loss of one train_step on a seeded batch with grader-set weights, against the reference's (by value);
- curve: the mean loss of the first and the last 20 of `steps` steps (NaN or rising: divergence);
- twice: whether two greedy decodings of the same sources agree (a model left in train() with dropout: no);
- acc: held-out exact match after `steps` steps (the learning check's measure, on a short budget).
"""

import sys
import time

import torch
import torch.nn.functional as F

from autograder.checks import ch10_capstone as checks
from solutions import ch10_capstone as ref
from solutions.ch05_masks import padding_mask
from solutions.ch08_encoder_decoder import greedy_decode


NoCausal = checks._assembled(causal=False)  # the decoder's self-attention without the causal mask


def _step(model, optimizer, loss, lr):
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad(); loss.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), ref.CLIP_NORM)
    optimizer.step()
    return loss.detach()


def step_unshifted(model, optimizer, src, tgt, lengths, lr):
    model.train()
    logits = model(src, tgt[:, :-1], padding_mask(lengths, src.size(1)))
    return _step(model, optimizer, ref.sequence_loss(logits, tgt[:, :-1]), lr)  # labels = the decoder input: not shifted


def step_pad_in_loss(model, optimizer, src, tgt, lengths, lr):
    model.train()
    logits = model(src, tgt[:, :-1], padding_mask(lengths, src.size(1)))
    loss = F.cross_entropy(logits.reshape(-1, ref.VOCAB), tgt[:, 1:].reshape(-1), label_smoothing=ref.LABEL_SMOOTHING)
    return _step(model, optimizer, loss, lr)


def constant_lr(lr):
    return lambda step, total: lr  # no warm-up, no decay


def greedy_in_train_mode(model, src, max_len, bos_id, eos_id, src_mask=None, pad_id=None):
    model.train()  # the mistake: greedy decoding with dropout on
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        for _ in range(max_len):
            ys = torch.cat([ys, model.decode(ys, memory, src_mask)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ys


VARIANTS = {  # name: (model class, dropout, train_step, lr(step, total), decode)
    "reference": (ref.CapstoneTransformer, 0.0, ref.train_step, ref.warmup_lr, greedy_decode),
    "reference, dropout 0.1": (ref.CapstoneTransformer, 0.1, ref.train_step, ref.warmup_lr, greedy_decode),
    "no causal mask": (NoCausal, 0.0, ref.train_step, ref.warmup_lr, greedy_decode),
    "targets not shifted": (ref.CapstoneTransformer, 0.0, step_unshifted, ref.warmup_lr, greedy_decode),
    "padding in the loss": (ref.CapstoneTransformer, 0.0, step_pad_in_loss, ref.warmup_lr, greedy_decode),
    "no warm-up, lr 3e-2": (ref.CapstoneTransformer, 0.0, ref.train_step, constant_lr(3e-2), greedy_decode),
    "train() at evaluation, dropout 0.1": (ref.CapstoneTransformer, 0.1, ref.train_step, ref.warmup_lr, greedy_in_train_mode),
}


def probe(name, steps):
    cls, dropout, step_fn, lr_fn, decode = VARIANTS[name]
    # leak and step: grader-set weights (seed 0), one seeded batch
    torch.manual_seed(0)
    model = cls(dropout=dropout)
    src, tgt, lengths = ref.make_batch(32, torch.Generator().manual_seed(1))
    mask = padding_mask(lengths, src.size(1))
    model.eval()
    with torch.no_grad():
        out = model(src, tgt[:, :-1], mask)
        changed = tgt[:, :-1].clone()
        changed[:, 4] = 3 + (changed[:, 4] - 3 + 1) % ref.N_DIGITS
        leak = (model(src, changed, mask)[:, :4] - out[:, :4]).abs().max().item()
    torch.manual_seed(0)
    ref_model = ref.CapstoneTransformer(dropout=0.0)
    ref_model.load_state_dict(model.state_dict())
    ref_loss = ref.train_step(ref_model, ref.make_optimizer(ref_model), src, tgt, lengths, ref.warmup_lr(1, 10)).item()
    torch.manual_seed(0)  # the same dropout draws, if any
    loss = step_fn(model, ref.make_optimizer(model), src, tgt, lengths, lr_fn(1, 10)).item()
    # curve, acc, twice: a short training run
    torch.manual_seed(0)
    model = cls(dropout=dropout)
    optimizer = ref.make_optimizer(model)
    gen, losses = torch.Generator().manual_seed(0), []
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        losses.append(step_fn(model, optimizer, *ref.make_batch(ref.BATCH_SIZE, gen), lr_fn(step, steps)).item())
    seconds = time.perf_counter() - t0
    model.eval()
    acc = ref.held_out_accuracy(model, 300, torch.Generator().manual_seed(5), decode=decode)
    s, t, l = ref.make_batch(100, torch.Generator().manual_seed(6), split="held_out")
    m = padding_mask(l, s.size(1))
    twice = torch.equal(decode(model, s, s.size(1) + 1, ref.BOS, ref.EOS, m, ref.PAD),
                        decode(model, s, s.size(1) + 1, ref.BOS, ref.EOS, m, ref.PAD))
    first, last = sum(losses[:20]) / 20, sum(losses[-20:]) / 20
    print(f"| {name} | {leak:.1e} | {loss:.4f} vs {ref_loss:.4f} | {first:.3f} -> {last:.3f} | {twice} | "
          f"{100 * acc:.1f}% | {seconds:.1f} |", flush=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 150
    print(f"{steps} training steps of {ref.BATCH_SIZE} per variant")
    print("| variant | leak | one step: loss vs reference | loss, first -> last 20 steps | two greedy runs agree | held-out exact match | s |")
    print("|---|---|---|---|---|---|---|")
    for name in VARIANTS:
        probe(name, steps)

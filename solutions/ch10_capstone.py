"""Reference solution for chapter 10-capstone: a small encoder-decoder Transformer, assembled from the course's
own parts, trained on CPU to reverse digit sequences of variable length, and graded by what it learned.

The task. The source is a sequence of MIN_LEN..MAX_LEN decimal digits, padded to a common width; the target is
the same digits backwards, then </s>. Reversing needs attention: output position t must copy source digit L-1-t,
where L is the sequence's own length, so the decoder has to find by content AND position which source token to
read next (cross-attention learns the anti-diagonal alignment). It cannot be memorised: there are
sum_L 10^L ~ 1.1e8 sources of 2 to 8 digits and a training run sees ~3.8e4 of them. On top of that a fixed hash
splits all sources into a training part (7/8) and a held-out part (1/8): make_batch(split="train") never yields a
held-out source, and the grade is measured on held-out sources only, so every graded sequence is one that no
training run with make_batch can have seen. (Sorting was the other candidate; it is a poorer test of attention:
a model can sort by counting digits, and its cross-attention shows no alignment to look at.)

The model (CapstoneTransformer) is chapter 08's design at toy size, built from the earlier chapters' parts:
- ch04 MultiHeadAttention (inside the layers), ch05 causal_mask and padding_mask,
- ch06 PositionalEncoding (sinusoidal: no learned positions, so the page can ask what happens past MAX_LEN),
- ch07 EncoderLayer (Pre-LN) and the learning-rate warm-up,
- ch08 DecoderLayer (Pre-LN) and greedy_decode.
One embedding matrix is shared by source, target and output projection (one vocabulary of 13 tokens).

Training (train_step, train): teacher forcing (decoder input tgt[:, :-1], labels tgt[:, 1:]), cross-entropy with
label smoothing LABEL_SMOOTHING over the non-padding labels only, Adam with the warm-up schedule (linear warm-up
for WARMUP steps to PEAK_LR, then linear decay towards 0 at the end of the budget), gradient clipping at CLIP_NORM. The budget is a number of training sequences (examples), not seconds: the grade never depends on the
machine's speed or load; the sandbox's wall-clock limit is only a safety cap.

Conventions: batch-first shapes in comments; boolean masks with True = may attend.
"""

import math
import time

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from solutions.ch05_masks import causal_mask, padding_mask
from solutions.ch06_positional_encoding import PositionalEncoding
from solutions.ch07_ffn_layernorm import EncoderLayer
from solutions.ch08_encoder_decoder import DecoderLayer, greedy_decode

# --- The task -------------------------------------------------------------------------------------------------

PAD, BOS, EOS = 0, 1, 2  # special tokens; the digits 0-9 are tokens 3-12
N_DIGITS = 10
VOCAB = 3 + N_DIGITS
MIN_LEN, MAX_LEN = 2, 8  # lengths of the training sources (and of the graded ones)
HELD_OUT = 8  # a source is held out (never in training) when its hash is 0 modulo HELD_OUT: 1/8 of all sources

# --- The model and its training (the reference's choices; a learner may choose others) ------------------------

D_MODEL, N_HEADS, D_FF, N_LAYERS = 64, 4, 128, 2
PE_LEN = 64  # rows of the positional-encoding table: room for the page's longer-than-training sources
BATCH_SIZE = 64
PEAK_LR, WARMUP = 3e-3, 100  # Adam's rate rises linearly for WARMUP steps to PEAK_LR, then falls linearly to ~0
LABEL_SMOOTHING = 0.1
CLIP_NORM = 1.0
BUDGET = 400 * BATCH_SIZE  # training sequences the grader allows (the reference: 400 steps of 64)


def source_hash(src: Tensor) -> Tensor:
    """A fixed hash of each padded source row: src (n, T) token ids, PAD = 0 after the digits -> (n,) int64.

    A polynomial hash modulo a prime: a function of the digits and the length only (padding adds nothing), and
    one that has nothing to do with reversing (a model cannot use it to tell the two parts apart).
    """
    positions = torch.arange(src.size(1))  # (T,)
    weights = torch.tensor(31, dtype=torch.int64).pow(positions) % 1_000_003  # (T,) 31^i mod p, exact in int64
    return (src.to(torch.int64) * weights).sum(dim=1) % 1_000_003  # (n,)


def is_held_out(src: Tensor) -> Tensor:
    """(n, T) padded sources -> (n,) bool, True for the held-out part (1 in HELD_OUT of all sources)."""
    return source_hash(src) % HELD_OUT == 0


def make_batch(
    n: int,
    generator: torch.Generator,
    min_len: int = MIN_LEN,
    max_len: int = MAX_LEN,
    split: str = "train",
) -> tuple[Tensor, Tensor, Tensor]:
    """n random digit sequences of min_len..max_len digits from the given split ("train" or "held_out").

    Returns src (n, max_len) padded with PAD; tgt (n, max_len + 2) = <s> reversed digits </s>, padded with PAD;
    lengths (n,). Rows of the wrong split are drawn again (a deterministic function of the generator's state).
    """
    if split not in ("train", "held_out"):
        raise ValueError(f"split must be 'train' or 'held_out', got {split!r}")
    src = torch.empty(0, max_len, dtype=torch.long)  # (0, max_len): rows accepted so far
    lengths = torch.empty(0, dtype=torch.long)
    while src.size(0) < n:
        length = torch.randint(min_len, max_len + 1, (n,), generator=generator)  # (n,)
        digits = torch.randint(3, VOCAB, (n, max_len), generator=generator)  # (n, max_len) tokens 3..12
        real = torch.arange(max_len) < length[:, None]  # (n, max_len) True = a real digit
        candidates = torch.where(real, digits, PAD)  # (n, max_len)
        keep = is_held_out(candidates) == (split == "held_out")  # (n,)
        src = torch.cat([src, candidates[keep]])[:n]
        lengths = torch.cat([lengths, length[keep]])[:n]
    pos = torch.arange(max_len)  # (max_len,)
    real = pos < lengths[:, None]  # (n, max_len)
    backwards = src.gather(1, (lengths[:, None] - 1 - pos).clamp(min=0))  # position j <- digit L-1-j
    tgt = torch.cat([torch.full((n, 1), BOS), torch.where(real, backwards, PAD), torch.full((n, 1), PAD)], dim=1)
    tgt[torch.arange(n), lengths + 1] = EOS  # (n, max_len + 2)
    return src, tgt, lengths


def show(ids: Tensor) -> str:
    """Token ids -> '3 1 4 </s> _' (digits, <s>, </s>, _ for padding)."""
    names = {PAD: "_", BOS: "<s>", EOS: "</s>"}
    return " ".join(names.get(t, str(t - 3)) for t in ids.tolist())


# --- The model ------------------------------------------------------------------------------------------------


class CapstoneTransformer(nn.Module):
    """A small Pre-LN encoder-decoder Transformer from the course's parts.

    Shared token embedding (VOCAB x d_model, times sqrt(d_model)) + sinusoidal PositionalEncoding, n_layers
    EncoderLayer(norm_first=True) then a final LayerNorm; n_layers DecoderLayer(norm_first=True) then a final
    LayerNorm; output projection tied to the embedding (no bias).

    encode(src (B, Ts), src_mask (B, 1, 1, Ts)) -> memory (B, Ts, D)
    decode(tgt (B, Tt), memory (B, Ts, D), src_mask) -> logits (B, Tt, VOCAB); the decoder's self-attention gets
        causal_mask(Tt): with padding only at the end, a real position never sees a later padded one, and the
        padded positions' outputs are left out of the loss, so no target padding mask is needed.
    forward(src, tgt, src_mask) = decode(tgt, encode(src, src_mask), src_mask)
        src_mask: True = real source token; used by the encoder's self-attention and by every cross-attention.
    """

    def __init__(
        self,
        vocab: int = VOCAB,
        d_model: int = D_MODEL,
        n_heads: int = N_HEADS,
        d_ff: int = D_FF,
        n_layers: int = N_LAYERS,
        dropout: float = 0.0,
        max_len: int = PE_LEN,
    ):
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = PositionalEncoding(d_model, max_len=max_len, dropout=dropout)
        self.encoder_layers = nn.ModuleList(
            EncoderLayer(d_model, n_heads, d_ff, dropout=dropout, norm_first=True) for _ in range(n_layers))
        self.encoder_norm = nn.LayerNorm(d_model)  # a Pre-LN stack needs a norm at its end
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(d_model, n_heads, d_ff, dropout=dropout, norm_first=True) for _ in range(n_layers))
        self.decoder_norm = nn.LayerNorm(d_model)
        self.out_proj = nn.Linear(d_model, vocab, bias=False)
        for p in self.parameters():  # Xavier-uniform for every matrix, as torch.nn.Transformer does
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        self.out_proj.weight = self.embed.weight  # tied: one Parameter for input and output

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        x = self.pos(self.embed(src) * math.sqrt(self.d_model))  # (B, Ts, D)
        for layer in self.encoder_layers:
            x = layer(x, src_mask)  # (B, Ts, D)
        return self.encoder_norm(x)  # (B, Ts, D) the memory

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None = None) -> Tensor:
        tgt_mask = causal_mask(tgt.size(1), device=tgt.device)  # (Tt, Tt) True on and below the diagonal
        y = self.pos(self.embed(tgt) * math.sqrt(self.d_model))  # (B, Tt, D)
        for layer in self.decoder_layers:
            y = layer(y, memory, tgt_mask, src_mask)  # (B, Tt, D)
        return self.out_proj(self.decoder_norm(y))  # (B, Tt, VOCAB)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None) -> Tensor:
        memory = self.encode(src, src_mask)  # (B, Ts, D)
        return self.decode(tgt, memory, src_mask)  # (B, Tt, VOCAB)


# --- Training -------------------------------------------------------------------------------------------------


def warmup_lr(step: int, total_steps: int, peak_lr: float = PEAK_LR, warmup: int = WARMUP) -> float:
    """The learning rate of optimizer step `step` (1, 2, ..., total_steps): a linear warm-up over `warmup` steps to
    peak_lr, then a linear decay that would reach 0 one step after the last.

    lr(step) = peak_lr * min(step / warmup, (total_steps - step + 1) / (total_steps - warmup + 1))

    The warm-up is chapter 07's (the first Adam steps, made with poor estimates of the gradient's scale, are kept
    small); the decay is not the paper's 1/sqrt(step): with a budget fixed in advance, a rate that goes down to 0
    at its end lets the last steps settle instead of jittering around the optimum.
    """
    if not 1 <= step <= total_steps or warmup < 1:
        raise ValueError(f"need 1 <= step <= total_steps and warmup >= 1, got step={step}, "
                         f"total_steps={total_steps}, warmup={warmup}")
    # A run shorter than the warm-up (a quick test) only warms up: the decay's denominator is at least 1.
    return peak_lr * min(step / warmup, (total_steps - step + 1) / max(total_steps - warmup + 1, 1))


def make_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    """Adam with the paper's betas (0.9, 0.98) and eps 1e-9; train_step sets its learning rate at every step."""
    return torch.optim.Adam(model.parameters(), lr=PEAK_LR, betas=(0.9, 0.98), eps=1e-9)


def sequence_loss(logits: Tensor, labels: Tensor, eps: float = LABEL_SMOOTHING) -> Tensor:
    """logits (B, T, V), labels (B, T) -> scalar: label-smoothed cross-entropy, mean over the non-PAD labels."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=PAD,
                           label_smoothing=eps)


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    src: Tensor,
    tgt: Tensor,
    lengths: Tensor,
    lr: float,
) -> Tensor:
    """One optimisation step on one batch at learning rate lr; returns the loss before the update (0-dim, detached).

    src (B, Ts), tgt (B, Ts + 2) = <s> reversed </s> padded, lengths (B,) from make_batch. Teacher forcing: the
    decoder input is tgt[:, :-1] (shifted right, starts with <s>), the labels are tgt[:, 1:]. Then set the
    optimizer's rate to lr, zero_grad, backward, clip the gradient norm to CLIP_NORM, optimizer.step().
    """
    model.train()
    src_mask = padding_mask(lengths, src.size(1))  # (B, 1, 1, Ts) True = real digit
    dec_in, labels = tgt[:, :-1], tgt[:, 1:]  # (B, T - 1) each
    logits = model(src, dec_in, src_mask)  # (B, T - 1, VOCAB)
    loss = sequence_loss(logits, labels)
    for group in optimizer.param_groups:  # the schedule's rate for this step
        group["lr"] = lr
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
    optimizer.step()
    return loss.detach()


class StepModel(nn.Module):
    """The course's small model for the train_step exercise, with CapstoneTransformer's interface and no attention
    (so that train_step is graded apart from the learner's parts): each decoder position's embedding, joined with
    the mean of the real source tokens' embeddings, through a tanh layer to the logits.

    forward(src (B, Ts), tgt (B, Tt), src_mask (B, 1, 1, Ts) or None) -> logits (B, Tt, vocab)
    """

    def __init__(self, vocab: int = VOCAB, d_model: int = 16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.mix = nn.Linear(2 * d_model, d_model)
        self.out_proj = nn.Linear(d_model, vocab)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None) -> Tensor:
        memory = self.embed(src)  # (B, Ts, D)
        if src_mask is None:
            keep = torch.ones_like(memory[..., :1])  # (B, Ts, 1)
        else:
            keep = src_mask.reshape(src.size(0), src.size(1), 1).to(memory.dtype)  # (B, Ts, 1) 1 = a real token
        context = (memory * keep).sum(dim=1) / keep.sum(dim=1)  # (B, D) the mean of the real source tokens
        y = self.embed(tgt)  # (B, Tt, D)
        joined = torch.cat([y, context[:, None, :].expand_as(y)], dim=-1)  # (B, Tt, 2D)
        return self.out_proj(torch.tanh(self.mix(joined)))  # (B, Tt, vocab)


def train(model: nn.Module, budget: int, generator: torch.Generator, log_every: int = 0) -> list[float]:
    """Train `model` on `budget` training sequences (budget // BATCH_SIZE steps of BATCH_SIZE fresh sequences from
    make_batch(split="train") with `generator`), step s at warmup_lr(s, steps). Returns the loss of every step.
    Leaves the model in eval() mode. log_every > 0: print the step and the mean loss every log_every steps."""
    n_steps = budget // BATCH_SIZE
    optimizer = make_optimizer(model)
    device = next(model.parameters()).device  # batches are drawn on the CPU (the generator's), trained where the model is
    losses = []
    for step in range(1, n_steps + 1):
        src, tgt, lengths = (t.to(device) for t in make_batch(BATCH_SIZE, generator))
        losses.append(train_step(model, optimizer, src, tgt, lengths, warmup_lr(step, n_steps)).item())
        if log_every and step % log_every == 0:
            recent = losses[-log_every:]
            print(f"step {step:5d}  loss {sum(recent) / len(recent):.3f}  lr {warmup_lr(step, n_steps):.2e}")
    model.eval()
    return losses


# --- Evaluation -----------------------------------------------------------------------------------------------


def exact_match(model: nn.Module, src: Tensor, tgt: Tensor, lengths: Tensor, decode=None) -> Tensor:
    """Greedy-decode src and compare with tgt: (n,) bool, True where every digit AND </s> are right.

    decode(model, src, max_len, bos_id, eos_id, src_mask, pad_id) is chapter 08's greedy_decode (or a learner's).
    Positions after the target's </s> do not count (what the model writes after </s> is never read).
    """
    decode = decode or greedy_decode  # looked up when called (in a notebook: the learner's greedy_decode)
    src_mask = padding_mask(lengths, src.size(1))  # (n, 1, 1, Ts)
    pred = decode(model, src, src.size(1) + 1, BOS, EOS, src_mask, PAD).cpu()  # (n, 1 + steps), column 0 is <s>
    src, tgt, lengths = src.cpu(), tgt.cpu(), lengths.cpu()
    n, width = src.size(0), lengths.max().item() + 2  # <s>, the digits, </s>
    if pred.size(1) < width:  # stopped before the longest target's </s>: pad with PAD (never equal to </s>)
        pred = torch.cat([pred, torch.full((n, width - pred.size(1)), PAD, dtype=pred.dtype)], dim=1)
    needed = torch.arange(width) < (lengths[:, None] + 2)  # (n, width) True up to and including </s>
    right = (pred[:, :width] == tgt[:, :width]) | ~needed  # (n, width)
    return right.all(dim=1)  # (n,)


def held_out_accuracy(model: nn.Module, n: int, generator: torch.Generator, min_len: int = MIN_LEN,
                      max_len: int = MAX_LEN, decode=None) -> float:
    """Exact-match accuracy of greedy decoding on n fresh held-out sources of min_len..max_len digits."""
    src, tgt, lengths = make_batch(n, generator, min_len, max_len, split="held_out")
    return exact_match(model, src, tgt, lengths, decode).float().mean().item()


# --- The grader's driver ----------------------------------------------------------------------------------------

LEAK_POSITION = 4  # the leakage probe changes decoder input position 4 and watches positions 0..3


@torch.no_grad()
def _leakage(model: nn.Module, src: Tensor, tgt: Tensor, lengths: Tensor) -> Tensor:
    """Max |change| of the logits at decoder positions < LEAK_POSITION when decoder input LEAK_POSITION changes
    (0 for a causal decoder). src (n, Ts), tgt (n, Ts + 2) with every length > LEAK_POSITION."""
    was_training = model.training
    model.eval()
    src_mask = padding_mask(lengths, src.size(1))  # (n, 1, 1, Ts)
    dec_in = tgt[:, :-1]  # (n, T)
    changed = dec_in.clone()
    changed[:, LEAK_POSITION] = 3 + (changed[:, LEAK_POSITION] - 3 + 1) % N_DIGITS  # another digit there
    logits = model(src, dec_in, src_mask)  # (n, T, V)
    if logits.dim() != 3 or tuple(logits.shape[:2]) != tuple(dec_in.shape):
        raise ValueError(f"the model's output has shape {tuple(logits.shape)} for a decoder input {tuple(dec_in.shape)}: "
                         "expected (batch, decoder positions, vocabulary), the logits of every position")
    before = logits[:, :LEAK_POSITION]  # (n, LEAK_POSITION, V)
    after = model(src, changed, src_mask)[:, :LEAK_POSITION]
    model.train(was_training)
    return (after - before).abs().max().double()  # () float64


def learning_run(model_class, train_fn, decode_fn, seed: int, budget: int, probe_src: Tensor, probe_tgt: Tensor,
                 probe_lengths: Tensor, src: Tensor, lengths: Tensor):
    """What the grader runs (in the sandbox, in the learner's notebook): build model_class() after
    torch.manual_seed(seed); the leakage probe on the untrained model; unless it leaks, train_fn(model, budget,
    torch.Generator().manual_seed(seed)); then decode_fn the held-out sources src (n, Ts) twice.

    While train_fn runs, the course's make_batch counts the sequences it hands out: `drawn` (a 0-dim int64), which
    the judge holds against the budget.

    Returns (leak () float64, losses (steps,) float64, first (n, k), second (n, k), drawn ()): raw values, judged
    outside. A leaking decoder is not trained (losses empty, both decodings empty): it fails on the probe alone.
    """
    torch.manual_seed(seed)
    model = model_class().to(src.device)  # built on the CPU from the seed, then moved to the grading device
    leak = _leakage(model, probe_src, probe_tgt, probe_lengths)
    if leak > 1e-5:
        empty = torch.zeros(0, 0, dtype=torch.long)
        return leak, torch.zeros(0, dtype=torch.float64), empty, empty, torch.tensor(0)
    course_make_batch, drawn = globals()["make_batch"], [0]

    def counted_make_batch(n, *args, **kwargs):  # the course's make_batch, counting what train_fn draws
        drawn[0] += int(n)
        return course_make_batch(n, *args, **kwargs)

    globals()["make_batch"] = counted_make_batch
    try:
        losses = train_fn(model, budget, torch.Generator().manual_seed(seed))
    finally:
        globals()["make_batch"] = course_make_batch
    losses = torch.as_tensor([float(x) for x in losses], dtype=torch.float64)  # (steps,)
    src_mask = padding_mask(lengths, src.size(1))  # (n, 1, 1, Ts)
    first = decode_fn(model, src, src.size(1) + 1, BOS, EOS, src_mask, PAD)  # (n, 1 + steps)
    second = decode_fn(model, src, src.size(1) + 1, BOS, EOS, src_mask, PAD)
    return leak, losses, first, second, torch.tensor(drawn[0])


def see_it_learn(model_class=None, train_fn=None, decode_fn=None, budget: int = BUDGET, seed: int = 0,
                 log_every: int = 50, n_test: int = 500):
    """The notebook's "watch it learn" run (the learner calls it in a cell of their own; grading never does): build
    model_class() after torch.manual_seed(seed), train it with train_fn(model, budget, generator, log_every=...)
    (a line every log_every steps), then print the exact-match accuracy on n_test held-out sources, overall and by
    length. Returns (model, losses, accuracy)."""
    model_class, train_fn = model_class or CapstoneTransformer, train_fn or train  # looked up when called
    torch.manual_seed(seed)
    model = model_class()
    start = time.perf_counter()
    losses = train_fn(model, budget, torch.Generator().manual_seed(seed), log_every=log_every)
    seconds = time.perf_counter() - start
    src, tgt, lengths = make_batch(n_test, torch.Generator().manual_seed(seed + 1_000_003), split="held_out")
    right = exact_match(model, src, tgt, lengths, decode_fn)  # (n_test,) bool
    print(f"trained {len(losses)} steps in {seconds:.1f} s; exact match on {n_test} held-out sources: "
          f"{right.float().mean().item():.1%}")
    by_length = ", ".join(f"{n}: {right[lengths == n].float().mean().item():.0%}"
                          for n in range(MIN_LEN, MAX_LEN + 1) if (lengths == n).any())
    print(f"by length ({by_length})")
    return model, losses, right.float().mean().item()


# --- The notebook's parts cell: what the learner pastes from chapters 02-08 -------------------------------------
# (the instructor notebook's solution; ANSWER_CELLS is how a solution cell made of several chapters' code is named)

PARTS = (
    ("ch02_qkv_attention", ("stable_softmax", "scaled_dot_product_attention")),
    ("ch04_multi_head", ("split_heads", "merge_heads", "MultiHeadAttention")),
    ("ch05_masks", ("causal_mask", "padding_mask")),
    ("ch06_positional_encoding", ("sinusoidal_pe", "PositionalEncoding")),
    ("ch07_ffn_layernorm", ("layer_norm", "LayerNorm", "FeedForward", "EncoderLayer")),
    ("ch08_encoder_decoder", ("DecoderLayer", "greedy_decode")),
)


def _parts_cell() -> str:
    import importlib
    import inspect

    blocks = ["from collections.abc import Sequence  # padding_mask's type hint"]
    for module, names in PARTS:
        m = importlib.import_module(f"solutions.{module}")
        blocks += [inspect.getsource(getattr(m, name)).rstrip() for name in names]
    return "\n\n\n".join(blocks) + "\n"


ANSWER_CELLS = {"parts": _parts_cell()}
# Solution cells whose answer is the earlier chapters' answers (guarded as those: tests/test_class_edition.py).
EARLIER_CHAPTERS_CELLS = ("parts",)

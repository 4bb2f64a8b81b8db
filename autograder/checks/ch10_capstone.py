"""Checks for chapter 10-capstone: the assembled model (MODEL), one training step (STEP) and the learning check
(LEARNING), CHECKS by grade id.

The learning check (LEARNING): the grader draws, from the grading seed, a probe batch and EVAL_N held-out sources
(solutions.ch10_capstone's hash split: no make_batch(split="train") ever yields one). In the sandbox the
course-given driver `learning_run` (a read-only cell of the notebook) builds the learner's CapstoneTransformer()
after torch.manual_seed(seed), runs the leakage probe on it, trains it with the learner's
train(model, BUDGET, torch.Generator().manual_seed(seed)) unless it leaks, and decodes the held-out sources twice
with the learner's greedy_decode; the course's make_batch counts the sequences train draws. Outside, the judge
reads the raw results and decides (after the budget: more sequences drawn than BUDGET fail):
1. leakage (a later decoder input changes an earlier output): "decoder without a causal mask", judged on the
   untrained model, before and instead of any training (a leaking notebook costs a second, not a training run);
2. losses that are not finite or that end more than RISE higher than they started: divergence, "no warm-up with
   a large learning rate" named as the likely cause;
3. two decodings of the same sources that differ: "the model left in train() mode at evaluation" (dropout on);
4. exact match of the first decoding against the targets, computed here; the pass mark is PASS_MARK. Below it
   the message gives the accuracy and the likely cause the losses suggest.
The budget is a number of training sequences (BUDGET), never seconds: the grade does not depend on the machine.

The one-step check (STEP): the learner's train_step(model, optimizer, src, tgt, lengths, lr) on the course's
StepModel (no attention: the learner's parts cost nothing here) with grader-set weights (cases.Model,
state_after=True), one Adam and one SGD step (cases.Optim), by value: the loss and every parameter after the step. Targets not shifted, padding counted in the
loss and a step without gradient clipping are named.

Partial credit: below PASS_MARK the learning check gives a PartialCredit on CREDIT_SCALE (the grading path scores
that fraction of the cell's points). Time: the chapter's LIMITS raise the sandbox's cell and notebook limits for a
capstone notebook only (notebook.chapter_limits; the warm template serves it, the limits being per job).

On a GPU the driver moves the model built on the CPU to the grading device (not yet run on one).
"""

import torch

import torch.nn.functional as F

import math

from autograder.checks import (
    Call, Case, Check, Fn, ModuleCase, Optim, PartialCredit, builtins, function_check, generator, grader_weights,
    module_check, outcome,
)
from autograder.checks.cases import Model
from solutions import ch10_capstone as ref
from solutions.ch05_masks import padding_mask

# The capstone uses nothing the learner has not written: PyTorch's attention, multi-head attention, Transformer layers
# and causal-mask helpers are switched off while it is graded (F.cross_entropy stays allowed in the training step).
GROUPS = ("attention", "multi_head_attention", "transformer_layers", "causal_masks")
FORBIDDEN = builtins.forbidden(*GROUPS)
SHORTCUT_NAMES = builtins.shortcut_names(*GROUPS)

EVAL_N = 500  # held-out sources decoded per grading
PROBE_N = 8  # sources of the leakage probe (all longer than ref.LEAK_POSITION)
PASS_MARK = 0.97
# Partial credit below the pass mark (the accuracy on the held-out sources -> the fraction of the points): a model
# that reverses most sequences has learned most of the task; one below the last step has not learned it.
CREDIT_SCALE = ((0.90, 2 / 3), (0.70, 1 / 3))
# The sandbox's time for a capstone notebook (notebook.chapter_limits; every other chapter keeps the run's limits):
# the reference trains in 10-20 s on one core, a learner's larger model may take several times that.
LIMITS = {"cell_seconds": 300, "notebook_seconds": 420}
STALLED = 1.0  # a final loss this far above the floor: the model stopped learning early (a rate too large)
RISE = 0.1  # a loss that ends this much above where it started has diverged (label-smoothed CE starts near log 13)
LEAK_TOL = 1e-5  # a causal decoder changes nothing (exactly 0 on the CPU); float32 rounding stays far below this

NO_CAUSAL_MASK = "decoder without a causal mask"
DIVERGED = "the training diverged"
TRAIN_MODE = "the model is left in train() mode at evaluation"
BELOW_PASS_MARK = "below the pass mark"


def _inputs(seed: int):
    """The grader's draws for a seed: the probe batch, then the held-out sources (src, tgt, lengths each)."""
    g = generator(seed, "learning")
    probe = ref.make_batch(PROBE_N, g, ref.LEAK_POSITION + 1, ref.MAX_LEN)
    held_out = ref.make_batch(EVAL_N, g, split="held_out")
    return probe, held_out


def _learning_plan(seed, device):
    (p_src, p_tgt, p_len), (src, _, lengths) = _inputs(seed)
    label = f"training with the grading seed {seed} on {ref.BUDGET:,} sequences, then {EVAL_N} held-out sources"
    args = (Fn("CapstoneTransformer"), Fn("train"), Fn("greedy_decode"), seed, ref.BUDGET, p_src, p_tgt, p_len, src, lengths)
    return [Call(label, args, {}, device, None, observe=False)]  # observers: see Call.observe


def _values(returned, what):
    values = getattr(returned, "values", None)
    if not isinstance(values, torch.Tensor):
        raise AssertionError(f"learning_run: {what} could not be read back from the notebook.")
    return values


def _loss_floor(eps: float = ref.LABEL_SMOOTHING, vocab: int = ref.VOCAB) -> float:
    """The smallest label-smoothed cross-entropy (the entropy of the smoothed target): a perfect model's loss."""
    hit, miss = 1 - eps + eps / vocab, eps / vocab
    return -(hit * torch.log(torch.tensor(hit)) + (vocab - 1) * miss * torch.log(torch.tensor(miss))).item()


def _likely_cause(losses: torch.Tensor, accuracy: float) -> str:
    """What the loss curve of a run below the pass mark (at this accuracy) suggests."""
    n = max(1, min(50, losses.numel() // 4))
    first, last = losses[:n].mean().item(), losses[-n:].mean().item()
    if last < _loss_floor() + 0.05 and accuracy >= 0.5:
        return (f" The training loss reached {last:.3f}, the floor of the label-smoothed loss, yet decoding gets "
                f"{accuracy:.1%}: the model does what it was trained to do, but greedy decoding does not do the same. Check "
                "that greedy_decode feeds back its own tokens, passes src_mask to encode and decode, and stops at </s>.")
    if last < _loss_floor() + 0.05:
        return (f" Yet the training loss reached {last:.3f}, the floor of the label-smoothed loss: the model learned what "
                "it was trained on, which is not the task. The usual cause: labels that are not the decoder input shifted "
                "by one (the input is tgt[:, :-1], the labels tgt[:, 1:]; with the same tokens as input and label the "
                "model only learns to copy its input). Check also that greedy_decode feeds back its own tokens.")
    if abs(last - first) < 0.02:
        return (f" The loss did not move ({first:.3f} over the first {n} steps, {last:.3f} over the last {n}): the weights "
                "hardly changed. Does every step call optimizer.step(), with a learning rate above 0 (the schedule's "
                "steps counted from 1), on the model's own parameters?")
    if last > 0.8 * first or last > _loss_floor() + STALLED:
        return (f" The loss stalled far above where a model that learns the task ends ({first:.3f} over the first {n} "
                f"steps, {last:.3f} over the last {n}; the reference ends near {_loss_floor() + 0.01:.2f}): a learning "
                "rate too large, without warm-up, is the usual cause (Adam's first steps, made on poor estimates of the "
                "gradient's scale, throw the model into a region it does not leave). Warm the rate up over the first "
                "steps, lower its peak, or both.")
    return (f" The loss fell ({first:.3f} -> {last:.3f}) but not far enough: train on the whole budget, and check the "
            "learning-rate schedule (warm-up, then decay) and that padding is left out of the loss.")


def _judge_learning(calls, records, function="learning_run"):
    call = calls[0]
    try:
        out = outcome(records[0], "train", call.label, {}, FORBIDDEN)
    except AssertionError as failure:
        missing = [name for _, names in ref.PARTS for name in names if f"{name} is not defined" in str(failure)]
        if missing and type(failure) is AssertionError:
            raise AssertionError(
                f"the learning check cannot run: {missing[0]} is not defined. Your parts cell is not implemented yet or "
                "stopped with an error: paste your parts from chapters 2 to 8 into it (see its heading), run it, then "
                "the cells below it.") from None
        raise
    if len(out) != 5:
        raise AssertionError("learning_run returned something else than (leak, losses, first, second, drawn): "
                             "its read-only cell was changed; run the notebook as handed out.")
    leak, losses, first, second, drawn = (_values(o, what) for o, what in zip(
        out, ("the leakage probe", "the losses", "the decoding", "the second decoding", "the sequences drawn")))
    leak = float(leak.double().reshape(-1)[0]) if leak.numel() else float("nan")
    if not leak <= LEAK_TOL:
        raise AssertionError(
            f"{NO_CAUSAL_MASK}: changing decoder input {ref.LEAK_POSITION} changed the outputs at the positions before "
            f"it by up to {leak:.2g}. In training each position can then read the very token it must predict (the "
            "loss falls fast), and greedy decoding, which has no future tokens, fails. Pass causal_mask(Tt) to the "
            "decoder's self-attention. (Found on the untrained model: it was not trained.)")
    drawn, budget = int(drawn.reshape(-1)[0]) if drawn.numel() else 0, int(call.args[4])
    if drawn > budget:
        raise AssertionError(f"over the budget: train drew {drawn:,} training sequences from make_batch, and the budget is "
                             f"{budget:,} (budget // BATCH_SIZE batches of BATCH_SIZE). Train on the budget you are given: "
                             "what is graded is what the model learns within it.")
    losses = losses.double().reshape(-1)
    if losses.numel() == 0:
        raise AssertionError("train returned no losses: return the list of the training steps' losses.")
    if not torch.isfinite(losses).all():
        step = int((~torch.isfinite(losses)).nonzero()[0]) + 1
        raise AssertionError(f"{DIVERGED}: the loss is not finite from step {step} on. A learning rate too large "
                             "without warm-up is the usual cause; clipping the gradient norm helps too.")
    n = max(1, min(50, losses.numel() // 4))
    if losses[-n:].mean() > losses[:n].mean() + RISE:  # a flat loss (no learning at all) is judged below, not here
        raise AssertionError(f"{DIVERGED}: the loss rose from {losses[:n].mean():.3f} (first {n} steps) to "
                             f"{losses[-n:].mean():.3f} (last {n}). A learning rate too large without warm-up is the "
                             "usual cause.")
    if first.shape != second.shape or not torch.equal(first, second):
        raise AssertionError(f"{TRAIN_MODE}: two greedy decodings of the same sources differ, so dropout is still "
                             "on. Call model.eval() before decoding (greedy_decode can do it, and restore the mode).")
    _, (src, tgt, lengths) = _inputs(int(call.args[3]))
    if first.dim() != 2 or first.size(0) != src.size(0):
        raise AssertionError(f"greedy_decode returned shape {tuple(first.shape)} for {src.size(0)} sources: expected "
                             "(batch, 1 + generated tokens), column 0 being <s>.")
    accuracy = ref.exact_match(None, src, tgt, lengths, decode=lambda *_: first.long()).float().mean().item()
    if accuracy < PASS_MARK:
        message = (f"{BELOW_PASS_MARK}: {accuracy:.1%} of {src.size(0)} held-out sequences reversed exactly (every digit "
                   f"and </s>) after training on the budget; the pass mark is {PASS_MARK:.0%}." + _likely_cause(losses, accuracy))
        fraction = credit(accuracy)
        if fraction:
            raise PartialCredit(fraction, message + f" Partial credit: {fraction:.0%} of the points ({credit_scale()}).")
        raise AssertionError(message + f" ({credit_scale()}.)")


def credit(accuracy: float) -> float:
    """The fraction of the learning check's points for an exact-match accuracy: 1 at or above PASS_MARK, then the
    steps of CREDIT_SCALE, 0 below the last."""
    if accuracy >= PASS_MARK:
        return 1.0
    return next((fraction for floor, fraction in CREDIT_SCALE if accuracy >= floor), 0.0)


def credit_scale() -> str:
    steps = ", ".join(f"{fraction:.0%} from {floor:.0%}" for floor, fraction in CREDIT_SCALE)
    return f"the scale: all the points from {PASS_MARK:.0%}, {steps}, none below"


LEARNING = Check("learning_run", _learning_plan, _judge_learning, FORBIDDEN, categories=("learning",),
                 given={"learning_run": ref.learning_run}, costly=True)


# --- One training step, by value -----------------------------------------------------------------------------------

# The step is graded on the course's StepModel (no attention: a mistake in the learner's parts costs nothing here).
STEP_INIT = {"vocab": ref.VOCAB, "d_model": 16}
STEP_PARAMETERS = tuple(name for name, _ in ref.StepModel(**STEP_INIT).named_parameters())


def _step_with(labels_of, ignore_index=ref.PAD, clip=True):
    """The reference's train_step with one mistake: labels_of(tgt) as the labels, another ignore_index, no clipping."""
    def train_step(model, optimizer, src, tgt, lengths, lr):
        model.train()
        logits = model(src, tgt[:, :-1], padding_mask(lengths, src.size(1)))
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels_of(tgt).reshape(-1), ignore_index=ignore_index,
                               label_smoothing=ref.LABEL_SMOOTHING)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad()
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), ref.CLIP_NORM)
        optimizer.step()
        return loss.detach()
    return train_step


STEP_MISTAKES = {
    "targets not shifted: the labels must be tgt[:, 1:] for the decoder input tgt[:, :-1]": _step_with(lambda t: t[:, :-1]),
    "padding counted in the loss: leave the PAD labels out (ignore_index=PAD)": _step_with(lambda t: t[:, 1:], ignore_index=-100),
    "no gradient clipping: clip the gradient norm to CLIP_NORM before optimizer.step()": _step_with(lambda t: t[:, 1:], clip=False),
}


def _step_cases(seed):
    g = generator(seed, "train_step#cases")
    cases = []
    # Adam, as in training; and SGD, whose step is proportional to the gradient: Adam's first step is not (it divides
    # by the gradient's own size), so only the SGD case shows whether the gradient was clipped.
    for n, lr, optimizer in ((6, 1e-3, "Adam"), (4, 0.5, "SGD")):
        state = grader_weights(ref.StepModel(**STEP_INIT), g)
        if optimizer == "SGD":  # larger weights: larger logits, a gradient norm well above CLIP_NORM
            state = {name: value * 8 for name, value in state.items()}
        src, tgt, lengths = ref.make_batch(n, g)
        cases.append(Case(f"StepModel(d_model=16) with the grader's weights, {n} sequences of "
                          f"{lengths.min().item()}-{lengths.max().item()} digits padded to {src.size(1)}, {optimizer}, lr {lr}",
                          (Model("StepModel", STEP_INIT, state, train=True, state_after=True),
                           Optim(optimizer, {"lr": 1.0}), src, tgt, lengths, lr), {}))
    return cases


STEP = function_check(ref.train_step, _step_cases, ("loss",) + STEP_PARAMETERS, STEP_MISTAKES, {}, FORBIDDEN, meta=False,
                      categories=("values", "shape", "dtype"))


# --- The assembled model, by value --------------------------------------------------------------------------------
# CapstoneTransformer with the grader's weights (loaded by name: embed, encoder_layers.i.*, encoder_norm,
# decoder_layers.i.*, decoder_norm; out_proj tied to embed) on padded batches, in eval() mode, compared with the
# reference's logits. In one case the padded source positions hold digits, not PAD: a model that does not mask them
# reads them, and its logits differ.


class _Assembled(ref.CapstoneTransformer):
    """The reference with one assembly mistake (a catalogue entry)."""

    causal, cross_mask, encoder_mask, scale, final_norms = True, True, True, True, True

    def _embed(self, ids):
        x = self.embed(ids)
        return self.pos(x * math.sqrt(self.d_model) if self.scale else x)

    def encode(self, src, src_mask=None):
        x = self._embed(src)
        for layer in self.encoder_layers:
            x = layer(x, src_mask if self.encoder_mask else None)
        return self.encoder_norm(x) if self.final_norms else x

    def decode(self, tgt, memory, src_mask=None):
        tgt_mask = ref.causal_mask(tgt.size(1), device=tgt.device) if self.causal else None
        y = self._embed(tgt)
        for layer in self.decoder_layers:
            y = layer(y, memory, tgt_mask, src_mask if self.cross_mask else None)
        return self.out_proj(self.decoder_norm(y) if self.final_norms else y)


def _assembled(**mistake):
    return type("CapstoneTransformer", (_Assembled,), mistake)


MODEL_MISTAKES = {
    "the decoder's self-attention has no causal mask: pass causal_mask(Tt) to every decoder layer":
        _assembled(causal=False),
    "the source padding mask is not passed to the cross-attention: each decoder layer needs src_mask as its memory_mask":
        _assembled(cross_mask=False),
    "the source padding mask is not passed to the encoder's self-attention": _assembled(encoder_mask=False),
    "the embeddings are not multiplied by sqrt(d_model) before the positional encoding is added": _assembled(scale=False),
    "the final LayerNorms of the Pre-LN stacks are missing (encoder_norm after the encoder, decoder_norm before "
    "out_proj)": _assembled(final_norms=False),
}


def _model_cases(seed):
    g = generator(seed, "CapstoneTransformer#inputs")

    def batch(n, digits_in_padding=False):
        src, tgt, lengths = ref.make_batch(n, g)
        if digits_in_padding:  # the padded positions hold digits: only the mask tells them from real ones
            pad = src == ref.PAD
            src = torch.where(pad, torch.randint(3, ref.VOCAB, src.shape, generator=g), src)
        return src, tgt[:, :-1], padding_mask(lengths, src.size(1)), lengths

    cases = []
    for init, n, in_padding in (({"d_model": 16, "n_heads": 4, "d_ff": 32, "n_layers": 1}, 4, False),
                                ({"d_model": 8, "n_heads": 2, "d_ff": 24, "n_layers": 2}, 5, True)):
        src, dec_in, mask, lengths = batch(n, in_padding)
        while lengths.min() == lengths.max():  # a batch whose sources all have one length has no padding to mask
            src, dec_in, mask, lengths = batch(n, in_padding)
        what = "digits (not PAD) in the padded positions" if in_padding else "PAD in the padded positions"
        cases.append(ModuleCase(
            f"CapstoneTransformer({', '.join(f'{k}={v}' for k, v in init.items())}) in eval(), {n} sources of "
            f"{lengths.min().item()}-{lengths.max().item()} digits padded to {src.size(1)} ({what}), decoder input "
            f"{tuple(dec_in.shape)}, src_mask {tuple(mask.shape)}", init, (src, dec_in, mask)))
    return cases


MODEL = module_check(ref.CapstoneTransformer, _model_cases, ("logits",), MODEL_MISTAKES, {}, FORBIDDEN, meta=False,
                     categories=("values", "shape"))


# --- Build-time helpers of the visible checks (autograder/source/10-capstone/exercises.md) -------------------------


def model_run(demo_module, init):
    """A function running CapstoneTransformer(**init) with demo weights (float64, eval()) on (src, dec_in, mask)."""
    def run(src, dec_in, mask):
        with torch.no_grad():
            return demo_module(ref.CapstoneTransformer, init)(src, dec_in, mask).reshape(-1)
    return run


def model_variants(demo_module, init):
    """{mistake: model_run of the wrong class} for the visible check's mistakes()."""
    def variant(cls):
        def run(src, dec_in, mask):
            with torch.no_grad():
                return demo_module(cls, init)(src, dec_in, mask).reshape(-1)
        return run
    return {description: variant(cls) for description, cls in MODEL_MISTAKES.items()}


def step_run(demo_module, init, step=ref.train_step, optimizer="SGD", scale=1.0):
    """A function running one train_step (the reference's, or `step`) on StepModel(**init) with demo weights
    (float64), every weight times `scale`, and torch.optim.<optimizer>(params, lr=1.0) (the step sets the rate):
    the loss, then the embedding's first 32 entries after the step."""
    def run(src, tgt, lengths, lr):
        model = demo_module(ref.StepModel, init)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(scale)
        opt = getattr(torch.optim, optimizer)(model.parameters(), lr=1.0)
        loss = step(model, opt, src, tgt, lengths, lr)
        return torch.cat([loss.detach().reshape(1), model.embed.weight.detach().flatten()[:32]])
    return run


def step_variants(demo_module, init, optimizer="SGD", scale=1.0):
    return {description: step_run(demo_module, init, wrong, optimizer, scale) for description, wrong in STEP_MISTAKES.items()}


CHECKS = {
    "CapstoneTransformer_hidden": MODEL,
    "train_step_hidden": STEP,
    "train_hidden": LEARNING,
}

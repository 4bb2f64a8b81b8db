"""Chapter 10's learning check (autograder/checks/ch10_capstone.py, work in progress): the reference passes it on a
grading seed after its full budget (the one real training run here, ~30 s on one core), and each training bug of
the issue fails it with its named diagnosis. The bug runs use a small budget (the grader's budget patched down):
each diagnosis is made before or instead of the learning itself, so it does not need the full run."""

import math

import pytest
import torch
import torch.nn.functional as F

from autograder.checks import ch10_capstone as checks
from autograder.checks import run_local
from solutions import ch10_capstone as ref
from solutions.ch05_masks import padding_mask
from solutions.ch08_encoder_decoder import greedy_decode

SEED = 3


def _failure(seed=SEED, **notebook):
    """The learning check's message for a notebook that is the reference with `notebook`'s names replaced, or None."""
    namespace = {**vars(ref), **notebook}
    try:
        run_local(checks.LEARNING, namespace["learning_run"], seed=seed, device="cpu", namespace=namespace)
    except AssertionError as failure:
        return str(failure)
    return None


@pytest.fixture
def small_budget(monkeypatch):
    monkeypatch.setattr(ref, "BUDGET", 40 * ref.BATCH_SIZE)


def test_the_reference_learns_the_task_on_the_budget():
    torch.set_num_threads(1)  # as a grading worker
    assert _failure() is None


def test_the_held_out_sources_change_with_the_seed_and_are_never_training_sources():
    (_, (a, _, _)), (_, (b, _, _)) = checks._inputs(3), checks._inputs(21)
    assert not torch.equal(a, b)
    assert ref.is_held_out(a).all() and ref.is_held_out(b).all()


# --- Each bug, its diagnosis ------------------------------------------------------------------------------------


class NoCausal(ref.CapstoneTransformer):
    def decode(self, tgt, memory, src_mask=None):  # the decoder's self-attention without the causal mask
        y = self.pos(self.embed(tgt) * math.sqrt(self.d_model))
        for layer in self.decoder_layers:
            y = layer(y, memory, None, src_mask)
        return self.out_proj(self.decoder_norm(y))


def test_a_decoder_without_causal_mask_is_named_without_training():
    def train_never(model, budget, generator):
        raise AssertionError("the leakage probe should have stopped the run before training")

    message = _failure(CapstoneTransformer=NoCausal, train=train_never)
    assert message is not None and checks.NO_CAUSAL_MASK in message, message


def _train_with(step):
    """A learner's train whose step is `step(model, optimizer, src, tgt, lengths) -> loss` (Adam, no schedule)."""
    def train(model, budget, generator, lr=3e-3):
        optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)
        losses = []
        for _ in range(budget // ref.BATCH_SIZE):
            model.train()
            losses.append(step(model, optimizer, *ref.make_batch(ref.BATCH_SIZE, generator)))
        model.eval()
        return losses
    return train


def _step(labels_of, ignore_pad=True):
    def step(model, optimizer, src, tgt, lengths):
        logits = model(src, tgt[:, :-1], padding_mask(lengths, src.size(1)))
        loss = F.cross_entropy(logits.reshape(-1, ref.VOCAB), labels_of(tgt).reshape(-1),
                               ignore_index=ref.PAD if ignore_pad else -100, label_smoothing=ref.LABEL_SMOOTHING)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()
    return step


def test_targets_not_shifted_fall_below_the_pass_mark_with_a_falling_loss(small_budget):
    message = _failure(train=_train_with(_step(lambda tgt: tgt[:, :-1])))  # labels = the decoder input itself
    assert message is not None and checks.BELOW_PASS_MARK in message and "shifted" in message, message
    assert "0.0%" in message, message  # it never writes a single sequence right


def test_a_large_learning_rate_without_warm_up_diverges(small_budget):
    train = _train_with(_step(lambda tgt: tgt[:, 1:]))
    message = _failure(train=lambda model, budget, generator: train(model, budget, generator, lr=1.0))
    assert message is not None and checks.DIVERGED in message and "warm-up" in message, message


def test_a_model_left_in_train_mode_at_evaluation_is_named(small_budget):
    def dropout_model():
        return ref.CapstoneTransformer(dropout=0.1)

    def greedy_without_eval(model, src, max_len, bos_id, eos_id, src_mask=None, pad_id=None):
        with torch.no_grad():  # the mistake: no model.eval(), dropout stays on
            memory = model.encode(src, src_mask)
            ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
            for _ in range(max_len):
                ys = torch.cat([ys, model.decode(ys, memory, src_mask)[:, -1].argmax(-1, keepdim=True)], dim=1)
        return ys

    def train_left_in_train_mode(model, budget, generator):
        losses = ref.train(model, budget, generator)
        model.train()
        return losses

    message = _failure(CapstoneTransformer=dropout_model, train=train_left_in_train_mode, greedy_decode=greedy_without_eval)
    assert message is not None and checks.TRAIN_MODE in message, message
    # The same model and decoding, evaluated in eval() mode, is not told that.
    message = _failure(CapstoneTransformer=dropout_model, greedy_decode=greedy_decode)
    assert message is None or checks.TRAIN_MODE not in message, message


# --- One training step, by value ----------------------------------------------------------------------------------


def _step_failure(fn, seed=SEED):
    try:
        run_local(checks.STEP, fn, seed=seed, device="cpu", namespace={**vars(ref)})
    except AssertionError as failure:
        return str(failure)
    return None


def test_the_reference_step_passes_and_each_step_mistake_is_named():
    assert _step_failure(ref.train_step) is None
    for name, wrong in checks.STEP_MISTAKES.items():
        message = _step_failure(wrong)
        assert message is not None and name.split(":")[0] in message, (name, message)


def test_the_sgd_case_needs_clipping():
    """The SGD case's gradient is larger than CLIP_NORM, so clipping changes its step (what the mistake shows)."""
    for case in checks._step_cases(SEED):
        model_arg, optim, src, tgt, lengths, lr = case.args
        if optim.name != "SGD":
            continue
        model = ref.CapstoneTransformer(**model_arg.init).double()
        model.load_state_dict(model_arg.state, strict=False)
        mask = padding_mask(lengths, src.size(1))
        ref.sequence_loss(model(src, tgt[:, :-1], mask), tgt[:, 1:]).backward()
        norm = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters()))
        assert norm > 1.5 * ref.CLIP_NORM, norm
        return
    raise AssertionError("no SGD case")

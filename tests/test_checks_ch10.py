"""Chapter 10's learning check (autograder/checks/ch10_capstone.py, work in progress): the reference passes it on a
grading seed after its full budget (the one real training run here, ~30 s on one core), and each training bug of
the issue fails it with its named diagnosis. The bug runs use a small budget (the grader's budget patched down):
each diagnosis is made before or instead of the learning itself, so it does not need the full run."""


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


NoCausal = checks._assembled(causal=False)  # the decoder's self-attention without the causal mask


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


# --- Partial credit ---------------------------------------------------------------------------------------------


def test_partial_credit_follows_the_stated_scale():
    assert [checks.credit(a) for a in (1.0, 0.97, 0.969, 0.90, 0.899, 0.70, 0.699, 0.0)] == \
        [1.0, 1.0, 2 / 3, 2 / 3, 1 / 3, 1 / 3, 0.0, 0.0]


def _accuracy_run(right: int, n: int = checks.EVAL_N):
    """A learning run that returns the reference's decodings of the held-out sources with all but `right` rows
    spoiled (their first digit changed): an accuracy of exactly right / n, judged as the grader judges it."""
    def learning_run(model_class, train_fn, decode_fn, seed, budget, probe_src, probe_tgt, probe_lengths, src, lengths):
        _, (_, tgt, _) = checks._inputs(seed)
        first = tgt[:, : src.size(1) + 2].clone()
        first[right:, 1] = 3 + (first[right:, 1] - 3 + 1) % ref.N_DIGITS
        losses = torch.linspace(2.0, 0.5, 50, dtype=torch.float64)
        return torch.zeros((), dtype=torch.float64), losses, first, first.clone(), torch.tensor(budget)
    return learning_run


@pytest.mark.parametrize("right, fraction", [(checks.EVAL_N, None), (int(0.95 * checks.EVAL_N), 2 / 3),
                                             (int(0.80 * checks.EVAL_N), 1 / 3), (int(0.5 * checks.EVAL_N), 0.0)])
def test_the_learning_check_gives_the_partial_credit_of_the_accuracy(right, fraction):
    """The judge gives all the points at the pass mark, a PartialCredit (an AssertionError: whatever knows nothing
    of partial credit sees a failure) with the scale's fraction below it, and a plain failure below the scale."""
    from autograder.checks import PartialCredit

    run = _accuracy_run(right)
    try:
        run_local(checks.LEARNING, run, seed=SEED, device="cpu", namespace={**vars(ref), "learning_run": run})
    except PartialCredit as part:
        assert fraction and part.fraction == pytest.approx(fraction), (right, part.fraction)
        assert checks.BELOW_PASS_MARK in str(part) and "Partial credit" in str(part)
    except AssertionError as failure:
        assert fraction == 0.0 and "Partial credit" not in str(failure) and "none below" in str(failure), str(failure)
    else:
        assert fraction is None, f"{right} right of {checks.EVAL_N} earned all the points"


# --- The assembled model, by value ------------------------------------------------------------------------------


def test_the_assembled_model_check_passes_the_reference_and_names_each_assembly_mistake():
    run_local(checks.MODEL, ref.CapstoneTransformer, seed=SEED, device="cpu")
    for description, wrong in checks.MODEL_MISTAKES.items():
        with pytest.raises(AssertionError) as failure:
            run_local(checks.MODEL, wrong, seed=SEED, device="cpu")
        assert description in str(failure.value), (description, str(failure.value)[:500])


def test_a_model_that_reads_padded_source_positions_fails_even_where_they_hold_pad():
    """The second case puts digits in the padded positions; without the encoder's mask the first case alone (PAD
    there) may not show it, the second does."""
    cases = checks._model_cases(SEED)
    src = cases[1].inputs[0]
    assert (src != ref.PAD).all(), "the second case must have digits in its padded positions"
    assert not cases[1].inputs[2].all(), "the second case must have padding to mask"


def test_a_train_that_draws_more_than_its_budget_fails_before_it_is_judged_by_accuracy(small_budget):
    """The course's make_batch counts what train draws while the learning check runs: the budget is the budget, and
    the reference (which draws exactly the budget) is not told so."""
    def greedy_train(model, budget, generator):
        ref.make_batch(budget + 1, generator)  # one sequence too many (looked up as the notebook's global make_batch)
        return [1.0]

    message = _failure(train=greedy_train)
    assert message is not None and "over the budget" in message and f"{ref.BUDGET + 1:,}" in message, message
    assert "over the budget" not in (_failure() or "")

"""The chapter 10 reference (the capstone): the task's data, the assembled model, one training step, evaluation.

Small and fast: no test here trains beyond two steps (the learning itself is the evidence of
scripts/capstone_seeds.py and of the learning check's test). Model comparisons run in float64 with atol=1e-10:
the model is a few attention/FFN blocks on O(1) values, so float64 rounding stays near 1e-14, while a wrong
mask, norm or tie changes outputs at the 1e-2 level.
"""

import pytest
import torch
import torch.nn.functional as F

from solutions import ch10_capstone as ref
from solutions.ch05_masks import padding_mask
from solutions.ch08_encoder_decoder import Transformer, count_parameters

ATOL64 = 1e-10


def small_model(seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    return ref.CapstoneTransformer(d_model=16, n_heads=4, d_ff=32, n_layers=2).to(dtype).eval()


# --- The task ---------------------------------------------------------------------------------------------------


def test_make_batch_pairs_each_source_with_its_reversal():
    src, tgt, lengths = ref.make_batch(200, torch.Generator().manual_seed(0))
    assert src.shape == (200, ref.MAX_LEN) and tgt.shape == (200, ref.MAX_LEN + 2) and lengths.shape == (200,)
    assert lengths.min() >= ref.MIN_LEN and lengths.max() <= ref.MAX_LEN
    assert set(lengths.tolist()) == set(range(ref.MIN_LEN, ref.MAX_LEN + 1))  # every length occurs in 200 draws
    for s, t, n in zip(src, tgt, lengths.tolist()):
        digits = s[:n].tolist()
        assert all(3 <= d < ref.VOCAB for d in digits) and (s[n:] == ref.PAD).all()
        assert t.tolist() == [ref.BOS] + digits[::-1] + [ref.EOS] + [ref.PAD] * (ref.MAX_LEN - n)


def test_make_batch_is_a_function_of_the_generator():
    a = ref.make_batch(50, torch.Generator().manual_seed(7))
    b = ref.make_batch(50, torch.Generator().manual_seed(7))
    c = ref.make_batch(50, torch.Generator().manual_seed(8))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], c[0])


def test_the_splits_are_disjoint_and_the_held_out_part_is_about_one_in_eight():
    gen = torch.Generator().manual_seed(1)
    train_src, _, _ = ref.make_batch(2000, gen, split="train")
    held_src, _, _ = ref.make_batch(2000, gen, split="held_out")
    assert not ref.is_held_out(train_src).any()
    assert ref.is_held_out(held_src).all()
    # Of uniformly drawn sources (both parts), the held-out share is close to 1 / HELD_OUT.
    lengths = torch.randint(ref.MIN_LEN, ref.MAX_LEN + 1, (20000,), generator=gen)
    digits = torch.randint(3, ref.VOCAB, (20000, ref.MAX_LEN), generator=gen)
    raw = torch.where(torch.arange(ref.MAX_LEN) < lengths[:, None], digits, ref.PAD)
    share = ref.is_held_out(raw).float().mean().item()
    assert abs(share - 1 / ref.HELD_OUT) < 0.01, share
    with pytest.raises(ValueError, match="split"):
        ref.make_batch(2, gen, split="test")


def test_the_hash_ignores_how_wide_a_source_is_padded():
    src, _, _ = ref.make_batch(100, torch.Generator().manual_seed(2))
    wider = torch.cat([src, torch.full((100, 5), ref.PAD)], dim=1)  # (100, MAX_LEN + 5)
    assert torch.equal(ref.source_hash(src), ref.source_hash(wider))
    # ... and a longer source of the longer test lengths is still split by the same rule.
    long_src, _, _ = ref.make_batch(100, torch.Generator().manual_seed(3), 10, 12, split="held_out")
    assert long_src.shape == (100, 12) and ref.is_held_out(long_src).all()


# --- The model --------------------------------------------------------------------------------------------------


def test_the_model_equals_chapter_08s_transformer_with_shared_tied_embeddings_and_pre_ln():
    """The capstone's assembly is chapter 08's Transformer(share_embeddings, tie_output, norm_first=True) with the
    same weights: the same output on a padded batch, in float64."""
    ours = small_model()
    torch.manual_seed(1)
    theirs = Transformer(ref.VOCAB, ref.VOCAB, d_model=16, n_heads=4, d_ff=32, n_layers=2, max_len=ref.PE_LEN,
                         norm_first=True, share_embeddings=True, tie_output=True).double().eval()
    renamed = {}
    for name, value in ours.state_dict().items():
        name = (name.replace("embed.", "src_embed.").replace("encoder_layers.", "encoder.layers.")
                .replace("decoder_layers.", "decoder.layers.").replace("encoder_norm.", "encoder.norm.")
                .replace("decoder_norm.", "decoder.norm."))
        renamed[name] = value
    renamed["tgt_embed.weight"] = renamed["out_proj.weight"] = renamed["src_embed.weight"]
    theirs.load_state_dict(renamed)
    src, tgt, lengths = ref.make_batch(6, torch.Generator().manual_seed(4))
    mask = padding_mask(lengths, src.size(1))
    torch.testing.assert_close(ours(src, tgt[:, :-1], mask), theirs(src, tgt[:, :-1], mask), atol=ATOL64, rtol=0)
    assert count_parameters(ours) == count_parameters(theirs)


def test_the_output_projection_is_tied_to_the_embedding():
    model = ref.CapstoneTransformer()
    assert model.out_proj.weight is model.embed.weight
    n = count_parameters(model)
    assert n == sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    assert 100_000 < n < 300_000, n  # the course outline's 0.1-0.3M parameters


def test_the_decoder_is_causal_and_the_source_padding_is_invisible():
    model = small_model()
    src, tgt, lengths = ref.make_batch(4, torch.Generator().manual_seed(5))
    mask = padding_mask(lengths, src.size(1))
    dec_in = tgt[:, :-1]  # (4, MAX_LEN + 1)
    logits = model(src, dec_in, mask)  # (4, T, VOCAB)
    assert logits.shape == (4, ref.MAX_LEN + 1, ref.VOCAB)
    changed = dec_in.clone()
    changed[:, 3] = 3 + (changed[:, 3] + 1) % ref.N_DIGITS  # another digit at position 3
    after = model(src, changed, mask)
    torch.testing.assert_close(after[:, :3], logits[:, :3], atol=ATOL64, rtol=0)  # earlier positions: unchanged
    assert (after[:, 3] - logits[:, 3]).abs().max() > 1e-3  # position 3 itself reads its input
    noisy = torch.where(mask[:, 0, 0], src, torch.randint(3, ref.VOCAB, src.shape))  # digits in the padding
    torch.testing.assert_close(model(noisy, dec_in, mask), logits, atol=ATOL64, rtol=0)
    assert (model(noisy, dec_in, None) - logits).abs().max() > 1e-3  # without the mask the padding is read


# --- Training -------------------------------------------------------------------------------------------------


def test_the_warm_up_schedule_rises_to_its_peak_then_falls_linearly():
    total = 3 * ref.WARMUP
    lrs = [ref.warmup_lr(s, total) for s in range(1, total + 1)]
    assert lrs[0] == pytest.approx(ref.PEAK_LR / ref.WARMUP)
    assert max(lrs) == pytest.approx(ref.PEAK_LR) and lrs.index(max(lrs)) == ref.WARMUP - 1
    assert lrs[-1] == pytest.approx(ref.PEAK_LR / (total - ref.WARMUP + 1))  # the last step still moves
    steps_down = [a - b for a, b in zip(lrs[ref.WARMUP - 1:-1], lrs[ref.WARMUP:])]
    assert steps_down == pytest.approx([steps_down[0]] * len(steps_down)) and steps_down[0] > 0  # linear decay
    with pytest.raises(ValueError):
        ref.warmup_lr(0, total)


def test_one_training_step_uses_shifted_targets_smoothing_no_padding_and_clipping():
    model = small_model()
    src, tgt, lengths = ref.make_batch(8, torch.Generator().manual_seed(6))
    mask = padding_mask(lengths, src.size(1))
    logits = model(src, tgt[:, :-1], mask)  # (8, T - 1, V)
    labels = tgt[:, 1:]
    keep = labels != ref.PAD
    expected = F.cross_entropy(logits[keep], labels[keep], label_smoothing=ref.LABEL_SMOOTHING)  # real labels only
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = ref.make_optimizer(model)
    loss = ref.train_step(model, optimizer, src, tgt, lengths, lr=1e-3)
    assert loss.shape == () and not loss.requires_grad
    assert loss.item() == pytest.approx(expected.item(), abs=1e-12)
    assert model.training  # train_step trains
    # The clipped gradient is what Adam saw: its first step moves every weight by about lr (Adam's step is
    # lr * m / sqrt(v) = lr * sign(g) at step 1), whatever the gradient's size; the rate is the one given.
    moved = {n: (p.detach() - before[n]).abs().max().item() for n, p in model.named_parameters()}
    assert max(moved.values()) == pytest.approx(1e-3, rel=1e-6)
    assert optimizer.param_groups[0]["lr"] == 1e-3
    grad_norm = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters())).item()
    assert grad_norm == pytest.approx(ref.CLIP_NORM, rel=1e-6)  # clipped: ...
    model.zero_grad()
    ref.sequence_loss(model(src, tgt[:, :-1], mask), labels).backward()
    unclipped = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters())).item()
    assert unclipped > 2 * ref.CLIP_NORM  # ... from a larger gradient, so the clipping was needed


def test_train_runs_budget_over_batch_size_steps_and_leaves_eval_mode():
    model = small_model(dtype=torch.float32)
    losses = ref.train(model, 2 * ref.BATCH_SIZE + 5, torch.Generator().manual_seed(0))
    assert len(losses) == 2 and all(l == l for l in losses)  # two steps, no NaN
    assert not model.training


# --- Evaluation -------------------------------------------------------------------------------------------------


def test_exact_match_needs_every_digit_and_the_end_token_and_ignores_what_follows():
    src, tgt, lengths = ref.make_batch(3, torch.Generator().manual_seed(9), 3, 3)  # three sources of 3 digits

    def decoder_returning(rows):
        return lambda model, src, max_len, bos, eos, mask, pad: torch.tensor(rows)

    right = tgt[:, :5].tolist()  # <s> d d d </s>
    assert ref.exact_match(None, src, tgt, lengths, decoder_returning(right)).all()
    wrong_digit = [r[:] for r in right]
    wrong_digit[0][2] = 3 + (wrong_digit[0][2] - 3 + 1) % 10
    assert ref.exact_match(None, src, tgt, lengths, decoder_returning(wrong_digit)).tolist() == [False, True, True]
    no_end = [r[:4] + [r[1]] for r in right]  # a digit where </s> belongs
    assert not ref.exact_match(None, src, tgt, lengths, decoder_returning(no_end)).any()
    stopped_early = [r[:4] for r in right]  # decoding stopped before </s>
    assert not ref.exact_match(None, src, tgt, lengths, decoder_returning(stopped_early)).any()
    trailing = [r + [7, 8] for r in right]  # anything after </s> is never read
    assert ref.exact_match(None, src, tgt, lengths, decoder_returning(trailing)).all()

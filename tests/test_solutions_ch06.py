"""The chapter 06 reference: sinusoidal encoding, the batch-first module, the rotation property, RoPE, ALiBi.

PyTorch has no positional encoding of its own, so the formula is checked against an independent
elementwise computation with Python's math module in float64.

Tolerances, per operation:
- float64 formula vs math.sin/math.cos: 1e-12 (one power, one product, one sin/cos; pos * omega < 2e3
  here, so the argument carries ~1e-13 absolute rounding);
- float32 table vs the float64 truth: 1e-6 (values in [-1, 1] are rounded once to float32, ulp/2 <= 6e-8;
  the usual float32 recipe (exp/log frequencies, float32 angles) is off by ~4e-5 at pos ~ 5000, which
  the far-positions test catches);
- rotation property and RoPE in float64: 1e-12 (a d x d matvec / one rotation of O(1) numbers).
"""

import math

import pytest
import torch
from torch import nn

from solutions import ch06_positional_encoding as ref

ATOL64 = 1e-12
ATOL32 = 1e-6


def pe_elementwise(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The paper's formula, one entry at a time, in float64 (the independent truth)."""
    pe = torch.empty(max_len, d_model, dtype=torch.float64)
    for pos in range(max_len):
        for j in range(d_model):
            two_i = j - (j % 2)  # dims 2i and 2i+1 share the frequency of 2i
            angle = pos / base ** (two_i / d_model)
            pe[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return pe


def pe_rows_elementwise(positions: list[float], d_model: int, base: float = 10000.0) -> torch.Tensor:
    """PE rows at arbitrary (possibly negative or fractional) positions, via math.sin/cos, float64."""
    rows = [
        [(math.sin if j % 2 == 0 else math.cos)(p / base ** ((j - j % 2) / d_model)) for j in range(d_model)]
        for p in positions
    ]
    return torch.tensor(rows, dtype=torch.float64)


# --- sinusoidal_pe ---------------------------------------------------------------------------------


@pytest.mark.parametrize("max_len,d_model,base", [(1, 2, 10000.0), (50, 128, 10000.0), (17, 6, 100.0)])
def test_sinusoidal_pe_matches_the_formula_in_float64(max_len, d_model, base):
    got = ref.sinusoidal_pe(max_len, d_model, base, dtype=torch.float64)
    assert got.shape == (max_len, d_model) and got.dtype == torch.float64
    torch.testing.assert_close(got, pe_elementwise(max_len, d_model, base), atol=ATOL64, rtol=0)


def test_sinusoidal_pe_default_is_float32_and_accurate():
    got = ref.sinusoidal_pe(64, 16)
    assert got.dtype == torch.float32, f"the agreed API returns float32, got {got.dtype}"
    torch.testing.assert_close(got.double(), pe_elementwise(64, 16), atol=ATOL32, rtol=0)


def test_sinusoidal_pe_far_positions_are_accurate_in_float32():
    # The float32 recipe of 000 §6 / 002 §2.6.4 (frequencies via exp/log, angles in float32) is off by
    # ~4e-5 here: its rounded frequencies times pos ~ 5000 give visibly wrong angles.
    got = ref.sinusoidal_pe(5000, 8)[4990:].double()
    truth = pe_elementwise(5000, 8)[4990:]
    torch.testing.assert_close(got, truth, atol=ATOL32, rtol=0)


def test_sinusoidal_pe_known_entries():
    pe = ref.sinusoidal_pe(50, 128, dtype=torch.float64)
    assert pe[0, 0::2].abs().max() == 0 and (pe[0, 1::2] == 1).all(), "position 0 is [0, 1, 0, 1, ...]"
    assert math.isclose(pe[1, 0].item(), math.sin(1.0), abs_tol=ATOL64)
    # The entry 002 §2.6.5 gets wrong: pos 1, dim 2 = sin(1 / 10000^(2/128)) ≈ 0.762, not 0.010.
    assert math.isclose(pe[1, 2].item(), math.sin(10000 ** (-2 / 128)), abs_tol=ATOL64)
    assert abs(pe[1, 2].item() - 0.762) < 5e-4


def test_sinusoidal_pe_rejects_odd_d_model():
    with pytest.raises(ValueError, match="even"):
        ref.sinusoidal_pe(10, 7)


def test_wavelengths_span_2pi_to_nearly_2pi_base():
    lam = ref.wavelengths(512)
    assert lam.shape == (256,)
    assert math.isclose(lam[0].item(), 2 * math.pi)
    assert math.isclose(lam[-1].item(), 2 * math.pi * 10000 ** (510 / 512))
    assert (lam[1:] > lam[:-1]).all(), "wavelengths must grow with the dimension index"


# --- PositionalEncoding ----------------------------------------------------------------------------


@pytest.mark.parametrize("batch,seq", [(1, 1), (3, 7), (5, 2)])
def test_module_adds_pe_batch_first(gen, batch, seq):
    d = 16
    layer = ref.PositionalEncoding(d, max_len=32)
    x = torch.randn(batch, seq, d, generator=gen)
    out = layer(x)
    assert out.shape == (batch, seq, d)
    expected = x + ref.sinusoidal_pe(seq, d)[None]  # the same table row for every batch element
    torch.testing.assert_close(out, expected, atol=0, rtol=0)


def test_module_does_not_use_the_batch_axis_as_positions(gen):
    # 000 §6's bug: slicing the table with x.size(0) (the batch) adds PE[b] to every token of sentence b.
    layer = ref.PositionalEncoding(8, max_len=32)
    x = torch.zeros(4, 6, 8)
    added = layer(x)  # (4, 6, 8) = the table rows that were added
    assert torch.equal(added[0], added[3]), "every sentence in the batch must get the same encodings"
    assert not torch.equal(added[0, 0], added[0, 5]), "positions inside a sentence must differ"
    torch.testing.assert_close(added[0], ref.sinusoidal_pe(6, 8), atol=0, rtol=0)


def test_module_rejects_too_long_input():
    layer = ref.PositionalEncoding(8, max_len=4)
    with pytest.raises(ValueError, match="max_len"):
        layer(torch.zeros(2, 5, 8))


def test_module_keeps_input_dtype():
    layer = ref.PositionalEncoding(8, max_len=10)
    assert layer(torch.zeros(2, 3, 8, dtype=torch.float64)).dtype == torch.float64
    assert layer(torch.zeros(2, 3, 8, dtype=torch.bfloat16)).dtype == torch.bfloat16


def test_buffer_is_not_a_parameter_and_moves_with_to():
    layer = ref.PositionalEncoding(8, max_len=10, dropout=0.1)
    assert list(layer.parameters()) == [], "the sinusoidal table is fixed, not trained"
    assert "pe" in dict(layer.named_buffers())
    assert layer.pe.shape == (10, 8), "the table is (max_len, d_model); batch-first input broadcasts over it"
    layer.to(torch.float64)
    assert layer.pe.dtype == torch.float64, "a buffer follows .to(dtype)"
    layer.to("meta")
    assert layer.pe.device.type == "meta", "a buffer follows .to(device)"


def test_dropout_is_applied_in_training_only(gen):
    layer = ref.PositionalEncoding(8, max_len=10, dropout=0.5)
    x = torch.randn(2, 5, 8, generator=gen)
    layer.eval()
    torch.testing.assert_close(layer(x), x + ref.sinusoidal_pe(5, 8))
    layer.train()
    torch.manual_seed(0)
    out = layer(x)
    assert (out == 0).any(), "dropout(p=0.5) in training mode should zero some entries"


def test_table_is_kept_in_float64_so_float64_inputs_get_every_digit(gen):
    layer = ref.PositionalEncoding(8, max_len=10).double().eval()
    assert layer.pe.dtype == torch.float64
    x = torch.randn(2, 6, 8, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(layer(x), x + pe_elementwise(6, 8), atol=ATOL64, rtol=0)


@pytest.mark.parametrize("p", [0.25, 0.6])
def test_dropout_with_a_generator_keeps_exactly_the_drawn_entries_scaled(gen, p):
    # The exercise's draw: keep = torch.rand(y.shape, generator=generator) >= p, on the CPU; kept entries / (1 - p).
    layer = ref.PositionalEncoding(8, max_len=10, dropout=p).train()
    x = torch.randn(3, 5, 8, generator=gen)
    y = x + ref.sinusoidal_pe(5, 8)
    keep = torch.rand(y.shape, generator=torch.Generator().manual_seed(11)) >= p
    out = layer(x, generator=torch.Generator().manual_seed(11))
    torch.testing.assert_close(out, y * keep / (1 - p))
    assert torch.equal(out, layer(x, generator=torch.Generator().manual_seed(11))), "a seed must give the same output"
    assert not torch.equal(out, layer(x, generator=torch.Generator().manual_seed(12))), "another seed, another mask"
    layer.eval()
    torch.testing.assert_close(layer(x, generator=torch.Generator().manual_seed(11)), y, atol=0, rtol=0)


def test_dropout_with_p_one_drops_everything_without_nan(gen):
    layer = ref.PositionalEncoding(4, max_len=6, dropout=1.0).train()
    out = layer(torch.randn(2, 3, 4, generator=gen), generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, torch.zeros(2, 3, 4))


def test_tables_are_made_on_the_device_they_are_given():
    meta = torch.device("meta")
    assert ref.sinusoidal_pe(5, 8, device=meta).device.type == "meta"
    assert ref.rotation_matrix(3, 8, device=meta).device.type == "meta"
    assert ref.alibi_bias(4, 5, device=meta).device.type == "meta"
    assert ref.apply_rope(torch.empty(2, 5, 8, device=meta)).device.type == "meta"


# --- the rotation property -------------------------------------------------------------------------


@pytest.mark.parametrize("k", [0, 1, 5, 37, -3, 2.5])
def test_rotation_matrix_shifts_every_position(k):
    d, n = 32, 200
    pe = ref.sinusoidal_pe(n + 50, d, dtype=torch.float64)
    m = ref.rotation_matrix(k, d, dtype=torch.float64)
    assert m.shape == (d, d)
    shifted = pe[10:n] @ m.T  # row form of M_k @ PE[pos], for every pos at once
    truth = pe_rows_elementwise([pos + k for pos in range(10, n)], d)
    torch.testing.assert_close(shifted, truth, atol=ATOL64, rtol=0)



def test_rotation_matrix_is_orthogonal_block_diagonal_and_composes():
    d = 16
    m3, m4, m7 = (ref.rotation_matrix(k, d, dtype=torch.float64) for k in (3, 4, 7))
    torch.testing.assert_close(m3 @ m3.T, torch.eye(d, dtype=torch.float64), atol=ATOL64, rtol=0)
    torch.testing.assert_close(m3 @ m4, m7, atol=ATOL64, rtol=0)  # shift by 4 then 3 = shift by 7
    off_block = m7.clone()
    for i in range(0, d, 2):
        off_block[i : i + 2, i : i + 2] = 0
    assert off_block.abs().max() == 0, "only the 2x2 blocks on the diagonal may be non-zero"
    torch.testing.assert_close(ref.rotation_matrix(0, d, dtype=torch.float64), torch.eye(d, dtype=torch.float64))


def test_pe_dot_product_depends_only_on_offset():
    d = 64
    pe = ref.sinusoidal_pe(1200, d, dtype=torch.float64)
    for k in (1, 10, 100):
        dots = (pe[: 1200 - k] * pe[k:]).sum(-1)  # PE[pos] · PE[pos + k] for every pos
        expected = torch.cos(k * ref.inverse_frequencies(d)).sum()  # sum_i cos(k w_i)
        torch.testing.assert_close(dots, expected.expand_as(dots), atol=1e-11, rtol=0)


# --- RoPE ------------------------------------------------------------------------------------------


def test_rope_preserves_norms_and_position_zero(gen):
    x = torch.randn(2, 3, 9, 8, generator=gen, dtype=torch.float64)
    r = ref.apply_rope(x)
    assert r.shape == x.shape and r.dtype == x.dtype
    torch.testing.assert_close(r.norm(dim=-1), x.norm(dim=-1), atol=ATOL64, rtol=0)
    torch.testing.assert_close(r[..., 0, :], x[..., 0, :], atol=0, rtol=0)  # angle 0 at position 0


def test_rope_scores_depend_only_on_relative_position(gen):
    d = 16
    q = torch.randn(d, generator=gen, dtype=torch.float64)
    k = torch.randn(d, generator=gen, dtype=torch.float64)
    n = 40
    qs = ref.apply_rope(q.expand(n, d))  # the same query content placed at positions 0..n-1
    ks = ref.apply_rope(k.expand(n, d))
    scores = qs @ ks.T  # (n, n) score of query at m with key at n
    for offset in range(-n + 1, n):
        diag = torch.diagonal(scores, offset=offset)  # all pairs with n - m = offset
        assert (diag - diag[0]).abs().max() < ATOL64, f"scores with offset {offset} differ: not relative"


def test_rope_matches_the_rotation_matrix(gen):
    # RoPE at position p is the same block rotation as the PE shift, transposed: R_p = M_p.T.
    d, p = 8, 13
    x = torch.randn(d, generator=gen, dtype=torch.float64)
    got = ref.apply_rope(x[None], torch.tensor([p]))[0]
    torch.testing.assert_close(got, ref.rotation_matrix(p, d, dtype=torch.float64).T @ x, atol=ATOL64, rtol=0)


def test_rope_explicit_positions_match_default_and_offsets(gen):
    x = torch.randn(2, 4, 6, 8, generator=gen, dtype=torch.float64)  # (batch, heads, seq, d_k)
    torch.testing.assert_close(ref.apply_rope(x, torch.arange(6)), ref.apply_rope(x))
    # A KV-cache style call: the last 2 rows at positions 4, 5 equal the full call's last 2 rows.
    torch.testing.assert_close(ref.apply_rope(x[..., 4:, :], torch.arange(4, 6)), ref.apply_rope(x)[..., 4:, :])


# --- ALiBi -----------------------------------------------------------------------------------------


def test_alibi_slopes_match_the_paper():
    torch.testing.assert_close(ref.alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)]))
    assert ref.alibi_slopes(12).shape == (12,)
    torch.testing.assert_close(ref.alibi_slopes(12)[:8], ref.alibi_slopes(8))


def test_alibi_bias_is_minus_slope_times_distance():
    bias = ref.alibi_bias(4, 5)
    assert bias.shape == (4, 5, 5)
    slopes = ref.alibi_slopes(4)
    for h in range(4):
        for i in range(5):
            for j in range(5):
                assert math.isclose(bias[h, i, j].item(), -slopes[h].item() * abs(i - j), abs_tol=1e-7)
    # Decoding with a cache: one query at the last position sees distances 4, 3, 2, 1, 0.
    torch.testing.assert_close(ref.alibi_bias(4, 1, 5), bias[:, -1:, :])


def test_learned_positions_have_no_row_beyond_max_len():
    # The chapter's point about learned encodings, pinned: nn.Embedding has exactly max_len rows.
    table = nn.Embedding(8, 4)
    table(torch.arange(8))
    with pytest.raises(IndexError):
        table(torch.arange(9))

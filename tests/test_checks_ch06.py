"""Chapter 06's own checker tests: wrong code written here that only this chapter's checks name (float64 tables
computed in float32 under dtypes=None, the shift property of rotation_matrix, RoPE's relative-position property,
dropout drawn another way than the exercise asks), each shown failing beside the reference passing.

What every chapter must keep (reference full marks, blank notebook, every catalogued wrong and valid answer,
hidden inputs that change with the seed, the notebooks): tests/chapter_contract.py; each hidden check's
catalogued mistakes named as themselves: tests/test_mistake_catalogues.py.
"""

import pytest
import torch

from autograder.checks import run_check
from solutions import ch06_positional_encoding as ref

CHAPTER = "06-positional-encoding"


def _table_in_float32(max_len, d_model, base=10000.0, *, dtype=torch.float32, device=None):
    """The right formula, computed in float32 whatever dtype is asked, then cast."""
    if d_model % 2:
        raise ValueError("odd d_model")
    return ref.sinusoidal_pe(max_len, d_model, base, device=device).to(dtype)


@pytest.mark.usefixtures("grading_env")
def test_a_float64_table_computed_in_float32_is_told_so():
    # dtypes=None calls are judged with float32 tolerances; the check's own extra holds float64 results to float64.
    with pytest.raises(AssertionError, match="right to float32 accuracy only"):
        run_check(CHAPTER, "sinusoidal_pe_hidden", _table_in_float32)
    run_check(CHAPTER, "sinusoidal_pe_hidden", ref.sinusoidal_pe)


@pytest.mark.usefixtures("grading_env")
def test_an_odd_d_model_must_raise_a_value_error_not_another_error():
    def asserts(max_len, d_model, base=10000.0, *, dtype=torch.float32, device=None):
        assert d_model % 2 == 0, "odd"
        return ref.sinusoidal_pe(max_len, d_model, base, dtype=dtype, device=device)

    with pytest.raises(AssertionError, match="should raise ValueError"):
        run_check(CHAPTER, "sinusoidal_pe_hidden", asserts)


@pytest.mark.usefixtures("grading_env")
def test_rotation_matrix_is_checked_by_its_shift_property():
    def backwards(k, d_model, base=10000.0, *, dtype=torch.float32, device=None):
        return ref.rotation_matrix(-k, d_model, base, dtype=dtype, device=device)  # the transpose of M_k

    with pytest.raises(AssertionError, match=r"PE\[pos - k\], not PE\[pos \+ k\]"):
        run_check(CHAPTER, "rotation_matrix_hidden", backwards)

    def scaled(k, d_model, base=10000.0, *, dtype=torch.float32, device=None):
        return ref.rotation_matrix(k, d_model, base, dtype=dtype, device=device) * 1.01  # not a rotation

    with pytest.raises(AssertionError, match=r"is not PE\[pos \+ k\]"):
        run_check(CHAPTER, "rotation_matrix_hidden", scaled)
    run_check(CHAPTER, "rotation_matrix_hidden", ref.rotation_matrix)


@pytest.mark.usefixtures("grading_env")
def test_rope_is_checked_by_its_relative_position_property():
    def grows_with_position(x, positions=None, base=10000.0):
        out = ref.apply_rope(x, positions, base)
        if tuple(x.shape[:2]) != (2, 10):  # right elsewhere: the property case alone tells this one
            return out
        return out * (1 + 0.01 * torch.arange(x.size(-2), dtype=x.dtype, device=x.device))[:, None]  # not a pure rotation

    with pytest.raises(AssertionError, match="should depend only on the offset"):
        run_check(CHAPTER, "apply_rope_hidden", grows_with_position)
    run_check(CHAPTER, "apply_rope_hidden", ref.apply_rope)


class _BernoulliDropout(ref.PositionalEncoding):
    """A right inverted dropout, drawn with torch.bernoulli instead of the exercise's torch.rand(...) >= p."""

    def forward(self, x, generator=None):
        y = x + self.pe[: x.size(1)].to(x.dtype)
        p = self.dropout.p
        if generator is None or not self.training or p == 0.0:
            return self.dropout(y)
        keep = torch.bernoulli(torch.full(y.shape, 1 - p), generator=generator).to(y.device)
        return y * keep / (1 - p)


@pytest.mark.usefixtures("grading_env")
def test_dropout_drawn_another_way_is_told_the_draw_the_exercise_asks_for():
    with pytest.raises(AssertionError, match="not the entries the generator decides"):
        run_check(CHAPTER, "PositionalEncoding_hidden", _BernoulliDropout)
    run_check(CHAPTER, "PositionalEncoding_hidden", ref.PositionalEncoding)


def test_the_reference_layer_draws_the_same_mask_on_every_device():
    # The mask is drawn on the CPU (where the generator lives) and moved: 'meta' gets the shape, the CPU the values.
    layer = ref.PositionalEncoding(8, max_len=10, dropout=0.5).train()
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(1))
    first = layer(x, generator=torch.Generator().manual_seed(4))
    assert torch.equal(first, layer(x, generator=torch.Generator().manual_seed(4)))
    kept = first != 0
    y = x + ref.sinusoidal_pe(5, 8)
    torch.testing.assert_close(first[kept], (y / 0.5)[kept])
    assert layer.to("meta")(x.to("meta"), generator=torch.Generator().manual_seed(4)).device.type == "meta"


# --- apply_rope built on the learner's own rotation_matrix: graded apart from it --------------------------

_ROPE_ON_ROTATION = '''
import torch

def apply_rope(x, positions=None, base=10000.0):
    d = x.size(-1)
    if positions is None:
        positions = torch.arange(x.size(-2), device=x.device)
    flat_x, flat_p = x.reshape(-1, d), positions.expand(x.shape[:-1]).reshape(-1).tolist()  # (N, d), N positions
    mats = {p: rotation_matrix(p, d, base, dtype=torch.float64, device=x.device).to(x.dtype) for p in sorted(set(flat_p))}
    rows = [mats[p].T @ v for p, v in zip(flat_p, flat_x)]  # M_p rotates PE rows by +p: x_rot = M_p^T x (column form)
    return torch.stack(rows).reshape(x.shape)
'''


def _rotation_the_wrong_way(k, d_model, base=10000.0, *, dtype=torch.float32, device=None):
    return ref.rotation_matrix(-k, d_model, base, dtype=dtype, device=device)


def _rope_namespace(rotation):
    namespace = {"rotation_matrix": rotation}
    exec(compile(_ROPE_ON_ROTATION, "<cell-rope>", "exec"), namespace)
    return namespace


def test_apply_rope_on_a_wrong_rotation_matrix_pays_only_in_rotation_matrix():
    run_check("06-positional-encoding", "apply_rope_hidden", _rope_namespace(ref.rotation_matrix), seed=0, device="cpu")
    wrong = _rope_namespace(_rotation_the_wrong_way)
    with pytest.raises(AssertionError):
        run_check("06-positional-encoding", "rotation_matrix_hidden", wrong, seed=0, device="cpu")
    run_check("06-positional-encoding", "apply_rope_hidden", wrong, seed=0, device="cpu")  # no double penalty


def test_apply_rope_on_a_right_rotation_matrix_with_its_own_mistake_still_fails():
    namespace = _rope_namespace(ref.rotation_matrix)
    own_mistake = namespace["apply_rope"]
    namespace["apply_rope"] = lambda x, positions=None, base=10000.0: own_mistake(x, positions, base * 2)  # wrong base
    namespace["apply_rope"].__name__ = "apply_rope"
    with pytest.raises(AssertionError):
        run_check("06-positional-encoding", "apply_rope_hidden", namespace, seed=0, device="cpu")

"""What the builder writes into a notebook is the same on every machine (issue 15).

Float32 matrix products, softmaxes and sums round differently with the kernels a CPU selects, so a value
computed in float32 and written into a notebook made the committed notebooks differ from a rebuild on another
machine. The builder (autograder/authoring/build.py) refuses such values; these tests check the rules by construction:
a rebuild where every float32 result of arithmetic rounds differently writes the same bytes.
"""

import math

import pytest
import torch

from autograder.authoring import build
from autograder import registry

CHAPTER = "02-qkv-attention"


class OtherFloat32Kernels(torch.overrides.TorchFunctionMode):
    """Another machine: every float32 result of arithmetic that is not correctly rounded (sums, matrix
    products, exp, softmax...) comes out a few float32 ulps away (signs alternating), as other kernels round."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if build._same_everywhere(build._name(func), kwargs or {}):
            return out
        storages = {t.untyped_storage().data_ptr() for t in build._tensors((args, kwargs)) if t.device.type == "cpu"}
        for t in build._tensors(out):
            if t.dtype == torch.float32 and t.device.type == "cpu" and t.numel() and t.untyped_storage().data_ptr() not in storages:
                signs = 1.0 - 2.0 * (torch.arange(t.numel()) % 2).float()
                t.data.mul_(1.0 + signs.reshape(t.shape) * 2.0**-21)  # 4 ulps
        return out


def render_elsewhere(chapter_id, template_text=None):
    with OtherFloat32Kernels():
        return build.render_source(chapter_id, template_text)


def fixture(body):
    """A small chapter-02 source (a readonly cell of `body`) for the builder's refusals."""
    return f"```{{code-cell}} ipython3\n{body}\n```\n"


# --- (a) every value written is the float64 computation, rounded ------------------------------------------


@pytest.mark.parametrize("chapter_id", registry.graded_chapters())
def test_a_rebuild_with_other_float32_rounding_writes_the_same_bytes(chapter_id):
    assert render_elsewhere(chapter_id) == build.render_source(chapter_id), (
        f"{chapter_id}: a value written into the notebook depends on float32 rounding"
    )


def test_the_rebuild_comparison_catches_a_float32_value_that_slips_through(monkeypatch):
    """The comparison above fails on a template that writes a float32 result (with the guard switched off)."""
    leak = fixture("_p = {{ literal(ref.stable_softmax(tensor([0.5, 1.5, -2.0], dtype='float32'))) }}")
    monkeypatch.setattr(build, "computed_in_float32", lambda t: False)
    assert render_elsewhere(CHAPTER, leak) != build.render_source(CHAPTER, leak)
    fixed = fixture("_p = {{ literal(expected(ref.stable_softmax, tensor([0.5, 1.5, -2.0], dtype='float32'))) }}")
    assert render_elsewhere(CHAPTER, fixed) == build.render_source(CHAPTER, fixed)


def test_expected_writes_the_float64_values_as_float32():
    x = build.tensor([0.5, 1.5, -2.0], dtype="float32")
    with build._Float32Arithmetic():
        text = build.literal(build.expected(torch.softmax, x, dim=0))
    float64_values = torch.softmax(x.double(), dim=0).tolist()
    assert text == "torch.tensor([" + ", ".join(f"{v:.8g}" for v in float64_values) + "], dtype=torch.float32)"


# --- (b) an ill-conditioned float32 case is refused ------------------------------------------------------

# two scores near 9e4, 0.2 apart: float32 rounds each score by about 5e-3, so the weights (about 0.45 and
# 0.55) move by about 1e-3, far more than the visible tolerance (1e-4 + 1e-4 |w|) allows
ILL_CONDITIONED = """{%- set q = tensor([[300.1, 200.3]], dtype="float32") %}
{%- set k = tensor([[100.7, 300.2], [100.701, 300.2]], dtype="float32") %}
{%- set v = tensor([[1.0, 0.0], [0.0, 1.0]], dtype="float32") %}
_w = {{ literal(expected(ref.scaled_dot_product_attention, q, k, v, index=1)) }}"""
# the same scores far apart (one-hot in both precisions)
WELL_CONDITIONED = ILL_CONDITIONED.replace("[100.701, 300.2]", "[-100.701, 300.2]")


def test_an_ill_conditioned_float32_case_is_refused_at_build_time():
    with pytest.raises(build.BuildError, match="ill-conditioned float32 case.*depend on the machine's rounding"):
        build.render_source(CHAPTER, fixture(ILL_CONDITIONED))
    assert "_w = torch.tensor([\n    [1.0, 0.0],\n], dtype=torch.float32)" in build.render_source(CHAPTER, fixture(WELL_CONDITIONED))


def test_mistakes_refuses_an_ill_conditioned_variant_or_leaves_it_out_on_request(monkeypatch):
    """A variant whose float32 output depends on rounding (here: it takes |k|, which brings two scores within
    0.2 of each other) is refused in a float32 case, or left out with ill_conditioned="leave out"."""
    checks = __import__(f"autograder.checks.{registry.module_name(CHAPTER)}", fromlist=["_"])
    ref = __import__(f"solutions.{registry.module_name(CHAPTER)}", fromlist=["_"])
    variants = {
        "keys taken as |k|": lambda q, k, v, mask=None: ref.scaled_dot_product_attention(q, k.abs(), v, mask),
        "keys negated": lambda q, k, v, mask=None: ref.scaled_dot_product_attention(q, -k, v, mask),
    }
    monkeypatch.setattr(checks, "TEST_VARIANTS", variants, raising=False)
    source = fixture(WELL_CONDITIONED.replace(
        "_w = {{ literal(expected(ref.scaled_dot_product_attention, q, k, v, index=1)) }}",
        "_m = {{ mistakes(ref.scaled_dot_product_attention, checks.TEST_VARIANTS, q, k, v, index=1) }}",
    ))
    with pytest.raises(build.BuildError, match="'keys taken as \\|k\\|' is ill-conditioned in this float32 case"):
        build.render_source(CHAPTER, source)
    left_out = build.render_source(CHAPTER, source.replace("index=1)", 'index=1, ill_conditioned="leave out")'))
    # the ill-conditioned variant is left out; the other is kept, with its float64 values (one-hot on key 1)
    assert "keys taken as |k|" not in left_out
    assert "'keys negated': torch.tensor([\n        [0.0, 1.0],\n    ], dtype=torch.float32)" in left_out


# --- (c) literal() refuses a tensor computed with float32 arithmetic ---------------------------------------


def test_literal_refuses_a_float32_tensor_computed_with_float32_arithmetic():
    x = build.tensor([[0.5, 1.5], [-2.0, 0.25]], dtype="float32")
    with build._Float32Arithmetic():
        for computed in (x @ x, torch.softmax(x, dim=-1), x.sum(dim=0), (x @ x).double(), (x.exp() * 2).reshape(4)):
            with pytest.raises(build.BuildError, match="computed with float32 arithmetic.*expected\\("):
                build.literal(computed)
        with pytest.raises(build.BuildError, match="item\\(\\) of a torch.float32 tensor computed with float32"):
            x.sum().item()
        # data, casts, views and correctly rounded elementwise arithmetic are the same everywhere: written
        assert build.literal(x) == "torch.tensor([\n    [0.5, 1.5],\n    [-2.0, 0.25],\n], dtype=torch.float32)"
        assert build.literal(build.tensor([0.1, 0.2]).float()) == "torch.tensor([0.1, 0.2], dtype=torch.float32)"
        assert build.literal((x * 40 + 1).T[0]) == "torch.tensor([21.0, -79.0], dtype=torch.float32)"
        assert build.literal((x.double() @ x.double()).float()[0]) == "torch.tensor([-2.75, 1.125], dtype=torch.float32)"


def test_a_template_writing_a_float32_result_is_refused_with_the_fix_named():
    source = fixture("{%- set big = tensor([1000.0, 1001.0, 1002.0], dtype='float32') %}\n_p = {{ literal(ref.stable_softmax(big)) }}")
    with pytest.raises(build.BuildError, match="Compute it in float64 with expected"):
        build.render_source(CHAPTER, source)
    fixed = source.replace("literal(ref.stable_softmax(big))", "literal(expected(ref.stable_softmax, big))")
    assert "dtype=torch.float32)" in build.render_source(CHAPTER, fixed)


# --- digits: float64 values on a rounding boundary of the 8th digit --------------------------------------


def test_a_value_on_a_rounding_boundary_is_written_the_same_whichever_side_the_kernels_put_it():
    """-0.751696585 (chapter 01, from short decimal data) lies on a boundary of the 8th digit: a few float64 ulps
    either way round it differently to 8 digits, so it is written to 7 digits; other values keep 8."""
    for exact in (-0.751696585, 0.123456785, 2.5e-7 + 5e-15, 1234.56785):
        near = [exact]
        for _ in range(4):
            near = [math.nextafter(near[0], -math.inf)] + near + [math.nextafter(near[-1], math.inf)]
        assert len({f"{x:.8g}" for x in near}) == 2, "the fixture should straddle a boundary of the 8th digit"
        assert len({build._number(x) for x in near}) == 1
        assert build._number(exact) == f"{exact:.7g}"
    for x in (-0.75169658, 0.12345679, 1.0, 1e-30, 0.1 + 0.2):
        assert build._number(x) == f"{x:.8g}" if "." in f"{x:.8g}" or "e" in f"{x:.8g}" else f"{x:.8g}.0"


def test_a_float64_value_written_as_float32_that_float32_cannot_hold_is_written_as_the_zero_it_becomes():
    t = torch.tensor([1e-300, -1e-60, 1.5, 1e-44], dtype=torch.float64)
    assert build.literal(t, dtype="float32") == "torch.tensor([0.0, -0.0, 1.5, 1e-44], dtype=torch.float32)"
    assert build.literal(t) == "torch.tensor([1e-300, -1e-60, 1.5, 1e-44], dtype=torch.float64)"

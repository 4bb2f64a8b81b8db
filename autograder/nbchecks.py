"""Helpers for the visible checks in the exercise notebooks.

The notebook builder copies this file, unchanged, into the first code cell of every exercise notebook,
so a learner's notebook runs with torch alone (no course package needed). Keep it small, dependency-free
and free of anything that reveals an answer: expected values come from the notebook's test cells, which
were computed from `solutions/` when the notebook was generated.
"""

import torch


class CheckFailed(AssertionError):
    """A visible check failed; the message says what was expected and the likely mistake."""


def call(fn, *args, error_hints=None, **kwargs):
    """Call the learner's fn, turning common exceptions into a diagnosis.

    error_hints: {substring of the exception message: hint}.
    """
    name = getattr(fn, "__name__", "your function")
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise CheckFailed(f"{name} is not implemented yet: replace `raise NotImplementedError()`.") from None
    except Exception as exc:
        for fragment, hint in (error_hints or {}).items():
            if fragment in str(exc):
                raise CheckFailed(f"{name} raised {type(exc).__name__}: {exc}\nLikely mistake: {hint}") from None
        raise


def expect_shape(actual, shape, what):
    if not isinstance(actual, torch.Tensor):
        raise CheckFailed(f"{what} should be a torch.Tensor, got {type(actual).__name__}.")
    if tuple(actual.shape) != tuple(shape):
        raise CheckFailed(f"{what} has shape {tuple(actual.shape)}, expected {tuple(shape)}.")


def expect_rows_sum_to_one(weights, what="attention weights", dim=-1, atol=1e-5):
    sums = weights.sum(dim=dim)
    if not torch.allclose(sums, torch.ones_like(sums), atol=atol):
        bad = sums.flatten()[(sums.flatten() - 1).abs().argmax()].item()
        raise CheckFailed(
            f"The rows of {what} should each sum to 1 along dim={dim}, but one sums to {bad:.4g}. "
            "Is the softmax taken over the wrong dimension, or the mask applied after the softmax?"
        )


def expect_close(actual, expected, what, mistakes=None, atol=1e-4, rtol=1e-4):
    """Compare with the expected tensor; on failure, name the known mistake that `actual` matches.

    mistakes: {description of a mistake: the tensor that mistake produces on the same input}.
    NaNs compare equal to NaNs, so a NaN-producing mistake can be recognised too.
    """
    expect_shape(actual, expected.shape, what)
    actual = actual.detach().to("cpu", expected.dtype)
    if torch.allclose(actual, expected, atol=atol, rtol=rtol, equal_nan=True):
        return
    for mistake, wrong in (mistakes or {}).items():
        if wrong.shape == actual.shape and torch.allclose(actual, wrong, atol=atol, rtol=rtol, equal_nan=True):
            raise CheckFailed(f"{what} is not right. It is exactly what you get with this mistake: {mistake}.")
    diff = (actual - expected).abs().nan_to_num(nan=float("inf")).max().item()
    raise CheckFailed(
        f"{what} is not right (largest difference {diff:.3g}).\nexpected:\n{expected}\ngot:\n{actual}"
    )


def expect_attention_weights(actual, expected, what="attention weights", mistakes=None):
    """Like expect_close, but an unrecognised mistake whose rows do not sum to 1 is reported as such."""
    try:
        expect_close(actual, expected, what, mistakes)
    except CheckFailed as failure:
        if "exactly what you get" not in str(failure):
            expect_rows_sum_to_one(actual, what)
        raise


def expect_near(actual, expected, what, rel=0.1, hint=""):
    """A statistical check: |actual - expected| <= rel * |expected|."""
    if not isinstance(actual, (int, float)):
        raise CheckFailed(f"{what} should be a Python float (use .item()), got {type(actual).__name__}.")
    if abs(actual - expected) > rel * abs(expected):
        raise CheckFailed(f"{what} is {actual:.4g}; expected about {expected:.4g} (within {rel:.0%}). {hint}")

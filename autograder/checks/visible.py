"""Helpers for the visible checks in the exercise notebooks.

The notebook builder copies this file, unchanged, into the first code cell of every exercise notebook,
so a learner's notebook runs with torch alone (no course package needed). Keep it small, dependency-free
and free of anything that reveals an answer: expected values come from the notebook's test cells, which
were computed from `solutions/` when the notebook was generated.
"""

import torch


class CheckFailed(AssertionError):
    """A visible check failed; the message says what was expected and the likely mistake."""


# Plain diagnoses of common Python and PyTorch errors, by a fragment of the message.
COMMON_ERRORS = {
    "too many values to unpack": "it returned a different number of values than asked for (return every value listed in the docstring, as a tuple).",
    "not enough values to unpack": "it returned fewer values than asked for (return every value listed in the docstring, as a tuple).",
    "cannot unpack non-iterable NoneType": "it returned nothing: is the `return` statement missing?",
    "'NoneType' object": "something is None: a function without `return`, or an optional argument (such as mask=None) used as a tensor.",
    "must match the size of tensor": "two tensors do not broadcast: check the shapes along the dimension named in the error (a reduction without keepdim=True?).",
    "cannot be multiplied": "a matrix product of incompatible shapes: check which dimension each operand contributes.",
    "Expected all tensors to be on the same device": "a tensor created on another device: create tensors with device=x.device.",
    "is not on the expected device": "a tensor created on another device: create tensors with device=x.device.",
    "expected scalar type": "tensors of different dtypes were mixed: create tensors with dtype=x.dtype.",
    "got an unexpected keyword argument": "the function's signature differs from the exercise's: keep the parameter names given.",
    "positional argument": "the function's signature differs from the exercise's: keep the parameters given.",
    "is not defined": "a name is used before it is defined: run the cells above (imports, your earlier functions) first.",
    "has no attribute": "an attribute or method that does not exist on this object (a typo, or a tensor/module mix-up?).",
    "out of range": "an index or dimension is out of range: check which dimension you index (negative dims count from the end).",
}


def _where_raised(exc, name):
    """The innermost function of the notebook (not torch's) in the traceback, if it is not `name` itself,
    one of its methods or a function nested in it."""
    tb, inner = exc.__traceback__, None
    while tb is not None:
        code = tb.tb_frame.f_code
        if "site-packages" not in code.co_filename and "/torch/" not in code.co_filename and code.co_name not in ("call", "<module>"):
            inner = getattr(code, "co_qualname", code.co_name)
        tb = tb.tb_next
    if not inner or inner == name or inner.startswith(f"{name}."):
        return None
    return inner.split(".")[0] if "." in inner and not inner.split(".")[0][:1].isupper() else inner


def call(fn, *args, error_hints=None, returns=None, callees=(), **kwargs):
    """Call the learner's fn, turning common exceptions into a diagnosis.

    error_hints: {substring of the exception message: hint} for errors raised in fn itself;
    returns: the names of the values fn must return, e.g. ("output", "weights"), checked before unpacking;
    callees: the learner's other exercise functions that fn calls: an error raised inside one of them is
    reported as that function's, not fn's.
    """
    name = getattr(fn, "__name__", type(fn).__name__)
    try:
        result = fn(*args, **kwargs)
    except NotImplementedError as exc:
        if str(exc):  # torch's own NotImplementedError (e.g. copying a meta tensor), not the exercise's stub
            hint = next((h for f, h in (error_hints or {}).items() if f in str(exc)), None)
            raise CheckFailed(f"{name} raised NotImplementedError: {exc}" + (f"\nLikely mistake: {hint}" if hint else "")) from None
        inner = _where_raised(exc, name)
        where = f" (`{inner}`, which {name} calls)" if inner in callees else ""
        raise CheckFailed(f"{name} is not implemented yet{where}: replace `raise NotImplementedError()`.") from None
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"
        inner = _where_raised(exc, name)
        if inner in callees:
            raise CheckFailed(f"{name} raised {text}\nThe error comes from `{inner}`, which {name} calls: fix and check that one first.") from None
        for fragment, hint in list((error_hints or {}).items()) + list(COMMON_ERRORS.items()):
            if fragment in str(exc):
                raise CheckFailed(f"{name} raised {text}\nLikely mistake: {hint}") from None
        raise
    if result is None:
        raise CheckFailed(f"{name} returned None: is the `return` statement missing?")
    if returns is not None and len(returns) > 1:
        if not isinstance(result, tuple) or len(result) != len(returns):
            got = f"a tuple of {len(result)}" if isinstance(result, tuple) else f"one {type(result).__name__}"
            raise CheckFailed(f"{name} should return {len(returns)} values ({', '.join(returns)}), as a tuple; it returned {got}.")
    return result


def expect_dtype(actual, dtype, what):
    """The result keeps the inputs' dtype (float64 in, float64 out)."""
    if not isinstance(actual, torch.Tensor):
        raise CheckFailed(f"{what} should be a torch.Tensor, got {type(actual).__name__}.")
    if actual.dtype != dtype:
        raise CheckFailed(f"{what} has dtype {actual.dtype}, expected {dtype}: keep the input's dtype "
                          "(no .float(), and create new tensors with dtype=x.dtype).")


def masked_rows_as_expected(actual, expected):
    """The course's one rule for a query with no allowed key (a fully masked row): softmax is 0/0 there, and
    the reference's formula gives NaN; PyTorch's F.scaled_dot_product_attention gives zeros instead. Both are
    right. `actual` is returned with each last-dim row that is all zeros where `expected`'s row is all NaN
    set to NaN, so that both readings compare equal and nothing else changes."""
    if not (isinstance(actual, torch.Tensor) and isinstance(expected, torch.Tensor)) or expected.dim() == 0 \
            or not expected.is_floating_point() or actual.shape != expected.shape or not expected.isnan().any():
        return actual
    rows = expected.isnan().all(dim=-1, keepdim=True) & (actual == 0).all(dim=-1, keepdim=True)
    return actual.masked_fill(rows, float("nan")) if rows.any() else actual


def difference_in_words(actual, expected):
    """How two float tensors of one shape differ, in words: infinities and NaNs where the other has numbers
    are named as such (a largest difference of 3.4e+38 says nothing), else the largest difference."""
    n = expected.numel()
    for sign, word in ((-1, "-inf"), (1, "inf")):
        want = expected.isinf() & (expected.sign() == sign)
        wrong = want & ~(actual.isinf() & (actual.sign() == sign))
        if wrong.any():
            masked = " (a masked entry)" if sign < 0 else ""
            return f"expected {word}{masked} at {int(wrong.sum())} of {n} entries, got a finite value or NaN there"
    wrong = expected.isnan() & ~actual.isnan()
    if wrong.any():
        return f"expected NaN (e.g. a row with no allowed key: 0/0) at {int(wrong.sum())} of {n} entries, got numbers there"
    wrong = expected.isfinite() & actual.isnan()
    if wrong.any():
        return f"got NaN at {int(wrong.sum())} of {n} entries where a number was expected (0/0, inf - inf or a softmax of -inf everywhere?)"
    wrong = expected.isfinite() & actual.isinf()
    if wrong.any():
        return f"got inf or -inf at {int(wrong.sum())} of {n} entries where a finite number was expected (an overflow?)"
    both = expected.isfinite() & actual.isfinite()
    diff = (actual - expected)[both].abs().max().item() if both.any() else float("inf")
    return f"largest difference {diff:.3g}"


# On the 'meta' device tensors have shapes but no values: code that reads values (.item(), .tolist(), int(t),
# boolean indexing, data-dependent shapes) fails there whatever its devices are, which proves no device mistake.
# Only these errors, where tensors on two devices meet, do:
DEVICE_MIX_ERRORS = ("is not on the expected device", "Expected all tensors to be on the same device",
                     "must be on the same device", "found at least two devices")


def meta_failure_is_device_mistake(error_text):
    """Does an error raised on 'meta' inputs prove a device mistake (two devices meet)? Otherwise the code may
    only need values that meta tensors do not have: not a device mistake, and not to be charged as one."""
    return any(fragment in error_text for fragment in DEVICE_MIX_ERRORS)


def _moved_off_meta(func, args, kwargs):
    """A move of a 'meta' tensor to another device (x.cpu(), x.to("cpu")) as zeros on that device, else None: the
    move is no mistake by itself (lengths.cpu().tolist() is fine on a GPU); where the moved tensor then meets the
    meta inputs, the watch sees the mix. (The grader's runner has the same rule for the hidden checks.)"""
    name = getattr(func, "__name__", "")
    if name not in ("cpu", "to") or not args or not isinstance(args[0], torch.Tensor) or args[0].device.type != "meta":
        return None
    target, dtype = (torch.device("cpu"), None) if name == "cpu" else (None, None)
    for value in list(args[1:]) + list((kwargs or {}).values()):
        if isinstance(value, torch.dtype):
            dtype = value
        elif isinstance(value, torch.Tensor):
            target, dtype = value.device, value.dtype
        elif isinstance(value, (str, torch.device)):
            try:
                target = torch.device(value)
            except (RuntimeError, TypeError):
                pass
    if target is None or target.type == "meta":
        return None
    return torch.zeros(args[0].shape, dtype=dtype or args[0].dtype, device=target)


class _DeviceMixWatch:
    """Notes the operations that combine a 'meta' tensor with a non-scalar tensor on another device (some,
    like a matrix product, accept the mix on 'meta' although it fails on a GPU); a move off 'meta' gives zeros
    on the target device, so that where it meets the inputs the mix is seen."""

    def __enter__(self):
        from torch.overrides import TorchFunctionMode
        from torch.utils._python_dispatch import TorchDispatchMode

        watch = self

        class Moves(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                moved = _moved_off_meta(func, args, kwargs)
                return moved if moved is not None else func(*args, **(kwargs or {}))

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                found = set()

                def visit(value):
                    if isinstance(value, torch.Tensor) and value.dim() > 0:
                        found.add(value.device.type)
                    elif isinstance(value, (list, tuple)):
                        for v in value:
                            visit(v)

                visit(args)
                visit(list((kwargs or {}).values()))
                if "meta" in found and len(found) > 1:
                    watch.mixed.append(str(getattr(func, "overloadpacket", func)))
                return func(*args, **(kwargs or {}))

        self.mixed, self.moves, self.mode = [], Moves(), Mode()
        self.moves.__enter__()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        self.mode.__exit__(*exc)
        self.moves.__exit__(*exc)
        return False


def expect_meta(fn, *args, shape, what, index=None, **kwargs):
    """Call fn on inputs on PyTorch's 'meta' device (shapes only, no values): the result must be a meta tensor
    of `shape`. This is how the grader finds tensors created on the wrong device, without a GPU."""
    name = getattr(fn, "__name__", "your function")
    watch = _DeviceMixWatch()
    try:
        with watch:
            result = fn(*args, **kwargs)
    except NotImplementedError as exc:
        if not str(exc):
            raise CheckFailed(f"{name} is not implemented yet: replace `raise NotImplementedError()`.") from None
        if watch.mixed:  # e.g. meta values written into a tensor created on the CPU
            raise CheckFailed(
                f"{name} combines its 'meta' inputs with a tensor on the CPU (in {watch.mixed[0]}); on a GPU this fails.\n"
                "Likely mistake: a tensor created without device=... (e.g. torch.zeros(n, m) instead of "
                "torch.zeros(n, m, device=x.device) or x.new_zeros(n, m))."
            ) from None
        if not meta_failure_is_device_mistake(str(exc)):
            return  # code that reads values (.tolist(), .item(), ...) cannot run on 'meta': no device mistake shown
        raise CheckFailed(f"{name} fails when its inputs are on another device ('meta'): NotImplementedError: {exc}") from None
    except Exception as exc:
        if isinstance(exc, TypeError) and "unexpected keyword argument" in str(exc):
            # not a 'meta' limitation: the call itself is refused (e.g. no `device` parameter), as it is when graded
            given = ", ".join(f"{k}=..." for k in kwargs) or "these arguments"
            raise CheckFailed(f"{what}: {name} raised TypeError: {exc}\nKeep the signature the exercise gives: the grader "
                              f"calls it with {given} too.") from None
        if not watch.mixed and not meta_failure_is_device_mistake(f"{type(exc).__name__}: {exc}"):
            return  # cannot tell on 'meta' (values are needed, or another error the value checks above see)
        raise CheckFailed(
            f"{name} mixes devices: with its inputs on device 'meta' it raised {type(exc).__name__}: {exc}\n"
            "Likely mistake: a tensor created without device=... (e.g. torch.ones(n, n) instead of "
            "torch.ones(n, n, device=x.device)); on a GPU the same code fails the same way."
        ) from None
    if watch.mixed:
        raise CheckFailed(
            f"{name} combines its 'meta' inputs with a tensor on the CPU (in {watch.mixed[0]}); on a GPU this fails.\n"
            "Likely mistake: a tensor created without device=... (e.g. torch.eye(n) instead of torch.eye(n, device=x.device))."
        )
    out = result[index] if index is not None else result
    if not isinstance(out, torch.Tensor) or out.device.type != "meta" or tuple(out.shape) != tuple(shape):
        got = f"a tensor on {out.device} of shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise CheckFailed(f"{what}: with inputs on device 'meta' the result should be a meta tensor of shape {tuple(shape)}; got {got}.")


def expect_equal(actual, expected, what):
    """Exact comparison: ints, bools, or bool/int tensors (same shape, dtype and entries)."""
    if isinstance(expected, torch.Tensor):
        expect_shape(actual, expected.shape, what)
        if actual.dtype != expected.dtype:
            raise CheckFailed(f"{what} has dtype {actual.dtype}, expected {expected.dtype}.")
        if not torch.equal(actual.detach().cpu(), expected):
            wrong = (actual.detach().cpu() != expected).nonzero().tolist()[:5]
            raise CheckFailed(f"{what} is not right: {int((actual.detach().cpu() != expected).sum())} entries differ (e.g. at {wrong}).\nexpected:\n{expected}\ngot:\n{actual}")
        return
    if isinstance(expected, int) and not isinstance(expected, bool) and (isinstance(actual, (float, torch.Tensor)) and not isinstance(actual, bool)):
        # one rule for every integer answer, as the hidden checks: a count is a Python int, never 12.0 or tensor(12)
        raise CheckFailed(f"{what} is {actual!r}, a {type(actual).__name__}; expected the int {expected!r}: a count is a whole "
                          "number, return a Python int (// and int arithmetic, or int(...)).")
    if isinstance(actual, bool) != isinstance(expected, bool) or actual != expected:
        raise CheckFailed(f"{what} is {actual!r}; expected {expected!r}.")


def expect_mask(actual, expected, what, mistakes=None):
    """A boolean mask, compared exactly (dtype bool, shape, every entry); names a known mistake it matches.
    mistakes: {description of a mistake: the mask that mistake produces on the same input}."""
    if not isinstance(actual, torch.Tensor):
        raise CheckFailed(f"{what} should be a torch.Tensor, got {type(actual).__name__}.")
    if actual.dtype != torch.bool:
        raise CheckFailed(f"{what} has dtype {actual.dtype}: masks are boolean (dtype=torch.bool, True = may attend). "
                          "PyTorch ADDS a float mask to the scores, so a mask of 1s and 0s masks nothing.")
    got = actual.detach().cpu()
    if tuple(got.shape) == tuple(expected.shape) and torch.equal(got, expected):
        return
    for mistake, wrong in (mistakes or {}).items():
        if tuple(got.shape) == tuple(wrong.shape) and torch.equal(got, wrong):
            shape = f" (shape {tuple(got.shape)}, expected {tuple(expected.shape)})" if got.shape != expected.shape else ""
            raise CheckFailed(f"{what} is not right{shape}. It is exactly what you get with this mistake: {mistake}.")
    expect_equal(actual, expected, what)


def expect_same(first, second, what):
    """Two calls with the same generator seed must give the same result (draw with generator=...)."""
    if first != second:
        raise CheckFailed(f"{what}: two calls with generators seeded alike gave {first!r} and {second!r}. "
                          "Draw every random number with generator=generator, so results are reproducible.")


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
    actual = masked_rows_as_expected(actual.detach().to("cpu", expected.dtype), expected)
    if torch.allclose(actual, expected, atol=atol, rtol=rtol, equal_nan=True):
        return
    for mistake, wrong in (mistakes or {}).items():
        if wrong.shape == actual.shape and torch.allclose(actual, wrong, atol=atol, rtol=rtol, equal_nan=True):
            raise CheckFailed(f"{what} is not right. It is exactly what you get with this mistake: {mistake}.")
    raise CheckFailed(
        f"{what} is not right ({difference_in_words(actual, expected)}).\nexpected:\n{expected}\ngot:\n{actual}"
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

"""Checks for chapter 07-ffn-layernorm.

- *_MISTAKES: the typical wrong implementations, used to name a learner's mistake (functions for layer_norm,
  noam_lr and label_smoothed_cross_entropy; for the two modules, wrong nn.Module classes with the reference's
  parameter names, so that the grader's weights load into them).
- FORBIDDEN (per exercise) and SHORTCUT_NAMES, composed from autograder/checks/builtins.py. The sandbox's guard
  switches off the union of the forbidden groups for the whole notebook (layer_norm, cross_entropy, nll_loss,
  transformer_layers): so the course's LayerNorm module (given in the notebook) is built on the learner's own
  layer_norm, and EncoderLayer is graded with layer_norm as a callee (a mistake there costs only layer_norm's
  points). nn.Dropout stays in the modules: in eval() or with dropout = 0 it computes nothing; in train() with
  dropout > 0 the grader draws the masks (runner.seeded_dropout, the same seed for the reference), which shows
  where the dropout sits and does not need the built-in kernel the guard switches off. The softmax family is NOT forbidden: label smoothing may use log_softmax (the exercise is the
  smoothing and the padding, not the softmax). nn.MultiheadAttention is not forbidden either (its weights would
  not load: the exercise uses the course's MultiHeadAttention of chapter 4); nn.TransformerEncoderLayer is.
- CHECKS: the hidden check of each graded cell, by grade id.
"""

import math

import torch
import torch.nn.functional as F

from autograder.checks import builtins
from autograder.checks import Call, Case, Check, ModuleCase, Returned, Seeded, function_check, generator, module_check
from autograder.checks import visible
from autograder.checks.judge import _forbidden_used, outcome
from solutions import ch07_ffn_layernorm as ref

# --- layer_norm ------------------------------------------------------------------------------------------------


def _ln(x, weight, bias, eps=1e-5, *, unbiased=False, eps_outside=False, dim=-1, both_or_none=False):
    mean = x.mean(dim=dim, keepdim=True)
    var = x.var(dim=dim, keepdim=True, unbiased=unbiased)
    y = (x - mean) / (var.sqrt() + eps) if eps_outside else (x - mean) / torch.sqrt(var + eps)
    if both_or_none and (weight is None or bias is None):
        return y  # `if weight is not None and bias is not None: y = y * weight + bias`
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


LAYER_NORM_MISTAKES = {
    "unbiased variance (divided by d - 1, as x.var() does by default): LayerNorm uses the biased variance, "
    "the mean of the squared deviations (divide by d; x.var(dim=-1, unbiased=False))": lambda x, w, b, eps=1e-5: _ln(x, w, b, eps, unbiased=True),
    "eps added outside the square root (sqrt(var) + eps): it belongs inside, sqrt(var + eps)": lambda x, w, b, eps=1e-5: _ln(x, w, b, eps, eps_outside=True),
    "normalised over the wrong dimension (dim 0, across the batch, as BatchNorm does): LayerNorm normalises each "
    "position over its own features, the last dimension": lambda x, w, b, eps=1e-5: _ln(x, w, b, eps, dim=0),
    "weight and bias swapped: y = normalised * weight + bias": lambda x, w, b, eps=1e-5: _ln(x, b, w, eps),
    "scale and shift applied only when both weight and bias are given (if weight is not None and bias is not None): "
    "each is optional on its own, a weight with bias=None still scales": lambda x, w, b, eps=1e-5: _ln(x, w, b, eps, both_or_none=True),
}

LAYER_NORM_HINTS = {
    "must match the size": "the mean and the variance must keep the normalised dimension (keepdim=True) so that they "
    "broadcast against x.",
    "Expected all tensors to be on the same device": "a tensor created on another device: create tensors with device=x.device, "
    "or leave out the scale/shift when weight/bias is None.",
    "Expected a proper Tensor but got": "a tensor created on another device: create tensors with device=x.device.",
    "to have the same dtype": "tensors of two dtypes met: keep x's dtype throughout (no .float()).",
}

# --- FeedForward -----------------------------------------------------------------------------------------------


class _FF(ref.FeedForward):
    act = "own"  # own | none | relu | both | swapped
    drop = "hidden"  # hidden | output | none: where the dropout sits (seen in train() mode, runner.seeded_dropout)

    def forward(self, x):
        h = self.linear1(x)
        act = (lambda t: F.relu(t) if self.activation == "relu" else F.gelu(t)) if self.act in ("own", "both") else (
            (lambda t: F.gelu(t) if self.activation == "relu" else F.relu(t)) if self.act == "swapped" else
            F.relu if self.act == "relu" else (lambda t: t))
        h = act(h)
        out = self.linear2(self.dropout(h) if self.drop == "hidden" else h)
        out = self.dropout(out) if self.drop == "output" else out
        return act(out) if self.act == "both" else out


def _ff(**mistake):
    return type("WrongFeedForward", (_FF,), mistake)


FF_MISTAKES = {
    "no activation between the two linear layers: the FFN is then one linear map; apply the activation to the "
    "hidden layer, linear2(act(linear1(x)))": _ff(act="none"),
    "the activation is also applied after the second linear layer: FFN(x) = linear2(act(linear1(x))), nothing after linear2": _ff(act="both"),
    "the `activation` argument is ignored (always ReLU): use GELU when activation='gelu'": _ff(act="relu"),
    "the activations are swapped: activation='relu' applies GELU and 'gelu' applies ReLU": _ff(act="swapped"),
    "the dropout is applied to the output (after linear2) instead of the hidden activations: "
    "linear2(dropout(act(linear1(x))))": _ff(drop="output"),
    "no dropout in train() mode: apply self.dropout to the hidden activations, linear2(dropout(act(linear1(x))))": _ff(drop="none"),
}

FF_HINTS = {
    "parameter names differ": "the exercise fixes the parameters: linear1 = nn.Linear(d_model, d_ff) and linear2 = "
    "nn.Linear(d_ff, d_model), with biases, and no other layer with parameters.",
    "size mismatch": "linear1 is nn.Linear(d_model, d_ff) (expand), linear2 nn.Linear(d_ff, d_model) (project back).",
    "unexpected keyword argument": "keep the signature FeedForward(d_model, d_ff, dropout=0.0, activation='relu').",
    "cannot be multiplied": "apply linear1 (d_model -> d_ff) first, then linear2 (d_ff -> d_model).",
}

# --- EncoderLayer ----------------------------------------------------------------------------------------------


class _Enc(ref.EncoderLayer):
    swap = False  # Pre-LN and Post-LN swapped
    invert_mask = False
    no_attn_residual = False
    one_norm = False  # norm1 used for both sub-layers
    norm_at_end = False  # Pre-LN with an extra LayerNorm at the end of every layer
    branch_dropout = True  # False: dropout1/dropout2 left out of the residual branches (seen in train() mode)
    ff_branch_dropout = True  # False: dropout2 left out of the FFN branch only
    attn_dropped_twice = False  # dropout1(dropout1(out)): the attention branch dropped twice
    dropout_after_add = False  # the dropout applied to the sum x + branch instead of the branch alone

    def _attn_branch(self, x, mask):
        out, _ = self.self_attn(x, x, x, mask)
        if self.attn_dropped_twice:
            out = self.dropout1(out)
        return self.dropout1(out) if self.branch_dropout and not self.dropout_after_add else out

    def _ff_branch(self, x):
        out = self.ff(x)
        return self.dropout2(out) if self.branch_dropout and self.ff_branch_dropout and not self.dropout_after_add else out

    def forward(self, x, mask=None):
        if self.invert_mask and mask is not None:
            mask = ~mask
        norm2 = self.norm1 if self.one_norm else self.norm2
        res = 0 if self.no_attn_residual else 1
        d1, d2 = (self.dropout1, self.dropout2) if self.dropout_after_add else ((lambda t: t),) * 2
        if self.norm_first != self.swap:
            x = d1(res * x + self._attn_branch(self.norm1(x), mask))
            x = d2(x + self._ff_branch(norm2(x)))
            if self.norm_at_end:
                x = norm2(x)
        else:
            x = self.norm1(d1(res * x + self._attn_branch(x, mask)))
            x = norm2(d2(x + self._ff_branch(x)))
        return x


def _enc(**mistake):
    return type("WrongEncoderLayer", (_Enc,), mistake)


ENC_MISTAKES = {
    "Pre-LN and Post-LN swapped: norm_first=True normalises the input of each branch, x + attn(norm1(x)); "
    "norm_first=False (the 2017 paper) normalises after the residual add, norm1(x + attn(x))": _enc(swap=True),
    "inverted mask: this EncoderLayer takes the course's masks, True = may attend (nn.TransformerEncoderLayer's "
    "src_key_padding_mask is the opposite, True = ignore); pass the mask on as it is": _enc(invert_mask=True),
    "the residual connection around the attention is missing: add the branch's output to its input x": _enc(no_attn_residual=True),
    "norm1 is used for both sub-layers: the FFN branch has its own LayerNorm, norm2": _enc(one_norm=True),
    "a LayerNorm after the FFN in Pre-LN: the final LayerNorm belongs after the last layer of the stack "
    "(nn.TransformerEncoder's norm), not inside each Pre-LN layer": _enc(norm_at_end=True),
    "no dropout on the residual branches in train() mode: x + dropout1(attn(...)) and x + dropout2(ff(...))": _enc(branch_dropout=False),
    "the FFN branch is not dropped in train() mode: x + dropout2(ff(...)), as the attention branch is x + dropout1(attn(...))":
        _enc(ff_branch_dropout=False),
    "the attention branch is dropped twice (dropout1 applied to its own output): drop each branch once, x + dropout1(attn(...))":
        _enc(attn_dropped_twice=True),
    "the dropout is applied to the residual sum, dropout(x + branch), which also drops the residual stream: "
    "drop the branch only, x + dropout(branch)": _enc(dropout_after_add=True),
}

ENC_HINTS = {
    "parameter names differ": "the exercise fixes the submodules: self_attn = MultiHeadAttention(d_model, n_heads, "
    "dropout=dropout) (the course's, given above), ff = FeedForward(d_model, d_ff, dropout, activation), norm1 and "
    "norm2 = LayerNorm(d_model) (the course's, given above); nn.LayerNorm is switched off while your notebook is graded.",
    "size mismatch": "self_attn is MultiHeadAttention(d_model, n_heads), ff is FeedForward(d_model, d_ff), norm1 and "
    "norm2 are LayerNorm(d_model).",
    "unexpected keyword argument": "keep the signature EncoderLayer(d_model, n_heads, d_ff, dropout=0.0, "
    "norm_first=False, activation='relu') and forward(self, x, mask=None).",
    "values to unpack": "the course's MultiHeadAttention returns (output, weights): keep the output.",
    "must match the size of tensor": "the mask must broadcast to (B, n_heads, T, T): a padding mask is (B, 1, 1, T); "
    "pass it to self_attn as it is.",
}

# --- noam_lr ---------------------------------------------------------------------------------------------------


def _noam(step, d_model, warmup, *, warm_exp=-1.5, use_max=False, d_exp=-0.5):
    if step < 1:
        raise ValueError("step must be >= 1")
    pick = max if use_max else min
    return d_model**d_exp * pick(step**-0.5, step * warmup**warm_exp)


NOAM_MISTAKES = {
    "warmup ** -0.5 instead of warmup ** -1.5 in the warm-up term: the two terms must meet at step = warmup": lambda s, d, w: _noam(s, d, w, warm_exp=-0.5),
    "max instead of min: the schedule is the smaller of the warm-up line and the 1/sqrt(step) decay": lambda s, d, w: _noam(s, d, w, use_max=True),
    "d_model ** 0.5 instead of d_model ** -0.5: the rate shrinks with the model width": lambda s, d, w: _noam(s, d, w, d_exp=0.5),
    "off by one: the formula evaluated at step + 1 (step counts from 1 here; only torch's LambdaLR counts from 0)": lambda s, d, w: _noam(s + 1, d, w),
}

NOAM_HINTS = {
    "ZeroDivisionError": "step = 0 has no learning rate (0 ** -0.5): raise a ValueError for step < 1 before computing.",
}

# --- label_smoothed_cross_entropy ------------------------------------------------------------------------------


def _lsce(logits, target, eps, ignore_index=-100, *, k_minus_1=False, pad_in_mean=False, reduce=True, no_smoothing=False):
    keep = target != ignore_index
    safe = target.masked_fill(~keep, 0)
    K = logits.size(-1)
    one_hot = F.one_hot(safe, K).to(logits.dtype)
    if no_smoothing:
        q = one_hot
    elif k_minus_1:
        q = (1 - eps) * one_hot + eps / (K - 1) * (1 - one_hot)
    else:
        q = (1 - eps) * one_hot + eps / K
    loss = -(q * torch.log_softmax(logits, dim=-1)).sum(-1) * keep
    if not reduce:
        return loss
    return loss.mean() if pad_in_mean else loss.sum() / keep.sum()


LSCE_MISTAKES = {
    "eps spread over the K - 1 wrong classes (the source notes' variant): PyTorch's label_smoothing, and this "
    "exercise, give every class eps / K and the true class 1 - eps + eps / K": lambda l, t, e, i=-100: _lsce(l, t, e, i, k_minus_1=True),
    "padding counted in the mean: divide by the number of real tokens (target != ignore_index), not by N": lambda l, t, e, i=-100: _lsce(l, t, e, i, pad_in_mean=True),
    "no smoothing: the target is the one-hot vector; mix it with the uniform distribution, (1 - eps) * one_hot + eps / K": lambda l, t, e, i=-100: _lsce(l, t, e, i, no_smoothing=True),
}

LSCE_SHAPE_MISTAKES = {
    "one loss per position returned: return their mean over the real tokens, a scalar": lambda l, t, e, i=-100: _lsce(l, t, e, i, reduce=False),
}

LSCE_HINTS = {
    "Class values must be non-negative": "a padding target (ignore_index, e.g. -100) reached F.one_hot: replace those "
    "targets by any valid class first (target.masked_fill(target == ignore_index, 0)) and leave their rows out of the mean.",
    "index -100 is out of bounds": "a padding target (ignore_index) was used as an index: leave those positions out first.",
    "Expected all tensors to be on the same device": "a tensor created on another device: create tensors with "
    "device=logits.device (e.g. torch.zeros(..., device=logits.device)).",
    "Expected a proper Tensor but got": "a tensor created on another device: create tensors with device=logits.device.",
}

# --- inverted_dropout: judged by its properties, not by one random draw ----------------------------------------
# Any honest way to draw the mask is right (rand >= p, rand < 1 - p, bernoulli(1 - p), in float32 or in x's dtype),
# and each draws other numbers from the same generator: so no output is compared with the reference's. Instead each
# entry must be 0 or x / (1 - p), the dropped fraction must be about p, two calls with generators seeded alike must
# agree, training=False and p = 0 give x, p = 1 gives zeros.

def dropout_fraction_tolerance(p, n):
    """How far the dropped fraction of n entries may be from p: 6 standard deviations, at least 0.03 (the hidden
    draws with a generator have 16384 entries: sd <= 0.004; a valid mask fails about once in 10^9 calls)."""
    return max(0.03, 6 * math.sqrt(p * (1 - p) / n))

DROPOUT_SCALES = {  # kept values x * factor(p): the factor a mistake gives instead of 1 / (1 - p)
    "the kept values are not scaled: multiply them by 1 / (1 - p), so that the expectation stays x": lambda p: 1.0,
    "the kept values are multiplied by (1 - p) instead of divided by it": lambda p: 1.0 - p,
    "the kept values are divided by p instead of (1 - p)": lambda p: 1.0 / p,
}

DROPOUT_HINTS = {
    "Expected all tensors to be on the same device": "the mask was made on another device than x: draw it with "
    "device=x.device (or, with a generator, on the generator's device and move it with .to(x.device)).",
    "Expected a 'cpu' device type for generator": "a CPU generator draws on the CPU: draw the mask there "
    "(device=generator.device) and move it to x's device.",
    "unexpected keyword argument 'generator'": "pass the generator to torch.rand(..., generator=generator) (torch.rand_like "
    "takes no generator).",
}


def dropout_verdict(x, y, p, dtype):
    """'' when y is a valid inverted dropout of x (p strictly between 0 and 1), else what is wrong (shared with the
    visible check's logic)."""
    if y.isnan().any():
        return "NaN in the output: divide by (1 - p) only where something is kept"
    kept = y != 0
    ratio = y[kept] / x[kept]
    rtol = 1e-4 if dtype == torch.float32 else 1e-9
    want = 1.0 / (1.0 - p)
    if ratio.numel() and not torch.allclose(ratio, torch.full_like(ratio, want), rtol=rtol, atol=0.0):
        for description, factor in DROPOUT_SCALES.items():
            if torch.allclose(ratio, torch.full_like(ratio, factor(p)), rtol=rtol, atol=0.0):
                return description
        return f"every entry must be 0 (dropped) or x / (1 - p) (kept); some are neither (e.g. {float(ratio[0]):.4g} x for p = {p})"
    dropped = 1.0 - kept.double().mean().item()
    tol = dropout_fraction_tolerance(p, y.numel())
    if abs(dropped - p) > tol:
        if abs(dropped - (1.0 - p)) <= tol:
            return (f"about {dropped:.0%} of the entries are dropped for p = {p}: the mask keeps an entry with probability p "
                    "instead of 1 - p (keep where rand >= p, or draw bernoulli(1 - p))")
        return f"{dropped:.1%} of the entries are dropped for p = {p}: expected about {p:.0%}"
    return ""


def _dropout_plan(seed, device):
    g = generator(seed, "inverted_dropout_hidden")
    calls = []
    for p, shape in ((0.25, (64, 256)), (0.6, (4, 8, 512))):
        x = torch.randn(shape, generator=g, dtype=torch.float64)
        s = int(torch.randint(0, 2**31 - 1, (1,), generator=g))
        for dtype in (torch.float64, torch.float32):
            label = f"x {tuple(shape)}, p = {p}, a generator seeded with {s}, {str(dtype).replace('torch.', '')}"
            calls += [Call(label, (x.to(dtype), p, Seeded(s)), {}, "cpu", dtype) for _ in range(2)]  # twice: same seed
    x = torch.randn(16, 256, generator=g, dtype=torch.float64)
    for dtype in (torch.float64, torch.float32):
        d = str(dtype).replace("torch.", "")
        calls += [
            Call(f"x (16, 256), p = 0.5, no generator, {d}, device {device}", (x.to(dtype), 0.5), {}, device, dtype),
            Call(f"x (16, 256), p = 0.5, training=False, {d}, device {device}", (x.to(dtype), 0.5), {"training": False}, device, dtype),
            Call(f"x (16, 256), p = 0.0, {d}, device {device}", (x.to(dtype), 0.0), {}, device, dtype),
            Call(f"x (16, 256), p = 1.0, {d}, device {device}", (x.to(dtype), 1.0), {}, device, dtype),
        ]
    calls.append(Call("x (16, 256), p = 0.5, on device 'meta'", (x.float(), 0.5), {}, "meta", torch.float32))
    return calls


def _dropout_judge(calls, records, function="inverted_dropout"):
    forbidden = DROPOUT_FORBIDDEN
    results = []
    for call, record in zip(calls, records):
        mixed = isinstance(record, dict) and record.get("device_mix")
        if call.device == "meta" and (mixed or (isinstance(record, dict) and not record.get("ok"))):
            error = str(record.get("error") if isinstance(record, dict) else "")
            if not _forbidden_used(record, forbidden) and (mixed or visible.meta_failure_is_device_mistake(error)):
                where = f" (in {', '.join(map(str, mixed))[:80]})" if mixed else f": {error[:200]}"
                raise AssertionError(
                    f"{function} mixes devices: with x on device 'meta' ({call.label}) a tensor on the CPU meets it{where}.\n"
                    "Likely mistake: the mask is drawn on the CPU and not moved: draw it with device=x.device (or, with a "
                    "generator, on the generator's device and .to(x.device)); on a GPU the same code fails the same way."
                )
            if isinstance(record, dict) and not record.get("ok") and not _forbidden_used(record, forbidden):
                results.append(None)
                continue  # needs values that meta tensors do not have: no device mistake proven
        got = outcome(record, function, call.label, DROPOUT_HINTS, forbidden)
        y = got[0] if got else None
        x = call.args[0]
        if not isinstance(y, Returned):
            raise AssertionError(f"{function} on {call.label}: expected a tensor, got {type(y).__name__}.")
        if tuple(y.shape) != tuple(x.shape):
            raise AssertionError(f"{function} on {call.label}: the output has shape {tuple(y.shape)}, expected x's shape {tuple(x.shape)}.")
        want_dtype = str(call.dtype).replace("torch.", "")
        if y.dtype != want_dtype:
            raise AssertionError(f"{function} on {call.label}: the output is {y.dtype}, expected {want_dtype}: keep x's dtype (no .float()).")
        if y.device.split(":")[0] != call.device.split(":")[0]:
            raise AssertionError(f"{function} on {call.label}: the output is on {y.device}, expected x's device {call.device}: "
                                 "create the mask with device=x.device (or move it there).")
        results.append(y)
        if call.device == "meta":
            continue
        v = y.values.to(call.dtype)
        p = call.args[1]
        if call.kwargs.get("training") is False or p == 0.0:
            if not torch.equal(v, x):
                why = "with training=False dropout is the identity" if call.kwargs.get("training") is False else "with p = 0 nothing is dropped"
                raise AssertionError(f"{function} on {call.label}: {why}: return x unchanged.")
            continue
        if p == 1.0:
            if v.isnan().any():
                raise AssertionError(f"{function} on {call.label}: NaN in the output: with p = 1 every entry is dropped and "
                                     "x / (1 - p) is 0 / 0; return zeros (torch.zeros_like(x)) for p = 1.")
            if (v != 0).any():
                raise AssertionError(f"{function} on {call.label}: with p = 1 every entry is dropped: expected all zeros.")
            continue
        why = dropout_verdict(x, v, p, call.dtype)
        if why:
            raise AssertionError(f"{function} on {call.label}: {why}.")
    for i in range(0, len(calls) - 1):  # the pairs drawn with generators seeded alike
        a, b = calls[i], calls[i + 1]
        if a.label == b.label and any(isinstance(arg, Seeded) for arg in a.args):
            if not torch.equal(results[i].values, results[i + 1].values):
                raise AssertionError(f"{function} on {a.label}: two calls with generators seeded alike gave different masks: "
                                     "draw the mask with generator=generator.")


# --- Hidden checks ---------------------------------------------------------------------------------------------

ALL_GROUPS = ("layer_norm", "cross_entropy", "nll_loss", "transformer_layers")
FORBIDDEN = builtins.forbidden(*ALL_GROUPS)
# Only inverted_dropout forbids dropout: the modules keep their nn.Dropout, which the observers would note even in
# eval(); the guard switches F.dropout off for the whole notebook but lets it return its input where it computes nothing.
DROPOUT_FORBIDDEN = builtins.forbidden(*ALL_GROUPS, "dropout")


def _randn(g, *shape, scale=1.0, shift=0.0):
    return shift + scale * torch.randn(*shape, generator=g)


def _layer_norm_cases(seed):
    g = generator(seed, "layer_norm_hidden")
    return [
        Case("x (2, 5, 12) with mean 3 and std 2, weight and bias (12,)",
             (_randn(g, 2, 5, 12, scale=2.0, shift=3.0), _randn(g, 12), _randn(g, 12))),
        Case("x (4, 6), eps = 0.1", (_randn(g, 4, 6), _randn(g, 6), _randn(g, 6)), {"eps": 0.1}),
        Case("x (3, 2, 4, 8), weight and bias None (no scale, no shift)", (_randn(g, 3, 2, 4, 8, scale=5.0), None, None)),
        Case("x (3, 7) whose row 1 is constant (variance 0: no NaN)",
             (torch.cat([_randn(g, 1, 7), torch.full((1, 7), 2.5), _randn(g, 1, 7)]), _randn(g, 7), _randn(g, 7))),
        Case("large inputs: x (2, 16) with entries about 1000 apart",
             (_randn(g, 2, 16, scale=1000.0, shift=500.0), _randn(g, 16), _randn(g, 16))),
        # each optional argument on its own (nn.LayerNorm(d, bias=False) calls it with a weight and bias=None)
        Case("x (3, 4, 10), weight (10,), bias None (scale, no shift)", (_randn(g, 3, 4, 10), _randn(g, 10), None)),
        Case("x (5, 6), weight None, bias (6,) (shift, no scale)", (_randn(g, 5, 6), None, _randn(g, 6))),
    ]


def _ff_cases(seed):
    g = generator(seed, "FeedForward_hidden")
    return [
        ModuleCase("d_model = 12, d_ff = 48, ReLU, x (2, 5, 12)", {"d_model": 12, "d_ff": 48}, (_randn(g, 2, 5, 12),)),
        ModuleCase("d_model = 8, d_ff = 20, GELU, x (3, 4, 8)", {"d_model": 8, "d_ff": 20, "activation": "gelu"}, (_randn(g, 3, 4, 8),)),
        ModuleCase("eval() with dropout = 0.5 (nothing dropped at inference), d_model = 6, d_ff = 16, x (1, 7, 6)",
                   {"d_model": 6, "d_ff": 16, "dropout": 0.5}, (_randn(g, 1, 7, 6),)),
        ModuleCase("train() with dropout = 0.0, d_model = 10, d_ff = 24, GELU, x (2, 3, 10)",
                   {"d_model": 10, "d_ff": 24, "activation": "gelu"}, (_randn(g, 2, 3, 10),), train=True),
        # train() with dropout: the grader's seeded masks, the same for the reference (runner.seeded_dropout)
        ModuleCase("train() with dropout = 0.5 (the grader's dropout masks), d_model = 8, d_ff = 24, x (2, 5, 8)",
                   {"d_model": 8, "d_ff": 24, "dropout": 0.5}, (_randn(g, 2, 5, 8),), train=True),
    ]


def _enc_cases(seed):
    g = generator(seed, "EncoderLayer_hidden")
    lengths = torch.tensor([6, 4, 2])
    padding = (torch.arange(6)[None, :] < lengths[:, None])[:, None, None, :]  # (3, 1, 1, 6) True = may attend
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    return [
        ModuleCase("Post-LN (norm_first=False), d_model = 12, 3 heads, d_ff = 20, x (2, 5, 12), no mask",
                   {"d_model": 12, "n_heads": 3, "d_ff": 20}, (_randn(g, 2, 5, 12),)),
        ModuleCase("Post-LN (norm_first=False), d_model = 8, 2 heads, d_ff = 16, x (3, 6, 8), padding mask (3, 1, 1, 6) "
                   "with lengths 6, 4, 2", {"d_model": 8, "n_heads": 2, "d_ff": 16}, (_randn(g, 3, 6, 8),), {"mask": padding}),
        ModuleCase("Pre-LN (norm_first=True), d_model = 8, 2 heads, d_ff = 16, GELU, x (3, 6, 8), padding mask (3, 1, 1, 6) "
                   "with lengths 6, 4, 2", {"d_model": 8, "n_heads": 2, "d_ff": 16, "norm_first": True, "activation": "gelu"},
                   (_randn(g, 3, 6, 8),), {"mask": padding}),
        ModuleCase("Pre-LN (norm_first=True), d_model = 16, 4 heads, d_ff = 32, dropout = 0.3 in eval(), x (2, 5, 16), "
                   "causal mask (5, 5)", {"d_model": 16, "n_heads": 4, "d_ff": 32, "dropout": 0.3, "norm_first": True},
                   (_randn(g, 2, 5, 16),), {"mask": causal}),
        ModuleCase("Post-LN, train() with dropout = 0.4 (the grader's dropout masks), d_model = 8, 2 heads, d_ff = 16, "
                   "x (3, 6, 8), padding mask (3, 1, 1, 6)", {"d_model": 8, "n_heads": 2, "d_ff": 16, "dropout": 0.4},
                   (_randn(g, 3, 6, 8),), {"mask": padding}, train=True),
        ModuleCase("Pre-LN, train() with dropout = 0.4 (the grader's dropout masks), d_model = 8, 2 heads, d_ff = 16, "
                   "x (2, 5, 8), causal mask (5, 5)", {"d_model": 8, "n_heads": 2, "d_ff": 16, "dropout": 0.4, "norm_first": True},
                   (_randn(g, 2, 5, 8),), {"mask": causal}, train=True),
    ]


def _noam_cases(seed):
    g = generator(seed, "noam_lr_hidden")
    warmup = int(torch.randint(50, 500, (1,), generator=g))
    d_model = 8 * int(torch.randint(8, 128, (1,), generator=g))
    steps = [1, 2, warmup - 1, warmup, warmup + 1, 10 * warmup + int(torch.randint(1, 100, (1,), generator=g))]
    cases = [Case(f"noam_lr({s}, d_model={d_model}, warmup={warmup})", (s, d_model, warmup)) for s in steps]
    cases += [Case("noam_lr(4000, 512, 4000) (the paper's peak)", (4000, 512, 4000)),
              Case("noam_lr(0, 512, 4000)", (0, 512, 4000), raises=ValueError,
                   why="step = 0 has no learning rate (0 ** -0.5 is infinite): the schedule starts at step 1")]
    return cases


def _lsce_cases(seed):
    g = generator(seed, "label_smoothed_cross_entropy_hidden")
    t1 = torch.randint(7, (9,), generator=g)
    t2 = torch.randint(5, (8,), generator=g)
    t2[[2, 5, 6]] = -100  # padding
    t3 = torch.randint(1, 11, (10,), generator=g)
    t3[[0, 7]] = 0  # padding with ignore_index = 0 (the pad token's id)
    return [
        Case("logits (9, 7), eps = 0.1, no padding", (_randn(g, 9, 7, scale=3.0), t1, 0.1)),
        Case("logits (8, 5), eps = 0.2, three targets = -100 (padding)", (_randn(g, 8, 5, scale=2.0), t2, 0.2)),
        Case("logits (10, 11), eps = 0.1, ignore_index = 0, two padding targets",
             (_randn(g, 10, 11, scale=2.0), t3, 0.1), {"ignore_index": 0}),
        Case("logits (6, 4), eps = 0.0 (plain cross-entropy)", (_randn(g, 6, 4), torch.randint(4, (6,), generator=g), 0.0)),
        Case("large logits (about 100): logits (5, 6), eps = 0.1", (_randn(g, 5, 6, scale=100.0), torch.randint(6, (5,), generator=g), 0.1)),
    ]


CHECKS = {
    "layer_norm_hidden": function_check(
        ref.layer_norm, _layer_norm_cases, ("y",), LAYER_NORM_MISTAKES, LAYER_NORM_HINTS, FORBIDDEN,
        categories=("values", "dtype", "device"),
    ),
    "FeedForward_hidden": module_check(
        ref.FeedForward, _ff_cases, ("output",), FF_MISTAKES, FF_HINTS, FORBIDDEN, salt="FeedForward_hidden",
        categories=("values", "weights"),
    ),
    "EncoderLayer_hidden": module_check(
        ref.EncoderLayer, _enc_cases, ("output",), ENC_MISTAKES, ENC_HINTS, FORBIDDEN, callees=("layer_norm", "FeedForward.forward"),
        salt="EncoderLayer_hidden", categories=("values", "weights"),
    ),
    "noam_lr_hidden": function_check(
        ref.noam_lr, _noam_cases, ("lr",), NOAM_MISTAKES, NOAM_HINTS, FORBIDDEN, meta=False, dtypes=None,
        categories=("values",),
    ),
    "label_smoothed_cross_entropy_hidden": function_check(
        ref.label_smoothed_cross_entropy, _lsce_cases, ("loss",), LSCE_MISTAKES, LSCE_HINTS, FORBIDDEN,
        shape_mistakes=LSCE_SHAPE_MISTAKES, categories=("values", "shape", "device"),
    ),
    "inverted_dropout_hidden": Check("inverted_dropout", _dropout_plan, _dropout_judge, DROPOUT_FORBIDDEN,
                                     categories=("values", "dtype", "device", "generator")),
}

# Names whose appearance in a solution cell's code earns no points (read by autograder.grading.shortcuts, never run).
# A bare LayerNorm(d_model) is the course's class given in the notebook; nn.LayerNorm is refused.
SHORTCUT_NAMES = builtins.shortcut_names(*ALL_GROUPS, "dropout")


# --- Builder helpers (the visible checks of noam_lr compare a table of learning rates) --------------------------


def noam_table(fn):
    """fn(step, d_model, warmup) for a list of steps, as a float64 tensor (for the builder's literal() and mistakes())."""

    def table(steps, d_model, warmup):
        return torch.tensor([float(fn(s, d_model, warmup)) for s in steps], dtype=torch.float64)

    return table


NOAM_TABLE_MISTAKES = {description: noam_table(fn) for description, fn in NOAM_MISTAKES.items()}

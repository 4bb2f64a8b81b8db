"""Checks for chapter 06-positional-encoding.

- *_MISTAKES: the typical wrong implementations, used to name a learner's mistake (functions for sinusoidal_pe,
  rotation_matrix and apply_rope; for PositionalEncoding, wrong nn.Module classes). The builder evaluates them on
  the visible-check inputs, the hidden checks on grading-time inputs.
- FORBIDDEN / SHORTCUT_NAMES: empty, on purpose. No torch built-in computes a sinusoidal table, a rotation
  matrix or RoPE, so there is nothing to forbid there (torch.block_diag, torch.polar, view_as_complex and
  einsum are honest ways to write them). PositionalEncoding's dropout is not forbidden either: with a
  generator it cannot be a one-liner (nn.Dropout and F.dropout take no generator, so the kept entries must be
  drawn by hand, exactly as the exercise says), and without one nn.Dropout is what the layer should use
  (chapter 08's model calls it so). Forbidding the dropout group would only switch off the learner's honest
  nn.Dropout in train() mode while adding nothing the exact comparison does not already check.
- alibi_bias is graded with the course's alibi_slopes given in a read-only cell (the slope recipe for head counts
  that are not powers of two is the paper's bookkeeping, not the idea).
- CHECKS: the hidden check of each graded cell, by grade id (run in this process by checks.run_check).

Tables and rotations are functions of sizes: sinusoidal_pe and rotation_matrix are called once per case as
given (dtypes=None), with dtype=torch.float32 and torch.float64 cases and `Dev()` as their device (then once
on 'meta'). The angles are computed in float64 in the reference: the float64 cases catch a table computed
in float32 (lost precision), and the long table (positions in the tens of thousands) catches float32 angles
even when the result is float32. rotation_matrix is also checked by its defining property,
M(k) @ PE[pos] = PE[pos + k], on positions drawn at grading time; apply_rope by its own, a score of a rotated
query and key that depends only on their offset.
"""

import torch

from autograder.checks import builtins
from autograder.checks import (
    TOLERANCES, Case, Dev, ModuleCase, Returned, Seeded, build_reference_module, function_check, generator, judge_calls, module_check,
)
from solutions import ch06_positional_encoding as ref

# --- Build-time helpers of the notebook's visible checks ----------------------------------------------


def with_generator(fn, seed):
    """fn called with generator=torch.Generator().manual_seed(seed), a fresh one per call (so that the reference
    and every mistake of mistakes() draw the same numbers)."""

    def run(*args, **kwargs):
        return fn(*args, **kwargs, generator=torch.Generator().manual_seed(seed))

    return run


def with_generators(catalogue, seed):
    return {description: with_generator(fn, seed) for description, fn in catalogue.items()}


def in_float64(fn):
    """fn called with dtype=torch.float64 (mistakes() keeps a `dtype` argument of its own)."""

    def run(*args, **kwargs):
        return fn(*args, **kwargs, dtype=torch.float64)

    return run


def all_in_float64(catalogue):
    return {description: in_float64(fn) for description, fn in catalogue.items()}


# --- Known mistakes: sinusoidal_pe ----------------------------------------------------------------


def _pe_variant(max_len, d_model, base=10000.0, *, dtype=torch.float32, device=None, halves=False, i_not_2i=False,
                start=0, compute=torch.float64, swap=False, stacked=False):
    """The sinusoidal table with one typical mistake."""
    pairs = torch.arange(d_model // 2, dtype=compute, device=device)  # i = 0 .. d/2 - 1
    exponent = pairs / d_model if i_not_2i else 2 * pairs / d_model
    omega = base ** -exponent  # (d/2,)
    pos = torch.arange(start, start + max_len, dtype=compute, device=device)  # (max_len,)
    angles = pos[:, None] * omega  # (max_len, d/2)
    first, second = (torch.cos(angles), torch.sin(angles)) if swap else (torch.sin(angles), torch.cos(angles))
    if halves:
        pe = torch.cat([first, second], dim=-1)
    elif stacked:
        pe = torch.stack([first, second], dim=-1)  # (max_len, d/2, 2): not flattened
    else:
        pe = torch.stack([first, second], dim=-1).flatten(-2)
    return pe.to(dtype)


SINUSOIDAL_MISTAKES = {
    "sines and cosines concatenated in two halves (all sines, then all cosines): the paper interleaves them, "
    "PE[pos, 2i] = sin and PE[pos, 2i+1] = cos of the same angle": lambda *a, **k: _pe_variant(*a, **k, halves=True),
    "the exponent uses i instead of 2i: omega_i = base^(-2i / d_model), where 2i is the even dimension "
    "(0, 2, 4, ...) of pair i": lambda *a, **k: _pe_variant(*a, **k, i_not_2i=True),
    "sine and cosine swapped: the even dimension 2i holds the sine, the odd one 2i+1 the cosine":
        lambda *a, **k: _pe_variant(*a, **k, swap=True),
    "positions start at 1: the first row is position 0 (sin 0 = 0, cos 0 = 1)": lambda *a, **k: _pe_variant(*a, **k, start=1),
    "the angles pos * omega are computed in float32: for positions in the thousands they lose digits (a float32 "
    "number near 5000 is only exact to about 0.0005). Compute them in float64 and cast the table to `dtype` at "
    "the end": lambda *a, **k: _pe_variant(*a, **k, compute=torch.float32),
}

SINUSOIDAL_SHAPE_MISTAKES = {
    "the sines and cosines are stacked into (max_len, d_model // 2, 2) but not flattened: .flatten(-2) (or "
    ".reshape(max_len, d_model)) interleaves them into (max_len, d_model)": lambda *a, **k: _pe_variant(*a, **k, stacked=True),
}

DEVICE_HINTS = {
    "is not on the expected device": "a tensor created on the CPU next to one on another device: pass device=... when you create it.",
    "Expected all tensors to be on the same device": "a tensor created on the CPU next to one on another device: pass device=... when you create it.",
}

SINUSOIDAL_HINTS = {
    "must match the size": "each of the sin and cos halves has d_model // 2 columns, one per pair i: "
    "pe[:, 0::2] = sin(angles) and pe[:, 1::2] = cos(angles) with angles of shape (max_len, d_model // 2).",
    "unexpected keyword argument": "keep the signature sinusoidal_pe(max_len, d_model, base=10000.0, *, dtype=torch.float32, device=None).",
    **DEVICE_HINTS,
}

# --- Known mistakes: PositionalEncoding (wrong classes, no parameters) ----------------------------------


class _PE(ref.PositionalEncoding):
    """The reference layer, with a forward that can make each typical mistake (class attributes)."""

    seq_first = False  # the table sliced with x.size(0) (the batch) and broadcast along the sequence
    scaled = True
    drop_in_eval = False
    drop_before_adding = False  # only x is dropped, the encoding added after the dropout
    table_in_float32 = False  # the table made in float32 (sinusoidal_pe's default), rows cast to x's dtype

    def forward(self, x, generator=None):
        if self.seq_first:
            added = self.pe[: x.size(0)].to(x.dtype)[:, None, :]  # (batch, 1, d): row b added to sentence b
        else:
            rows = self.pe[: x.size(1)]
            added = (rows.float() if self.table_in_float32 else rows).to(x.dtype)
        y = x + added
        p = self.dropout.p
        if generator is None or p == 0.0 or not (self.training or self.drop_in_eval):
            return y if not self.training else self.dropout(y)
        keep = torch.rand(y.shape, generator=generator) >= p
        if self.drop_before_adding:
            return x * keep.to(y.device) * (1.0 / (1.0 - p) if self.scaled else 1.0) + added
        return y * keep.to(y.device) * (1.0 / (1.0 - p) if self.scaled else 1.0)


def _pe_class(**mistake):
    return type("WrongPositionalEncoding", (_PE,), mistake)


PE_MISTAKES = {
    "the table is sliced with x.size(0), the BATCH size, and broadcast along the sequence (the seq-first layer of "
    "note 000 §6): every word of sentence b gets PE[b]. For batch-first input slice self.pe[:x.size(1)] and let it "
    "broadcast over the batch": _pe_class(seq_first=True),
    "the kept entries are not scaled by 1 / (1 - p): inverted dropout divides them by 1 - p, so that the expected "
    "output is x + PE": _pe_class(scaled=False),
    "dropout is applied in eval() mode too: after .eval() (self.training is False) the layer must only add the "
    "encoding": _pe_class(drop_in_eval=True),
    "only x is dropped, the encoding added after the dropout: drop the sum, dropout(x + PE)": _pe_class(drop_before_adding=True),
    "the table is made in float32 (sinusoidal_pe's default dtype): make it in float64, sinusoidal_pe(max_len, d_model, "
    "dtype=torch.float64), and cast the rows to x's dtype, so that a float64 x gets every digit": _pe_class(table_in_float32=True),
}

DRAWS = ("dropout drops entries and scales the kept ones, but not the entries the generator decides: draw "
         "keep = torch.rand(y.shape, generator=generator) >= p, on the CPU (where the generator is) and in the "
         "default float32, then move it with keep.to(y.device). nn.Dropout cannot take a generator, and another "
         "draw (torch.bernoulli, u < 1 - p, a float64 rand, one mask for the whole batch) keeps other entries")

PE_HINTS = {
    "parameter names differ": "the sinusoidal table is fixed, not trained: register it with self.register_buffer('pe', ...), "
    "not as an nn.Parameter (the layer has no parameters).",
    "unexpected keyword argument 'generator'": "forward takes an optional generator: def forward(self, x, generator=None).",
    "unexpected keyword argument": "keep the signature PositionalEncoding(d_model, max_len=5000, dropout=0.0).",
    "Expected a 'cuda' device type for generator": "the generator lives on the CPU: draw torch.rand(y.shape, generator=generator) "
    "on the CPU (no device=...), then move the mask with .to(y.device).",
    "must match the size of tensor": "x is batch-first, (batch, seq, d_model): the table rows to add are self.pe[:x.size(1)], "
    "one per position, broadcast over the batch.",
    **DEVICE_HINTS,
}

# --- Known mistakes: rotation_matrix ------------------------------------------------------------------


def _rotation_variant(k, d_model, base=10000.0, *, dtype=torch.float32, device=None, transposed=False):
    m = ref.rotation_matrix(k, d_model, base, dtype=torch.float64, device=device)
    return (m.T if transposed else m).to(dtype)


ROTATION_MISTAKES = {
    "the blocks rotate by -k (the matrix is the transpose of M_k): M_k @ PE[pos] then gives PE[pos - k]. Each block "
    "is [[cos, sin], [-sin, cos]] of k * omega_i": lambda *a, **k: _rotation_variant(*a, **k, transposed=True),
}

ROTATION_HINTS = {
    "unexpected keyword argument": "keep the signature rotation_matrix(k, d_model, base=10000.0, *, dtype=torch.float32, device=None).",
    **DEVICE_HINTS,
}

# --- Known mistakes: apply_rope -----------------------------------------------------------------------


def _rope_variant(x, positions=None, base=10000.0, halves=False, negative=False, angle_dtype=torch.float64, omega_in_x_dtype=False):
    d = x.size(-1)
    omega = ref.inverse_frequencies(d, base, device=x.device)
    omega = omega.to(x.dtype).to(angle_dtype) if omega_in_x_dtype else omega.to(angle_dtype)
    if positions is None:
        positions = torch.arange(x.size(-2), device=x.device)
    angles = positions.to(angle_dtype)[..., None] * omega * (-1 if negative else 1)
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    if halves:
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


ROPE_MISTAKES = {
    "dimension i is paired with i + d/2 (the two halves, as some libraries do): this exercise pairs neighbours, "
    "(2i, 2i+1), as the RoFormer paper and sinusoidal_pe do": lambda x, positions=None, base=10000.0: _rope_variant(x, positions, base, halves=True),
    "each pair is rotated by -pos * omega_i (the transposed rotation): rotate by +pos * omega_i, "
    "(x1 cos - x2 sin, x1 sin + x2 cos)": lambda x, positions=None, base=10000.0: _rope_variant(x, positions, base, negative=True),
    "the angles pos * omega_i are computed in float32: at large positions they lose digits (about 0.001 rad at "
    "position 15000); compute them in float64 and cast cos and sin to x.dtype":
        lambda x, positions=None, base=10000.0: _rope_variant(x, positions, base, angle_dtype=torch.float32),
    "the frequencies omega_i are rounded to x's dtype (float32) before the angles are formed: at positions near "
    "1 000 000 that is about 0.01 rad; keep omega in float64 until cos and sin are cast to x.dtype":
        lambda x, positions=None, base=10000.0: _rope_variant(x, positions, base, omega_in_x_dtype=True),
}

ROPE_HINTS = {
    "must match the size": "the angles have shape (..., seq, d/2), one per pair: positions[..., None] * omega, with positions "
    "broadcastable to x.shape[:-1] (e.g. (seq,) or (batch, 1, seq) for (batch, heads, seq, d) input).",
    "to have the same dtype": "keep x's dtype: cast cos and sin to x.dtype before multiplying.",
    **DEVICE_HINTS,
}

# --- Known mistakes: alibi_bias -------------------------------------------------------------------------


def _alibi_variant(n_heads, q_len, k_len=None, *, device=None, sign=-1, reverse=False, start=False, signed=False):
    k_len = q_len if k_len is None else k_len
    first = 0 if start else k_len - q_len
    q_pos = torch.arange(first, first + q_len, device=device)[:, None]
    k_pos = torch.arange(k_len, device=device)[None, :]
    distance = (q_pos - k_pos).double() if signed else (q_pos - k_pos).abs().double()
    slopes = ref.alibi_slopes(n_heads).double().to(device)
    slopes = slopes.flip(0) if reverse else slopes
    return (sign * slopes[:, None, None] * distance).float()


ALIBI_MISTAKES = {
    "the bias has the wrong sign: ALiBi SUBTRACTS slope * |i - j|, so that distant keys get lower scores":
        lambda *a, **k: _alibi_variant(*a, **k, sign=1),
    "the slopes are in the wrong order: head 0 gets the first (steepest) slope, alibi_slopes(n_heads)[0]":
        lambda *a, **k: _alibi_variant(*a, **k, reverse=True),
    "the queries are aligned with the START of the keys: with fewer queries than keys they are the LAST q_len positions, "
    "k_len - q_len + i": lambda *a, **k: _alibi_variant(*a, **k, start=True),
    "the distance is signed (i - j): the penalty is slope * |i - j|, the same for a key before or after the query":
        lambda *a, **k: _alibi_variant(*a, **k, signed=True),
}

ALIBI_HINTS = {
    "unexpected keyword argument": "keep the signature alibi_bias(n_heads, q_len, k_len=None, *, device=None).",
    **DEVICE_HINTS,
}

# --- Hidden checks --------------------------------------------------------------------------------

FORBIDDEN = builtins.forbidden()  # nothing: see the module docstring


def _sinusoidal_cases(seed):
    g = generator(seed, "sinusoidal_pe_hidden")

    def draw(lo, hi):
        return int(torch.randint(lo, hi, (), generator=g))

    d1, d2 = 2 * draw(3, 9), 2 * draw(10, 33)  # 6..16 and 20..64, even
    n1, n2 = draw(5, 30), draw(40, 120)
    far = draw(12_000, 20_000)  # with d_model = 32 pairs 1-3 turn by 0.56, 0.32, 0.18 rad a position: large angles
    return [
        Case(f"sinusoidal_pe({n1}, {d1}, dtype=torch.float64)", (n1, d1), {"dtype": torch.float64, "device": Dev()}),
        Case(f"sinusoidal_pe({n2}, {d2}) (float32)", (n2, d2), {"device": Dev()}),
        Case(f"sinusoidal_pe({n2}, {d1}, base=100.0, dtype=torch.float64)", (n2, d1, 100.0), {"dtype": torch.float64, "device": Dev()}),
        Case("sinusoidal_pe(1, 2, dtype=torch.float64) (one position, one pair)", (1, 2), {"dtype": torch.float64, "device": Dev()}),
        Case(f"a long table: sinusoidal_pe({far}, 32) (float32, positions in the tens of thousands)", (far, 32), {"device": Dev()}),
        Case(f"an odd d_model: sinusoidal_pe(10, {d1 + 1})", (10, d1 + 1), {"device": Dev()}, raises=ValueError,
             why="an odd d_model cannot be split into (sin, cos) pairs: raise a ValueError that says so"),
    ]


PE_SALT = "PositionalEncoding_hidden"


def _pe_cases(seed):
    g = generator(seed, "PositionalEncoding_hidden/inputs")

    def r(*shape):
        return torch.randn(*shape, generator=g)

    def seeded():
        return Seeded(int(torch.randint(0, 2**31 - 1, (), generator=g)))

    return [
        ModuleCase("eval(), d_model = 16, max_len = 32, x (3, 7, 16)", {"d_model": 16, "max_len": 32}, (r(3, 7, 16),)),
        ModuleCase("eval(), batch 1, a sequence as long as the table: d_model = 8, max_len = 10, x (1, 10, 8)",
                   {"d_model": 8, "max_len": 10}, (r(1, 10, 8),)),
        ModuleCase("eval() with dropout = 0.5 (nothing dropped in eval), d_model = 12, x (4, 5, 12), a generator given",
                   {"d_model": 12, "max_len": 20, "dropout": 0.5}, (r(4, 5, 12),), {"generator": seeded()}),
        ModuleCase("train() with dropout = 0.25 and a generator, d_model = 16, x (3, 9, 16)",
                   {"d_model": 16, "max_len": 64, "dropout": 0.25}, (r(3, 9, 16),), {"generator": seeded()}, train=True),
        ModuleCase("train() with dropout = 0.6 and a generator, d_model = 6, x (2, 4, 6)",
                   {"d_model": 6, "max_len": 8, "dropout": 0.6}, (r(2, 4, 6),), {"generator": seeded()}, train=True),
        ModuleCase("train() with dropout = 0.0 and a generator (nothing dropped), d_model = 8, x (2, 3, 8)",
                   {"d_model": 8, "max_len": 16, "dropout": 0.0}, (r(2, 3, 8),), {"generator": seeded()}, train=True),
        # a layer used on inputs of another dtype than it was converted to: the output is x's dtype (the rows
        # added are cast to x.dtype), not the table's
        ModuleCase("eval(), d_model = 8, max_len = 16, a float32 x (2, 6, 8) whatever the layer's dtype",
                   {"d_model": 8, "max_len": 16}, (r(2, 6, 8),), input_dtype=torch.float32),
    ]


def _draws_as_asked(call, record, got, expected):
    """A train() call with a generator whose result is a right inverted dropout of x + PE (each entry 0 or
    (x + PE) / (1 - p)) but not the reference's: the mask was drawn another way (or without the generator)."""
    module = call.module or {}
    p = float(module.get("init", {}).get("dropout", 0.0))
    if not module.get("train") or p == 0.0 or call.device == "meta" or "generator" not in call.kwargs:
        return
    g, e = got[0] if got else None, expected[0]
    if not isinstance(g, Returned) or g.values is None or g.shape != tuple(e.shape):
        return
    values = g.values.to(e.dtype)
    tolerance = TOLERANCES[call.dtype]
    if torch.allclose(values, e, **tolerance):
        return
    (x,), _ = call.inputs()
    y = x + ref.sinusoidal_pe(x.size(1), x.size(2), dtype=torch.float64).to(x.dtype)
    if bool(((values == 0) | torch.isclose(values, y / (1 - p), **tolerance)).all()):
        raise AssertionError(f"PositionalEncoding on {call.label}: {DRAWS}.")


def _float64_kept(function, what):
    """extra(): a float64 result that is right to float32 accuracy only. Functions of sizes are called with
    dtypes=None, where the judge compares with float32 tolerances whatever the result's dtype; a float64 table
    must be right to float64 accuracy (the angles computed in float64, not in float32 and cast)."""

    def extra(call, record, got, expected):
        g, e = got[0] if got else None, expected[0]
        if call.device == "meta" or e.dtype != torch.float64 or not isinstance(g, Returned) or g.values is None:
            return
        if g.shape != tuple(e.shape) or g.dtype != "float64":
            return
        values = g.values.double()
        if torch.allclose(values, e, **TOLERANCES[torch.float32]) and not torch.allclose(values, e, **TOLERANCES[torch.float64]):
            raise AssertionError(
                f"{function} on {call.label}: the float64 result is right to float32 accuracy only (largest difference "
                f"{(values - e).abs().max().item():.2g}). Compute {what} in float64 and cast the result to `dtype` at the end "
                "(not in float32 and cast back).")

    return extra


def _both(*extras):
    def extra(call, record, got, expected):
        for check in extras:
            check(call, record, got, expected)

    return extra


def _rotation_cases(seed):
    g = generator(seed, "rotation_matrix_hidden")
    d1, d2 = 2 * int(torch.randint(2, 6, (), generator=g)), 2 * int(torch.randint(8, 20, (), generator=g))
    k1, k2 = int(torch.randint(1, 40, (), generator=g)), int(torch.randint(100, 3000, (), generator=g))
    return [
        Case(f"rotation_matrix({k1}, {d1}, dtype=torch.float64)", (k1, d1), {"dtype": torch.float64, "device": Dev()}),
        Case(f"rotation_matrix({k2}, {d2}) (float32)", (k2, d2), {"device": Dev()}),
        Case(f"rotation_matrix(-{k1}, {d2}, dtype=torch.float64) (a negative offset)", (-k1, d2), {"dtype": torch.float64, "device": Dev()}),
        Case(f"rotation_matrix(2.5, {d1}, base=500.0, dtype=torch.float64) (a fractional offset)", (2.5, d1, 500.0),
             {"dtype": torch.float64, "device": Dev()}),
        Case("rotation_matrix(0, 6, dtype=torch.float64) (no shift: the identity)", (0, 6), {"dtype": torch.float64, "device": Dev()}),
    ]


def _shift_property(call, record, got, expected):
    """M(k) @ PE[pos] = PE[pos + k] on positions drawn at grading time (the matrix's defining property)."""
    if call.device == "meta":
        return
    g, e = got[0] if got else None, expected[0]
    if not isinstance(g, Returned) or g.values is None or g.shape != tuple(e.shape):
        return
    k, d = call.args[0], call.args[1]
    base = call.args[2] if len(call.args) > 2 else 10000.0
    draw = generator(call.grad_seed, "rotation_matrix_hidden/positions")
    positions = torch.randint(0, 5000, (6,), generator=draw).double()
    omega = ref.inverse_frequencies(d, base)
    angles = positions[:, None] * omega  # (6, d/2)
    pe = torch.stack([torch.sin(angles), torch.cos(angles)], dim=-1).flatten(-2)  # (6, d) PE[pos]
    shifted = torch.stack([torch.sin(angles + k * omega), torch.cos(angles + k * omega)], dim=-1).flatten(-2)  # PE[pos + k]
    m = g.values.double()
    tolerance = TOLERANCES[e.dtype]
    if torch.allclose(pe @ m.T, shifted, **tolerance):
        return
    shown = ", ".join(str(int(p)) for p in positions[:3])
    if torch.allclose(pe @ m, shifted, **tolerance):
        raise AssertionError(
            f"rotation_matrix on {call.label}: M @ PE[pos] is PE[pos - k], not PE[pos + k] (at pos = {shown}, ...): the blocks "
            "rotate by -k (the matrix is the transpose of M_k). Each block is [[cos, sin], [-sin, cos]] of k * omega_i.")
    raise AssertionError(f"rotation_matrix on {call.label}: M @ PE[pos] is not PE[pos + k] (checked at pos = {shown}, ...).")


ROPE_PROPERTY = "the same query q and key k at every position"


def _rope_cases(seed):
    g = generator(seed, "apply_rope_hidden")

    def r(*shape):
        return torch.randn(*shape, generator=g)

    start = int(torch.randint(0, 50, (), generator=g))  # small positions: float32 angles stay within tolerance
    d = 2 * int(torch.randint(4, 9, (), generator=g))  # 8..16
    qk = torch.stack([r(d).expand(10, d), r(d).expand(10, d)])  # (2, 10, d): x[0] = q, x[1] = k at positions ...
    return [
        Case("x (5, 8), default positions 0..4", (r(5, 8),)),
        Case("queries (2, 3, 6, 12) (batch, heads, seq, d_k), default positions", (r(2, 3, 6, 12),)),
        Case(f"x (2, 4, 7, {d}) with positions (2, 1, 7) (each sentence its own positions, shared by the heads)",
             (r(2, 4, 7, d), torch.randint(0, 100, (2, 1, 7), generator=g))),
        Case(f"{ROPE_PROPERTY}: x (2, 10, {d}), x[0] = q and x[1] = k repeated, positions {start}..{start + 9}",
             (qk, torch.arange(start, start + 10))),
        Case("x (6, 6), base = 100.0, positions 3..8", (r(6, 6), torch.arange(3, 9)), {"base": 100.0}),
        # large positions: float32 angles lose digits there (the exercise asks for float64 angles)
        Case("x (1, 6, 32) at large positions 15000..15005", (r(1, 6, 32), torch.arange(15_000, 15_006))),
        # a long context: frequencies rounded to float32 (then multiplied in float64) are off by about 0.01 rad here
        Case("x (1, 4, 16) at very large positions 1000000..1000003", (r(1, 4, 16), torch.arange(1_000_000, 1_000_004))),
    ]


def _relative_property(call, record, got, expected):
    """apply_rope(q, m) · apply_rope(k, n) depends only on n - m (on the case built for it)."""
    if call.device == "meta" or not call.label.startswith(ROPE_PROPERTY):
        return
    g, e = got[0] if got else None, expected[0]
    if not isinstance(g, Returned) or g.values is None or g.shape != tuple(e.shape):
        return
    out = g.values.double()
    scores = out[0] @ out[1].T  # (10, 10): query at position m, key at position n
    spread = max((torch.diagonal(scores, o).max() - torch.diagonal(scores, o).min()).item() for o in range(-9, 10))
    size = scores.abs().max().item()
    if spread > 1e-3 * max(size, 1.0) if call.dtype == torch.float32 else spread > 1e-8 * max(size, 1.0):
        raise AssertionError(
            f"apply_rope on {call.label}: the scores apply_rope(q, m) · apply_rope(k, n) should depend only on the offset "
            f"n - m (the point of RoPE), but along one diagonal n - m = const they differ by {spread:.3g}. Each pair must be "
            "rotated (not scaled or reflected) by the angle position * omega_i.")


def _module_check_with(extra, reference_cls, cases_fn, names, mistakes, error_hints, forbidden, callees=(), **options):
    """module_check, with a further check of each call (`extra`, its own message) besides module_check's own
    (the weights kept): module_check takes no extra of its own."""
    check = module_check(reference_cls, cases_fn, names, mistakes, error_hints, forbidden, callees=callees, **options)
    reference_call = check.reference_call

    def run_class(cls, call, inputs=None):
        module = build_reference_module(cls, call)
        args, kwargs = inputs or call.inputs()
        if call.device == "meta":
            module.to("meta")
        return module(*args, **kwargs)

    def judge(calls, records, function=reference_cls.__name__):
        judge_calls(calls, records, function, names, reference_call, mistakes, error_hints, forbidden, run_class, extra, tuple(callees))

    check.judge = judge
    return check


_PE_CHECK = _module_check_with(
    _draws_as_asked, ref.PositionalEncoding, _pe_cases, ("output",), PE_MISTAKES, PE_HINTS, FORBIDDEN, callees=("sinusoidal_pe",),
    salt=PE_SALT, categories=("values", "device", "generator"),
)
# callees: the layer calls sinusoidal_pe(max_len, d_model, dtype=torch.float64) in __init__ (on the CPU, before the grader
# moves the module): the judge composes the reference layer with the table the learner's function returned, so a wrong
# table costs points in sinusoidal_pe_hidden only.

def _alibi_cases(seed):
    g = generator(seed, "alibi_bias_hidden")
    n = int(torch.randint(3, 9, (), generator=g))
    k = n + int(torch.randint(2, 6, (), generator=g))
    return [
        Case(f"alibi_bias(8, {n})", (8, n), {"device": Dev()}),
        Case(f"alibi_bias(12, {n}) (12 heads: not a power of two)", (12, n), {"device": Dev()}),
        Case(f"alibi_bias(4, {n}, {k}) (fewer queries than keys, as with a cache)", (4, n, k), {"device": Dev()}),
        Case(f"alibi_bias(2, 1, {k}) (one query, the last position)", (2, 1, k), {"device": Dev()}),
    ]


CHECKS = {
    "sinusoidal_pe_hidden": function_check(
        ref.sinusoidal_pe, _sinusoidal_cases, ("pe",), SINUSOIDAL_MISTAKES, SINUSOIDAL_HINTS, FORBIDDEN, dtypes=None,
        extra=_float64_kept("sinusoidal_pe", "the angles pos * omega_i"),
        shape_mistakes=SINUSOIDAL_SHAPE_MISTAKES, categories=("values", "shape", "dtype", "device", "large"),
    ),
    "PositionalEncoding_hidden": _PE_CHECK,
    "rotation_matrix_hidden": function_check(
        ref.rotation_matrix, _rotation_cases, ("M",), ROTATION_MISTAKES, ROTATION_HINTS, FORBIDDEN, dtypes=None,
        extra=_both(_float64_kept("rotation_matrix", "the angles k * omega_i"), _shift_property), categories=("values", "dtype", "device"),
    ),
    "apply_rope_hidden": function_check(
        ref.apply_rope, _rope_cases, ("rotated",), ROPE_MISTAKES, ROPE_HINTS, FORBIDDEN, extra=_relative_property,
        categories=("values", "dtype", "device"),
        # An apply_rope built on the learner's own rotation_matrix is graded apart from it (the reference does not
        # call it, so a wrong rotation_matrix proven wrong sends the call to a replay round with the right one).
        callees=("rotation_matrix",),
    ),
}

CHECKS["alibi_bias_hidden"] = function_check(
    ref.alibi_bias, _alibi_cases, ("bias",), ALIBI_MISTAKES, ALIBI_HINTS, FORBIDDEN, dtypes=None, categories=("values", "device"),
)

# Names whose appearance in a solution cell's code earns no points (read by autograder.grading.shortcuts, never run).
SHORTCUT_NAMES = builtins.shortcut_names()

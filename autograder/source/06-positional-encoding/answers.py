"""Test data of chapter 06-positional-encoding: typical wrong answers (WRONG_ANSWERS) and correct answers written
unlike the reference (VALID_ANSWERS), as edits of the reference source in solutions/ch06_positional_encoding.py.

Used by the chapter contract (tests/test_chapter_contract.py), the learner trials, the demo and
scripts/grading_corpus.py, through `autograder.registry.answers("06-positional-encoding")`; never loaded by a
grading host.
"""

from autograder.authoring.answers import Edit, ValidAnswer, WrongAnswer

# --- Typical wrong answers, as edits of the reference source -------------------------------------------------

_PE_FILL = (
    "    pe = torch.empty(max_len, d_model, dtype=torch.float64, device=device)\n"
    "    pe[:, 0::2] = torch.sin(angles)  # even dimensions: sine\n"
    "    pe[:, 1::2] = torch.cos(angles)  # odd dimensions: cosine of the same angle\n"
)
_PE_RAISE = (
    "    if d_model % 2 != 0:\n"
    "        raise ValueError(f\"d_model must be even (dimensions come in sin/cos pairs), got {d_model}\")\n"
)
_PE_ANGLES = (
    "    two_i = torch.arange(0, d_model, 2, dtype=torch.float64, device=device)  # (d/2,) 0, 2, 4, ...\n"
    "    omega = base ** (-two_i / d_model)  # (d/2,) omega_i = 1 / base^(2i / d_model)\n"
    "    pos = torch.arange(max_len, dtype=torch.float64, device=device)  # (max_len,) 0, 1, ..., max_len - 1\n"
)
_DROP_BRANCH = (
    "        p = self.dropout.p\n"
    "        if generator is None or not self.training or p == 0.0:\n"
    "            return self.dropout(y)  # nn.Dropout: nothing dropped in eval()\n"
)
_ROPE_PAIRS = (
    "    x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., seq, d/2) the two members of each pair\n"
    "    out = torch.empty_like(x)\n"
    "    out[..., 0::2] = x1 * cos - x2 * sin  # 2-D rotation of (x1, x2) by +angle\n"
    "    out[..., 1::2] = x1 * sin + x2 * cos\n"
)

WRONG_ANSWERS = {
    # sinusoidal_pe
    # issue 30's learner trial: large positions, dtypes, dropout, callee/caller pairs
    "rope_positions_in_float32": WrongAnswer("apply_rope", "    angles = positions.to(torch.float64)[..., None] * omega  # (..., seq, d/2)",
                                             "    angles = positions.to(torch.float32)[..., None] * omega.float()", "the angles pos * omega_i are computed in float32"),
    "rope_cast_before_angles": WrongAnswer("apply_rope", "    omega = base ** (-two_i / d)  # (d/2,) float64",
                                           "    omega = (base ** (-two_i / d)).to(x.dtype)", "the frequencies omega_i are rounded to x's dtype"),
    "layer_table_in_float32": WrongAnswer("PositionalEncoding", "        pe = sinusoidal_pe(max_len, d_model, dtype=torch.float64)  # (max_len, d_model)",
                                          "        pe = sinusoidal_pe(max_len, d_model)", "the table is made in float32"),
    "layer_dropout_before_adding": WrongAnswer("PositionalEncoding", "        return y * keep.to(y.device) * scale",
                                               "        return x * keep.to(y.device) * scale + self.pe[:seq_len].to(x.dtype)", "only x is dropped"),
    "rotation_wrong_rope_right": WrongAnswer("rotation_matrix", "    m[idx + 1, idx] = -s", "    m[idx + 1, idx] = s", "M @ PE[pos] is not PE[pos + k]"),
    "alibi_queries_at_start": WrongAnswer("alibi_bias", "    q_pos = torch.arange(k_len - q_len, k_len, device=device)[:, None]  # (q_len, 1) positions of the queries",
                                          "    q_pos = torch.arange(q_len, device=device)[:, None]", "aligned with the START of the keys"),
    "pe_positions_from_one": WrongAnswer("sinusoidal_pe", "    pos = torch.arange(max_len, dtype=torch.float64, device=device)  # (max_len,) 0, 1, ..., max_len - 1",
                                         "    pos = torch.arange(1, max_len + 1, dtype=torch.float64, device=device)", "positions start at 1"),
    "pe_halves": WrongAnswer("sinusoidal_pe", _PE_FILL, "    pe = torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)  # all sines, then all cosines\n",
                             "concatenated in two halves"),
    "pe_i_not_2i": WrongAnswer("sinusoidal_pe", "    omega = base ** (-two_i / d_model)",
                               "    i = torch.arange(d_model // 2, dtype=torch.float64, device=device)\n    omega = base ** (-i / d_model)",
                               "uses i instead of 2i"),
    "pe_stacked_not_flattened": WrongAnswer("sinusoidal_pe", _PE_FILL,
                                            "    pe = torch.stack([torch.sin(angles), torch.cos(angles)], dim=-1)  # (max_len, d/2, 2)\n",
                                            "not flattened", category="shape"),
    "pe_dtype_ignored": WrongAnswer("sinusoidal_pe", "    return pe.to(dtype)", "    return pe", "dtype float64, expected torch.float32",
                                    category="dtype"),
    "pe_positions_on_the_cpu": WrongAnswer("sinusoidal_pe", "    pos = torch.arange(max_len, dtype=torch.float64, device=device)",
                                           "    pos = torch.arange(max_len, dtype=torch.float64)", "mixes devices", category="device"),
    "pe_angles_in_the_asked_dtype": WrongAnswer(
        "sinusoidal_pe", _PE_ANGLES,
        "    two_i = torch.arange(0, d_model, 2, dtype=dtype, device=device)\n"
        "    omega = base ** (-two_i / d_model)\n"
        "    pos = torch.arange(max_len, dtype=dtype, device=device)\n",
        "computed in float32", category="large",
    ),
    "pe_odd_d_model_accepted": WrongAnswer("sinusoidal_pe", _PE_RAISE, "", "should raise ValueError"),
    # a wrong table with a right layer that calls sinusoidal_pe by keywords: the table's exercise only (no double penalty)
    "pe_swapped_layer_keyword_call": WrongAnswer(
        "sinusoidal_pe", _PE_FILL,
        "    pe = torch.empty(max_len, d_model, dtype=torch.float64, device=device)\n"
        "    pe[:, 0::2] = torch.cos(angles)  # sine and cosine swapped\n"
        "    pe[:, 1::2] = torch.sin(angles)\n",
        "sine and cosine swapped",
        also=(Edit("PositionalEncoding", "        pe = sinusoidal_pe(max_len, d_model, dtype=torch.float64)  # (max_len, d_model)",
                   "        pe = sinusoidal_pe(max_len=max_len, d_model=d_model, base=10000.0, dtype=torch.float64)"),),
    ),
    # PositionalEncoding
    "layer_seq_first_slice": WrongAnswer("PositionalEncoding", "        y = x + self.pe[:seq_len].to(x.dtype)",
                                         "        y = x + self.pe[: x.size(0)].unsqueeze(1).to(x.dtype)  # as in note 000 §6",
                                         "sliced with x.size(0)"),
    "layer_dropout_not_scaled": WrongAnswer("PositionalEncoding", "        return y * keep.to(y.device) * scale",
                                            "        return y * keep.to(y.device)", "not scaled by 1 / (1 - p)"),
    "layer_dropout_in_eval": WrongAnswer("PositionalEncoding", "        if generator is None or not self.training or p == 0.0:",
                                         "        if generator is None or p == 0.0:", "applied in eval() mode too"),
    "layer_generator_ignored": WrongAnswer("PositionalEncoding", _DROP_BRANCH,
                                           "        return self.dropout(y)  # nn.Dropout, whatever generator is given\n",
                                           "not the entries the generator decides", category="generator"),
    "layer_table_not_a_buffer": WrongAnswer("PositionalEncoding", '        self.register_buffer("pe", pe, persistent=False)',
                                            "        self.pe = pe  # a plain attribute: .to(...) does not move it",
                                            "mixes devices", category="device"),
    # rotation_matrix
    "rotation_transposed": WrongAnswer("rotation_matrix", "    m[idx, idx + 1] = s\n    m[idx + 1, idx] = -s",
                                       "    m[idx, idx + 1] = -s\n    m[idx + 1, idx] = s", "rotate by -k"),
    "rotation_dtype_ignored": WrongAnswer("rotation_matrix", "    return m.to(dtype)", "    return m", "dtype float64, expected torch.float32",
                                          category="dtype"),
    "rotation_device_ignored": WrongAnswer("rotation_matrix", "", '''def rotation_matrix(k, d_model, base=10000.0, *, dtype=torch.float32, device=None):
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        theta = k / base ** (2 * i / d_model)
        m[2 * i, 2 * i] = m[2 * i + 1, 2 * i + 1] = math.cos(theta)
        m[2 * i, 2 * i + 1] = math.sin(theta)
        m[2 * i + 1, 2 * i] = -math.sin(theta)
    return m.to(dtype)
''', "should be a meta tensor", category="device"),
    # apply_rope
    "rope_halves_paired": WrongAnswer("apply_rope", _ROPE_PAIRS,
                                      "    x1, x2 = x[..., : d // 2], x[..., d // 2 :]  # the two halves\n"
                                      "    out = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)\n",
                                      "paired with i + d/2"),
    "rope_cos_sin_not_cast": WrongAnswer("apply_rope", "    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)\n" + _ROPE_PAIRS,
                                         "    cos, sin = torch.cos(angles), torch.sin(angles)  # float64\n"
                                         "    x1, x2 = x[..., 0::2], x[..., 1::2]\n"
                                         "    out = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)\n",
                                         "dtype float64, expected torch.float32", category="dtype"),
    "rope_positions_on_the_cpu": WrongAnswer("apply_rope", "        positions = torch.arange(x.size(-2), device=x.device)",
                                             "        positions = torch.arange(x.size(-2))", "mixes devices", category="device"),
    # alibi_bias
    "alibi_sign": WrongAnswer("alibi_bias", "    return (-slopes[:, None, None] * distance).float()",
                              "    return (slopes[:, None, None] * distance).float()", "wrong sign"),
    "alibi_positions_on_the_cpu": WrongAnswer("alibi_bias", "    k_pos = torch.arange(k_len, device=device)[None, :]",
                                              "    k_pos = torch.arange(k_len)[None, :]", "mixes devices", category="device"),
    # issue 30's learner trial, second round
    "rope_rotates_backwards": WrongAnswer("apply_rope", "    out[..., 0::2] = x1 * cos - x2 * sin  # 2-D rotation of (x1, x2) by +angle\n"
                                          "    out[..., 1::2] = x1 * sin + x2 * cos",
                                          "    out[..., 0::2] = x1 * cos + x2 * sin\n    out[..., 1::2] = -x1 * sin + x2 * cos", "the transposed rotation"),
    "layer_rows_not_cast": WrongAnswer("PositionalEncoding", "        y = x + self.pe[:seq_len].to(x.dtype)",
                                       "        y = x + self.pe[:seq_len]", "dtype float64, expected torch.float32",
                                       category="dtype"),
    "layer_rows_cast_to_float32": WrongAnswer("PositionalEncoding", "        y = x + self.pe[:seq_len].to(x.dtype)",
                                              "        y = x + self.pe[:seq_len].float()", "wrong values"),
    "alibi_slopes_reversed": WrongAnswer("alibi_bias", "    slopes = alibi_slopes(n_heads).double().to(device)",
                                         "    slopes = alibi_slopes(n_heads).flip(0).double().to(device)", "the slopes are in the wrong order"),
    "rotation_base_ignored": WrongAnswer("rotation_matrix", "    theta = k * base ** (-two_i / d_model)",
                                         "    theta = k * 10000.0 ** (-two_i / d_model)", "M @ PE[pos] is not PE[pos + k]"),
}

# --- Correct answers written unlike the reference -------------------------------------------------------------

VALID_ANSWERS = {
    # issue 30's learner trial
    "pe_outer_product_stack": ValidAnswer((Edit("sinusoidal_pe", "", '''def sinusoidal_pe(max_len, d_model, base=10000.0, *, dtype=torch.float32, device=None):
    if d_model % 2:
        raise ValueError("d_model must be even")
    omega = torch.exp(-math.log(base) * torch.arange(0, d_model, 2, dtype=torch.float64, device=device) / d_model)
    angles = torch.outer(torch.arange(max_len, dtype=torch.float64, device=device), omega)  # (max_len, d/2)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2).to(dtype)
'''),), "exp-log frequencies, torch.outer, sin/cos interleaved by stack + flatten"),
    "layer_table_as_plain_slice_then_dropout_module": ValidAnswer((Edit("PositionalEncoding",
        "        y = x + self.pe[:seq_len].to(x.dtype)  # (batch, seq, d_model): PE broadcast over the batch",
        "        y = x + self.pe.narrow(0, 0, seq_len).unsqueeze(0).to(dtype=x.dtype)  # (1, seq, d) broadcast"),),
        "narrow + unsqueeze instead of a slice"),
    "rope_einsum_rotation_blocks": ValidAnswer((Edit("apply_rope", "", '''def apply_rope(x, positions=None, base=10000.0):
    d = x.size(-1)
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    if positions is None:
        positions = torch.arange(x.size(-2), device=x.device)
    theta = positions.double()[..., None] * omega  # (..., seq, d/2)
    c, s = theta.cos(), theta.sin()
    rot = torch.stack([torch.stack([c, s], -1), torch.stack([-s, c], -1)], -2)  # (..., seq, d/2, 2, 2) rows are inputs
    pairs = x.double().unflatten(-1, (d // 2, 2))  # (..., seq, d/2, 2)
    return torch.einsum("...pi,...pij->...pj", pairs, rot).flatten(-2).to(x.dtype)
'''),), "2x2 blocks applied with einsum in float64, cast at the end"),
    "rope_via_rotation_matrix_per_position": ValidAnswer((Edit("apply_rope", "", '''def apply_rope(x, positions=None, base=10000.0):
    if positions is None:
        positions = torch.arange(x.size(-2), device=x.device)
    positions = torch.broadcast_to(positions, x.shape[:-1])
    out = torch.empty_like(x)
    flat_x, flat_p, flat_out = x.reshape(-1, x.size(-1)), positions.reshape(-1), out.view(-1, x.size(-1))
    for r in range(flat_x.size(0)):
        m = rotation_matrix(float(flat_p[r]), x.size(-1), base, dtype=torch.float64, device=x.device)
        flat_out[r] = (m.T @ flat_x[r].double()).to(x.dtype)
    return out
'''),), "the learner's rotation_matrix applied to each row in a loop (another call pattern of the callee)"),
    "alibi_slopes_by_broadcast_abs_diff": ValidAnswer((Edit("alibi_bias", "", '''def alibi_bias(n_heads, q_len, k_len=None, *, device=None):
    k_len = q_len if k_len is None else k_len
    i = torch.arange(q_len, device=device, dtype=torch.float64) + (k_len - q_len)
    j = torch.arange(k_len, device=device, dtype=torch.float64)
    dist = torch.cdist(i[:, None], j[:, None], p=1)  # (q_len, k_len) |i - j|
    return (-alibi_slopes(n_heads).double().to(device).view(-1, 1, 1) * dist).float()
'''),), "distances by torch.cdist with p=1"),
    "pe_loop_over_pairs": ValidAnswer((Edit("sinusoidal_pe", "", '''def sinusoidal_pe(max_len, d_model, base=10000.0, *, dtype=torch.float32, device=None):
    if d_model % 2:
        raise ValueError(f"d_model = {d_model} is odd: the dimensions come in (sin, cos) pairs")
    pos = torch.arange(max_len, dtype=torch.float64, device=device)
    columns = []
    for i in range(d_model // 2):  # one (sin, cos) pair of columns at a time
        angle = pos / base ** (2 * i / d_model)
        columns += [torch.sin(angle), torch.cos(angle)]
    return torch.stack(columns, dim=1).to(dtype)
'''),), "a Python loop over the pairs, pos / base^(2i/d) by division, columns stacked"),
    "layer_exp_log_table_where": ValidAnswer((Edit("PositionalEncoding", "", '''class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
        div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(1, max_len, d_model, dtype=torch.float64)  # (1, max_len, d_model), a persistent buffer
        pe[0, :, 0::2] = torch.sin(position * div_term)
        pe[0, :, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x, generator=None):
        y = x + self.pe[:, : x.size(1)].to(x.dtype)
        p = self.dropout.p
        if generator is None or not self.training or p == 0:
            return self.dropout(y)
        keep = (torch.rand(y.shape, generator=generator) >= p).to(y.device)
        return torch.where(keep, y / (1 - p), torch.zeros((), dtype=y.dtype, device=y.device))
'''),), "the table built inline with exp/log (the Annotated Transformer's way) as a (1, max_len, d) persistent buffer; torch.where"),
    "rotation_block_diag": ValidAnswer((Edit("rotation_matrix", "", '''def rotation_matrix(k, d_model, base=10000.0, *, dtype=torch.float32, device=None):
    blocks = []
    for i in range(d_model // 2):
        theta = k / base ** (2 * i / d_model)
        c, s = math.cos(theta), math.sin(theta)
        blocks.append(torch.tensor([[c, s], [-s, c]], dtype=torch.float64, device=device))
    return torch.block_diag(*blocks).to(dtype)
'''), Edit("alibi_bias", "", '''def alibi_bias(n_heads, q_len, k_len=None, *, device=None):
    k_len = k_len or q_len
    i = torch.arange(q_len, dtype=torch.float32, device=device) + (k_len - q_len)  # the last q_len positions
    j = torch.arange(k_len, dtype=torch.float32, device=device)
    distance = (i[:, None] - j[None, :]).abs()  # (q_len, k_len)
    return -alibi_slopes(n_heads).to(device).view(-1, 1, 1) * distance
''')), "2x2 blocks from Python floats, torch.block_diag; ALiBi computed in float32, view instead of indexing"),
    "rope_complex": ValidAnswer((Edit("apply_rope", "", '''def apply_rope(x, positions=None, base=10000.0):
    d = x.size(-1)
    if positions is None:
        positions = torch.arange(x.size(-2), device=x.device)
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    angles = positions.to(torch.float64)[..., None] * omega  # (..., seq, d/2)
    turn = torch.polar(torch.ones_like(angles), angles)  # e^(i angle), complex128
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())  # x_2i + i x_2i+1
    return torch.view_as_real(pairs * turn).flatten(-2).to(x.dtype)
'''),), "complex numbers: torch.polar and view_as_complex, computed in complex128 and cast back"),
    "rope_rotate_neighbours": ValidAnswer((Edit("apply_rope", "", '''def apply_rope(x, positions=None, base=10000.0):
    d = x.size(-1)
    if positions is None:
        positions = torch.arange(x.size(-2), device=x.device)
    omega = torch.exp(-math.log(base) * torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    angles = torch.repeat_interleave(positions.to(torch.float64)[..., None] * omega, 2, dim=-1)  # (..., seq, d)
    turned = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)  # (-x_2i+1, x_2i) in each pair
    return x * torch.cos(angles).to(x.dtype) + turned * torch.sin(angles).to(x.dtype)
'''),), "the 'rotate half' formula x cos + rot(x) sin, for neighbouring pairs, with repeat_interleave"),
    # issue 30's learner trial, second round
    "rotation_loop_blocks_preallocated": ValidAnswer((Edit("rotation_matrix", "", '''def rotation_matrix(k, d_model, base=10000.0, *, dtype=torch.float32, device=None):
    m = torch.zeros(d_model, d_model, dtype=torch.float64, device=device)
    for i in range(d_model // 2):
        theta = k / base ** (2 * i / d_model)
        c, s = math.cos(theta), math.sin(theta)
        m[2 * i, 2 * i], m[2 * i, 2 * i + 1] = c, s
        m[2 * i + 1, 2 * i], m[2 * i + 1, 2 * i + 1] = -s, c
    return m.to(dtype)
'''),), "a preallocated matrix filled pair by pair in a Python loop, angles in Python floats"),
    "alibi_nested_loops": ValidAnswer((Edit("alibi_bias", "", '''def alibi_bias(n_heads, q_len, k_len=None, *, device=None):
    if k_len is None:
        k_len = q_len
    slopes = alibi_slopes(n_heads).tolist()
    out = torch.empty(n_heads, q_len, k_len, dtype=torch.float64)
    for h in range(n_heads):
        for i in range(q_len):
            for j in range(k_len):
                out[h, i, j] = -slopes[h] * abs(k_len - q_len + i - j)
    return out.to(device=device, dtype=torch.float32)
'''),), "three nested loops over heads, queries and keys, built on the CPU and moved at the end"),
}

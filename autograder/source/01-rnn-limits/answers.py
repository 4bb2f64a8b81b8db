"""Test data of chapter 01-rnn-limits: typical wrong answers (WRONG_ANSWERS) and correct answers written unlike the
reference (VALID_ANSWERS), as edits of the reference source in solutions/ch01_rnn_limits.py.

Used by the chapter contract (tests/test_chapter_contract.py), the learner trials, the demo and
scripts/grading_corpus.py, through `autograder.registry.answers("01-rnn-limits")`; never loaded by a grading host.
"""


from autograder.authoring.answers import Edit, ValidAnswer, WrongAnswer


# --- Typical wrong answers, as edits of the reference source (end-to-end and learner-trial tests) ------

_RNN_LOOP = """    outputs = []
    for t in range(T):  # the recurrence itself cannot be parallelised: h_t needs h_{t-1}
        h = torch.tanh(xw[:, t] + h @ W_hh)  # (batch, d_h)
        outputs.append(h)
    if not outputs:
        return x.new_zeros(batch, 0, W_hh.shape[0]), h
    return torch.stack(outputs, dim=1), h  # (batch, T, d_h), (batch, d_h)"""
_GRAD_BODY = """    outputs, _ = rnn_forward(x, h0, W_xh, W_hh, b)  # (batch, T, d_h)"""
_DILATED = """    layers, field = 0, 1  # dilated: integer loop, no floating-point log
    while field < n:
        field *= kernel_size
        layers += 1
    return layers"""

WRONG_ANSWERS = {
    # rnn_forward
    "rnn_outputs_shifted": WrongAnswer(
        "rnn_forward", "        h = torch.tanh(xw[:, t] + h @ W_hh)  # (batch, d_h)\n        outputs.append(h)",
        "        outputs.append(h)\n        h = torch.tanh(xw[:, t] + h @ W_hh)", "stored before it is updated"),
    "rnn_no_tanh": WrongAnswer("rnn_forward", "h = torch.tanh(xw[:, t] + h @ W_hh)", "h = xw[:, t] + h @ W_hh", "no tanh"),
    "rnn_w_hh_transposed": WrongAnswer("rnn_forward", "+ h @ W_hh)", "+ h @ W_hh.T)", "W_hh used transposed"),
    "rnn_layer_dimension": WrongAnswer(
        "rnn_forward", "return torch.stack(outputs, dim=1), h  #", "return torch.stack(outputs, dim=1), h.unsqueeze(0)  #",
        "layer dimension", category="shape"),
    "rnn_time_major": WrongAnswer(
        "rnn_forward", "return torch.stack(outputs, dim=1), h  #", "return torch.stack(outputs, dim=0), h  #",
        "batch-first", category="shape"),
    "rnn_state_on_cpu": WrongAnswer(
        "rnn_forward", "x.new_zeros(batch, W_hh.shape[0])", "torch.zeros(batch, W_hh.shape[0], dtype=x.dtype)",
        "device", category="device"),
    "rnn_float32_outputs": WrongAnswer(
        "rnn_forward", _RNN_LOOP,
        "    outputs = torch.zeros(batch, T, W_hh.shape[0], device=x.device)\n    for t in range(T):\n"
        "        h = torch.tanh(xw[:, t] + h @ W_hh)\n        outputs[:, t] = h\n    return outputs, h",
        "dtype", category="dtype"),
    "rnn_detached_state": WrongAnswer(
        "rnn_forward", "h = torch.tanh(xw[:, t] + h @ W_hh)", "h = torch.tanh(xw[:, t] + h.detach() @ W_hh)",
        "detached at every step", category="gradient"),
    "rnn_handwritten_tanh": WrongAnswer(
        "rnn_forward", "h = torch.tanh(xw[:, t] + h @ W_hh)",
        "a = xw[:, t] + h @ W_hh\n        h = (torch.exp(a) - torch.exp(-a)) / (torch.exp(a) + torch.exp(-a))",
        "overflows", category="large"),
    # grad_norms_wrt_inputs
    "grad_no_tanh_derivative": WrongAnswer(
        "grad_norms_wrt_inputs", "G_a = G * (1 - outputs[:, t] ** 2).unsqueeze(1)", "G_a = G", "tanh derivative"),
    "grad_squared_norm": WrongAnswer(
        "grad_norms_wrt_inputs", "torch.linalg.matrix_norm(G_a @ W_xh.T)", "torch.linalg.matrix_norm(G_a @ W_xh.T) ** 2", "squared"),
    "grad_local_jacobian": WrongAnswer("grad_norms_wrt_inputs", "G = G_a @ W_hh.T", "G = G", "local Jacobian"),
    "grad_of_the_sum": WrongAnswer(
        "grad_norms_wrt_inputs", _GRAD_BODY,
        "    x = x.detach().clone().requires_grad_(True)\n    _, h_T = rnn_forward(x, h0, W_xh, W_hh, b)\n"
        "    (g,) = torch.autograd.grad(h_T.sum(), x)\n    return g.norm(dim=-1)\n" + _GRAD_BODY,
        "sum of the Jacobian's rows"),
    "grad_result_on_cpu": WrongAnswer(
        "grad_norms_wrt_inputs", "norms = x.new_zeros(batch, T)", "norms = torch.zeros(batch, T, dtype=x.dtype)", "device",
        category="device"),
    "grad_float32_result": WrongAnswer(
        "grad_norms_wrt_inputs", "norms = x.new_zeros(batch, T)", "norms = torch.zeros(batch, T, device=x.device)", "dtype",
        category="dtype"),
    "grad_time_major": WrongAnswer("grad_norms_wrt_inputs", "    return norms", "    return norms.T", "(T, batch)", category="shape"),
    # path_length
    "path_float_log": WrongAnswer("path_length", _DILATED, "    return math.ceil(math.log(n, kernel_size))", "exact powers"),
    "path_attention_one_position": WrongAnswer(
        "path_length", '    if n == 1:\n        return 0\n    if kind == "rnn":',
        '    if kind == "attention":\n        return 1\n    if n == 1:\n        return 0\n    if kind == "rnn":', "n = 1"),
    "path_cnn_floor": WrongAnswer(
        "path_length", "return -(-(n - 1) // (kernel_size - 1))", "return (n - 1) // (kernel_size - 1)", "floor instead of ceiling"),
    "path_rnn_positions": WrongAnswer("path_length", "        return n - 1", "        return n", "n hops for the RNN"),
    "path_float_result": WrongAnswer(
        "path_length", "return -(-(n - 1) // (kernel_size - 1))", "return (n - 1) / (kernel_size - 1)", "Python int"),
    # lstm_cell_step
    "lstm_gate_order": WrongAnswer("lstm_cell_step", "i, f, g, o = gates.chunk(4, dim=-1)", "i, f, o, g = gates.chunk(4, dim=-1)",
                                   "gates in the order (i, f, o, g)"),
    "lstm_no_output_tanh": WrongAnswer("lstm_cell_step", "h_new = torch.sigmoid(o) * torch.tanh(c_new)",
                                       "h_new = torch.sigmoid(o) * c_new", "o * c_new"),
    "lstm_sigmoid_candidate": WrongAnswer("lstm_cell_step", "torch.sigmoid(i) * torch.tanh(g)", "torch.sigmoid(i) * torch.sigmoid(g)",
                                          "sigmoid on the cell candidate"),
    "lstm_swapped_outputs": WrongAnswer("lstm_cell_step", "return h_new, c_new", "return c_new, h_new", "returned (c_new, h_new)"),
    "lstm_chunk_first_dim": WrongAnswer("lstm_cell_step", "gates.chunk(4, dim=-1)", "gates.chunk(4, dim=0)", "along the last",
                                        category="shape"),
    "lstm_float32_outputs": WrongAnswer("lstm_cell_step", "return h_new, c_new", "return h_new.float(), c_new.float()",
                                        "dtype", category="dtype"),
    "lstm_ones_on_cpu": WrongAnswer("lstm_cell_step", "torch.sigmoid(f) * c", "(1 / (torch.ones(f.shape) + torch.exp(-f))) * c",
                                    "device", category="device"),
    "lstm_handwritten_tanh": WrongAnswer("lstm_cell_step", "torch.sigmoid(i) * torch.tanh(g)",
                                         "torch.sigmoid(i) * (torch.exp(g) - torch.exp(-g)) / (torch.exp(g) + torch.exp(-g))",
                                         "overflows", category="large"),
}

# --- Issue 15: a learner's trials. Typical mistakes, and pairs of a wrong callee with a correct caller ------
# written in another call pattern (the caller must not lose points: only the callee's cell is listed in fails).

_GRAD_HEADER = "def grad_norms_wrt_inputs(x: Tensor, h0: Tensor | None, W_xh: Tensor, W_hh: Tensor, b: Tensor) -> Tensor:\n"
_PATH_HEADER = "def path_length(n: int, kind: str, kernel_size: int = 3) -> int:\n"

# grad_norms_wrt_inputs written with torch.func around the learner's rnn_forward: vmap over the sequences,
# jacrev of the last state of one sequence with respect to its inputs (a (d_h, T, d_in) Jacobian each).
GRAD_VMAP_JACREV = _GRAD_HEADER + """    def last_state(xi, hi):
        h_start = None if hi is None else hi.unsqueeze(0)
        return rnn_forward(xi.unsqueeze(0), h_start, W_xh, W_hh, b)[1].squeeze(0)  # (d_h,)

    if h0 is None:
        J = torch.func.vmap(torch.func.jacrev(lambda xi: last_state(xi, None)))(x)
    else:
        J = torch.func.vmap(torch.func.jacrev(last_state))(x, h0)  # (batch, d_h, T, d_in)
    return J.pow(2).sum(dim=(1, 3)).sqrt()
"""
# torch.func.grad, one hidden unit of h_T at a time (sequences do not interact: the sum over the batch is fine).
GRAD_FUNC_GRAD = _GRAD_HEADER + """    squares = x.new_zeros(x.shape[0], x.shape[1])
    for j in range(W_hh.shape[0]):
        g = torch.func.grad(lambda xx: rnn_forward(xx, h0, W_xh, W_hh, b)[1][:, j].sum())(x)  # (batch, T, d_in)
        squares = squares + g.pow(2).sum(dim=-1)
    return squares.sqrt()
"""
# torch.autograd.functional.jacobian of the whole batch: the blocks across sequences are zero, so summing the
# squares over both batch axes gives each sequence's own norm.
GRAD_FUNCTIONAL_JACOBIAN = _GRAD_HEADER + """    J = torch.autograd.functional.jacobian(lambda xx: rnn_forward(xx, h0, W_xh, W_hh, b)[1], x)  # (B, d_h, B, T, d_in)
    return J.pow(2).sum(dim=(0, 1, 4)).sqrt()
"""
# A loop of torch.autograd.grad, rnn_forward called with keyword arguments.
GRAD_AUTOGRAD_LOOP_KEYWORDS = _GRAD_HEADER + """    x = x.detach().clone().requires_grad_(True)
    _, h_T = rnn_forward(x=x, h0=h0, W_xh=W_xh, W_hh=W_hh, b=b)
    rows = []
    for j in range(h_T.shape[-1]):
        (g,) = torch.autograd.grad(h_T[:, j].sum(), x, retain_graph=True)
        rows.append(g)
    J = torch.stack(rows, dim=1)  # (batch, d_h, T, d_in)
    return torch.sqrt((J ** 2).sum(dim=(1, 3)))
"""
# torch.func.jacfwd (forward mode) under vmap.
GRAD_VMAP_JACFWD = _GRAD_HEADER + """    h_start = x.new_zeros(x.shape[0], W_hh.shape[0]) if h0 is None else h0

    def last_state(xi, hi):
        return rnn_forward(xi[None], hi[None], W_xh, W_hh, b)[1][0]

    J = torch.func.vmap(torch.func.jacfwd(last_state))(x, h_start)  # (batch, d_h, T, d_in)
    return torch.linalg.vector_norm(J, dim=(1, 3))
"""
# The chain rule, with rnn_forward called once per sequence (keyword h0) and einsum for the products.
GRAD_CHAIN_PER_SEQUENCE = _GRAD_HEADER + """    rows = []
    for i in range(x.shape[0]):
        states, _ = rnn_forward(x[i:i + 1], h0=None if h0 is None else h0[i:i + 1], W_xh=W_xh, W_hh=W_hh, b=b)
        states = states[0]  # (T, d_h)
        T, d_h = states.shape
        G = torch.eye(d_h, dtype=x.dtype, device=x.device)
        norms = []
        for t in range(T - 1, -1, -1):
            G_a = torch.einsum("jk,k->jk", G, 1 - states[t] ** 2)
            norms.append(torch.linalg.norm(torch.einsum("jk,ik->ji", G_a, W_xh)))
            G = torch.einsum("jk,lk->jl", G_a, W_hh)
        rows.append(torch.stack(norms[::-1]))
    return torch.stack(rows)
"""
# The chain rule, with the hidden states from rnn_forward called one step at a time (T = 1 slices, the
# previous state passed as h0).
GRAD_CHAIN_PER_STEP = _GRAD_HEADER + """    batch, T, _ = x.shape
    d_h = W_hh.shape[0]
    h = h0
    states = []
    for t in range(T):
        _, h = rnn_forward(x[:, t:t + 1], h, W_xh, W_hh, b)
        states.append(h)
    G = torch.eye(d_h, dtype=x.dtype, device=x.device).repeat(batch, 1, 1)
    norms = [None] * T
    for t in reversed(range(T)):
        G_a = G * (1 - states[t] ** 2)[:, None, :]
        norms[t] = (G_a @ W_xh.T).pow(2).sum(dim=(1, 2)).sqrt()
        G = G_a @ W_hh.T
    return torch.stack(norms, dim=1)
"""

VALID_ANSWERS = {
    "grad_vmap_jacrev": ValidAnswer(
        (Edit("grad_norms_wrt_inputs", "", GRAD_VMAP_JACREV),),
        "torch.func.vmap(torch.func.jacrev(...)) around the learner's rnn_forward, one sequence at a time"),
    "grad_func_grad": ValidAnswer(
        (Edit("grad_norms_wrt_inputs", "", GRAD_FUNC_GRAD),), "torch.func.grad of one hidden unit of h_T at a time"),
    "grad_functional_jacobian": ValidAnswer(
        (Edit("grad_norms_wrt_inputs", "", GRAD_FUNCTIONAL_JACOBIAN),),
        "torch.autograd.functional.jacobian of the whole batch, squares summed over both batch axes"),
    "grad_autograd_loop_keywords": ValidAnswer(
        (Edit("grad_norms_wrt_inputs", "", GRAD_AUTOGRAD_LOOP_KEYWORDS),),
        "a loop of torch.autograd.grad, rnn_forward called with keyword arguments"),
    "grad_vmap_jacfwd": ValidAnswer(
        (Edit("grad_norms_wrt_inputs", "", GRAD_VMAP_JACFWD),), "forward-mode torch.func.jacfwd under vmap"),
    "grad_chain_per_sequence": ValidAnswer(
        (Edit("grad_norms_wrt_inputs", "", GRAD_CHAIN_PER_SEQUENCE),),
        "the chain rule with einsum, rnn_forward called once per sequence with keyword arguments"),
    "grad_chain_per_step": ValidAnswer(
        (Edit("grad_norms_wrt_inputs", "", GRAD_CHAIN_PER_STEP),),
        "the chain rule on states from rnn_forward called one step at a time (T = 1, the state passed as h0)"),
    "grad_entrywise_item": ValidAnswer(
        (Edit("grad_norms_wrt_inputs", "norms[:, t] = torch.linalg.matrix_norm(G_a @ W_xh.T)  # dh_T/dx_t, (batch, d_h, d_in)",
              "J = G_a @ W_xh.T\n        for i in range(batch):\n            norms[i, t] = math.sqrt(float((J[i] ** 2).sum().item()))"),),
        "each entry computed as a Python float with .item() (reads values: no meta result, which is no device mistake)"),
    "rnn_zeros_to_x": ValidAnswer(
        (Edit("rnn_forward", "h = x.new_zeros(batch, W_hh.shape[0]) if h0 is None else h0",
              "h = torch.zeros(batch, W_hh.shape[0]).to(x) if h0 is None else h0"),),
        "the zero state created on the CPU in float32, then .to(x) (the inputs' dtype and device)"),
    "rnn_einsum_unbind": ValidAnswer(
        (Edit("rnn_forward", "", """def rnn_forward(x, h0, W_xh, W_hh, b):
    h = torch.zeros(x.shape[0], W_hh.shape[0], dtype=x.dtype, device=x.device) if h0 is None else h0
    outputs = []
    for x_t in x.unbind(dim=1):
        h = torch.tanh(torch.einsum("bi,ih->bh", x_t, W_xh) + torch.einsum("bk,kh->bh", h, W_hh) + b)
        outputs.append(h)
    return torch.stack(outputs, dim=1), h
"""),), "einsum for the products, x.unbind(1) for the steps, torch.zeros(dtype=, device=) for the zero state"),
    "rnn_cat_and_linear_algebra": ValidAnswer(
        (Edit("rnn_forward", "", """def rnn_forward(x, h0, W_xh, W_hh, b):
    batch, T, d_in = x.shape
    h = x.new_zeros((batch, W_hh.shape[0])) if h0 is None else h0
    pieces = []
    for t in range(T):
        h = torch.tanh(torch.addmm(b, x[:, t, :], W_xh) + torch.matmul(h, W_hh))
        pieces.append(h.unsqueeze(1))
    outputs = torch.cat(pieces, dim=1)
    return outputs, outputs[:, -1]
"""),), "torch.addmm and torch.cat of unsqueezed states; h_T taken as outputs[:, -1]"),
    "path_match_statement": ValidAnswer(
        (Edit("path_length", "", _PATH_HEADER + """    match kind:
        case _ if n == 1:
            return 0
        case "rnn":
            return n - 1
        case "attention":
            return 1
        case "cnn":
            layers = 0
            while 1 + layers * (kernel_size - 1) < n:
                layers += 1
            return layers
        case "dilated_cnn":
            layers = 0
            while kernel_size ** layers < n:
                layers += 1
            return layers
"""),), "a match statement (compares kind with ==), while loops for both convolutions"),
    "path_dict_dispatch": ValidAnswer(
        (Edit("path_length", "", _PATH_HEADER + """    rules = {
        "rnn": lambda: n - 1,
        "attention": lambda: 1,
        "cnn": lambda: math.ceil((n - 1) / (kernel_size - 1)),
        "dilated_cnn": lambda: next(L for L in range(n + 1) if kernel_size ** L >= n),
    }
    return 0 if n == 1 else int(rules[kind]())
"""),), "a dict of rules keyed by the kind (hashing compares with ==), math.ceil of a true division"),
    "lstm_separate_gate_weights": ValidAnswer(
        (Edit("lstm_cell_step", "", """def lstm_cell_step(x, h, c, W_xh, W_hh, b):
    d_h = h.shape[-1]
    def gate(k):
        cols = slice(k * d_h, (k + 1) * d_h)
        return x @ W_xh[:, cols] + h @ W_hh[:, cols] + b[cols]
    i, f, g, o = (gate(k) for k in range(4))
    c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c_new), c_new
"""),), "one matrix product per gate on column slices of the weights"),
    "lstm_unflatten_unbind": ValidAnswer(
        (Edit("lstm_cell_step", "", """def lstm_cell_step(x, h, c, W_xh, W_hh, b):
    z = torch.matmul(x, W_xh) + torch.matmul(h, W_hh) + b
    i, f, g, o = z.unflatten(-1, (4, h.shape[-1])).unbind(dim=-2)
    i, f, o = (torch.sigmoid(v) for v in (i, f, o))
    c_new = torch.addcmul(f * c, i, torch.tanh(g))
    return o * torch.tanh(c_new), c_new
"""),), "gates by unflatten/unbind, torch.addcmul for the cell update"),
}

WRONG_ANSWERS.update({
    # rnn_forward
    "rnn_no_bias": WrongAnswer("rnn_forward", "xw = x @ W_xh + b", "xw = x @ W_xh", "the bias b is missing"),
    "rnn_relu": WrongAnswer("rnn_forward", "h = torch.tanh(xw[:, t] + h @ W_hh)", "h = torch.relu(xw[:, t] + h @ W_hh)", "ReLU instead of tanh"),
    "rnn_h0_ignored": WrongAnswer(
        "rnn_forward", "h = x.new_zeros(batch, W_hh.shape[0]) if h0 is None else h0", "h = x.new_zeros(batch, W_hh.shape[0])",
        "h0 is ignored"),
    "rnn_state_not_carried": WrongAnswer(
        "rnn_forward", "h = torch.tanh(xw[:, t] + h @ W_hh)",
        "h = torch.tanh(xw[:, t] + (x.new_zeros(batch, W_hh.shape[0]) if h0 is None else h0) @ W_hh)", "not carried over"),
    "rnn_squeezed_h_T": WrongAnswer(
        "rnn_forward", "return torch.stack(outputs, dim=1), h  #", "return torch.stack(outputs, dim=1), h.squeeze()  #",
        "drops the batch dimension when batch = 1", category="shape"),
    "rnn_h_T_is_the_first_state": WrongAnswer(
        "rnn_forward", "return torch.stack(outputs, dim=1), h  #", "return torch.stack(outputs, dim=1), outputs[0]  #",
        "h_T is not the last hidden state"),
    # grad_norms_wrt_inputs
    "grad_time_reversed": WrongAnswer("grad_norms_wrt_inputs", "    return norms", "    return norms.flip(-1)", "time reversed"),
    "grad_tanh_derivative_one_step_early": WrongAnswer(
        "grad_norms_wrt_inputs", "G_a = G * (1 - outputs[:, t] ** 2).unsqueeze(1)",
        "G_a = G * ((1 - outputs[:, t - 1] ** 2) if t > 0 else torch.ones_like(outputs[:, 0])).unsqueeze(1)", "one step early"),
    "grad_no_input_factor": WrongAnswer(
        "grad_norms_wrt_inputs", "torch.linalg.matrix_norm(G_a @ W_xh.T)", "torch.linalg.matrix_norm(G_a)", "the factor W_xh^T"),
    "grad_spectral_norm": WrongAnswer(
        "grad_norms_wrt_inputs", "torch.linalg.matrix_norm(G_a @ W_xh.T)", "torch.linalg.matrix_norm(G_a @ W_xh.T, ord=2)",
        "spectral norm"),
    "grad_func_grad_of_the_sum": WrongAnswer(
        "grad_norms_wrt_inputs", "", _GRAD_HEADER + "    g = torch.func.grad(lambda xx: rnn_forward(xx, h0, W_xh, W_hh, b)[1].sum())(x)\n"
        "    return g.norm(dim=-1)\n", "sum of the Jacobian's rows"),
    # path_length
    "path_kind_is": WrongAnswer(
        "path_length", '    if kind == "rnn":\n        return n - 1\n    if kind == "attention":\n        return 1\n    if kind == "cnn":',
        '    if kind is "rnn":\n        return n - 1\n    if kind is "attention":\n        return 1\n    if kind is "cnn":', "with `is`"),
    "path_cnn_numpy_ceil": WrongAnswer(
        "path_length", "return -(-(n - 1) // (kernel_size - 1))",
        "import numpy as np\n        return np.ceil((n - 1) / (kernel_size - 1))", "Python int"),
    "path_attention_float": WrongAnswer("path_length", "    if kind == \"attention\":\n        return 1\n",
                                        "    if kind == \"attention\":\n        return 1.0\n", "Python int"),
    # lstm_cell_step
    "lstm_old_cell_state": WrongAnswer("lstm_cell_step", "h_new = torch.sigmoid(o) * torch.tanh(c_new)",
                                       "h_new = torch.sigmoid(o) * torch.tanh(c)", "old cell state"),
    "lstm_no_forget_gate": WrongAnswer("lstm_cell_step", "torch.sigmoid(f) * c", "c", "forget gate is not applied"),
    # Pairs: a wrong rnn_forward, and a correct grad_norms_wrt_inputs written in another call pattern.
    "rnn_h0_ignored_with_grad_chain_per_step": WrongAnswer(
        "rnn_forward", "h = x.new_zeros(batch, W_hh.shape[0]) if h0 is None else h0", "h = x.new_zeros(batch, W_hh.shape[0])",
        "h0 is ignored", also=(Edit("grad_norms_wrt_inputs", "", GRAD_CHAIN_PER_STEP),)),
    "rnn_no_tanh_with_grad_chain_per_sequence": WrongAnswer(
        "rnn_forward", "h = torch.tanh(xw[:, t] + h @ W_hh)", "h = xw[:, t] + h @ W_hh", "no tanh",
        also=(Edit("grad_norms_wrt_inputs", "", GRAD_CHAIN_PER_SEQUENCE),)),
    "rnn_outputs_shifted_with_grad_keywords": WrongAnswer(
        "rnn_forward", "        h = torch.tanh(xw[:, t] + h @ W_hh)  # (batch, d_h)\n        outputs.append(h)",
        "        outputs.append(h)\n        h = torch.tanh(xw[:, t] + h @ W_hh)", "stored before it is updated",
        also=(Edit("grad_norms_wrt_inputs", "rnn_forward(x, h0, W_xh, W_hh, b)", "rnn_forward(x, W_hh=W_hh, W_xh=W_xh, b=b, h0=h0)"),)),
    "rnn_no_bias_with_grad_functional_jacobian": WrongAnswer(
        "rnn_forward", "xw = x @ W_xh + b", "xw = x @ W_xh", "the bias b is missing",
        also=(Edit("grad_norms_wrt_inputs", "", GRAD_FUNCTIONAL_JACOBIAN),)),
})

# Pairs of a wrong rnn_forward with a correct grad_norms_wrt_inputs that DIFFERENTIATES it (torch.func, a loop
# of torch.autograd.grad): the caller still loses its points, because the grader composes the reference with the
# values the learner's callee returned, and an autograd caller needs the callee's derivatives, which are not
# recorded (for a callee mistake that keeps the recurrence's form, a missing bias or an ignored h0, the chain
# rule on the learner's states is the learner's Jacobian, and such pairs keep their points: see
# rnn_no_bias_with_grad_functional_jacobian). Not in WRONG_ANSWERS until the library can grade an autograd
# caller with a correct callee (tests/test_checks_ch01.py pins them as expected failures).
PENDING_WRONG_ANSWERS = {
    "rnn_no_tanh_with_grad_vmap_jacrev": WrongAnswer(
        "rnn_forward", "h = torch.tanh(xw[:, t] + h @ W_hh)", "h = xw[:, t] + h @ W_hh", "no tanh",
        also=(Edit("grad_norms_wrt_inputs", "", GRAD_VMAP_JACREV),)),
    "rnn_w_hh_transposed_with_grad_autograd_loop": WrongAnswer(
        "rnn_forward", "+ h @ W_hh)", "+ h @ W_hh.T)", "W_hh used transposed",
        also=(Edit("grad_norms_wrt_inputs", "", GRAD_AUTOGRAD_LOOP_KEYWORDS),)),
    "rnn_relu_with_grad_func_grad": WrongAnswer(
        "rnn_forward", "h = torch.tanh(xw[:, t] + h @ W_hh)", "h = torch.relu(xw[:, t] + h @ W_hh)", "ReLU instead of tanh",
        also=(Edit("grad_norms_wrt_inputs", "", GRAD_FUNC_GRAD),)),
}

"""The chapter 01 reference against PyTorch: nn.RNN for the forward loop, autograd for the gradient norms,
and real stacks of Conv1d layers (their receptive field measured by autograd) for the path lengths.

Tolerances: float64 throughout. The RNN loop and nn.RNN do the same O(T) matmuls and tanh in a different
order, so they agree to rounding: atol=1e-12 on O(1) values. Gradient norms span many orders of magnitude
(that is the point), so they are compared with a relative tolerance, rtol=1e-9, and atol=0.
"""

import pytest
import torch
from torch import nn

from solutions import ch01_rnn_limits as ref

ATOL64 = 1e-12
RTOL_GRAD = 1e-9


def random_rnn(gen, d_in, d_h, scale=1.0, dtype=torch.float64):
    """Weights in our row-vector convention: W_xh (d_in, d_h), W_hh (d_h, d_h), b (d_h,)."""
    W_xh = torch.randn(d_in, d_h, generator=gen, dtype=dtype) / d_in**0.5
    W_hh = scale * torch.randn(d_h, d_h, generator=gen, dtype=dtype) / d_h**0.5
    b = 0.1 * torch.randn(d_h, generator=gen, dtype=dtype)
    return W_xh, W_hh, b


def torch_rnn_from(W_xh, W_hh, b):
    """An nn.RNN holding the same weights (it stores them transposed and splits the bias in two)."""
    d_in, d_h = W_xh.shape
    rnn = nn.RNN(d_in, d_h, nonlinearity="tanh", batch_first=True).to(W_xh.dtype)
    with torch.no_grad():
        rnn.weight_ih_l0.copy_(W_xh.T)
        rnn.weight_hh_l0.copy_(W_hh.T)
        rnn.bias_ih_l0.copy_(b)
        rnn.bias_hh_l0.zero_()
    return rnn


@pytest.mark.parametrize("batch,T,d_in,d_h", [(1, 1, 3, 4), (2, 5, 3, 4), (3, 17, 8, 16), (4, 40, 5, 7)])
def test_rnn_forward_matches_nn_rnn(gen, batch, T, d_in, d_h):
    W_xh, W_hh, b = random_rnn(gen, d_in, d_h)
    x = torch.randn(batch, T, d_in, generator=gen, dtype=torch.float64)
    h0 = torch.randn(batch, d_h, generator=gen, dtype=torch.float64)
    outputs, h_T = ref.rnn_forward(x, h0, W_xh, W_hh, b)
    expected_out, expected_h = torch_rnn_from(W_xh, W_hh, b)(x, h0.unsqueeze(0))  # h: (layers, batch, d_h)
    assert outputs.shape == (batch, T, d_h), f"outputs should be (batch, T, d_h), got {tuple(outputs.shape)}"
    assert h_T.shape == (batch, d_h), f"h_T should be (batch, d_h) without a layer dim, got {tuple(h_T.shape)}"
    torch.testing.assert_close(outputs, expected_out, atol=ATOL64, rtol=0)
    torch.testing.assert_close(h_T, expected_h[0], atol=ATOL64, rtol=0)


def test_rnn_forward_default_h0_is_zero(gen):
    W_xh, W_hh, b = random_rnn(gen, 3, 5)
    x = torch.randn(2, 6, 3, generator=gen, dtype=torch.float64)
    out_none, _ = ref.rnn_forward(x, None, W_xh, W_hh, b)
    out_zero, _ = ref.rnn_forward(x, torch.zeros(2, 5, dtype=torch.float64), W_xh, W_hh, b)
    torch.testing.assert_close(out_none, out_zero, atol=0, rtol=0)
    torch.testing.assert_close(out_none, torch_rnn_from(W_xh, W_hh, b)(x)[0], atol=ATOL64, rtol=0)


def test_rnn_forward_is_causal(gen):
    """Changing x_t changes h_t, h_{t+1}, ... and leaves h_1 .. h_{t-1} exactly as they were."""
    W_xh, W_hh, b = random_rnn(gen, 3, 5)
    x = torch.randn(1, 8, 3, generator=gen, dtype=torch.float64)
    out, _ = ref.rnn_forward(x, None, W_xh, W_hh, b)
    x2 = x.clone()
    x2[:, 4] += 1.0
    out2, _ = ref.rnn_forward(x2, None, W_xh, W_hh, b)
    assert torch.equal(out[:, :4], out2[:, :4]), "hidden states before the changed input must not change"
    assert ((out[:, 4:] - out2[:, 4:]).abs().amax(dim=-1) > 0).all(), "every later hidden state must change"


def autograd_jacobian_norms(x, h0, W_xh, W_hh, b):
    """An independent computation: the full Jacobian of h_T w.r.t. all of x, one sequence at a time."""
    norms = []
    for i in range(x.shape[0]):
        h0_i = None if h0 is None else h0[i : i + 1]
        J = torch.autograd.functional.jacobian(
            lambda xi: ref.rnn_forward(xi, h0_i, W_xh, W_hh, b)[1][0], x[i : i + 1]
        )  # (d_h, 1, T, d_in)
        norms.append(J[:, 0].permute(1, 0, 2).flatten(1).norm(dim=-1))  # (T,) Frobenius norm per t
    return torch.stack(norms)  # (batch, T)


@pytest.mark.parametrize("scale", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("batch,T,d_in,d_h", [(1, 6, 3, 4), (3, 25, 4, 8)])
def test_grad_norms_match_autograd_jacobian(gen, scale, batch, T, d_in, d_h):
    W_xh, W_hh, b = random_rnn(gen, d_in, d_h, scale)
    x = torch.randn(batch, T, d_in, generator=gen, dtype=torch.float64)
    h0 = torch.randn(batch, d_h, generator=gen, dtype=torch.float64)
    norms = ref.grad_norms_wrt_inputs(x, h0, W_xh, W_hh, b)
    assert norms.shape == (batch, T), f"expected one norm per (sequence, time step), got {tuple(norms.shape)}"
    torch.testing.assert_close(norms, autograd_jacobian_norms(x, h0, W_xh, W_hh, b), rtol=RTOL_GRAD, atol=0)


def test_grad_norms_match_nn_rnn_backward(gen):
    """Against nn.RNN's own backward: one backward pass per hidden unit gives one row of each Jacobian."""
    W_xh, W_hh, b = random_rnn(gen, 4, 6, scale=2.0)
    x = torch.randn(2, 30, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    _, h_T = torch_rnn_from(W_xh, W_hh, b)(x)  # h_T: (1, batch, d_h)
    sq = torch.zeros(2, 30, dtype=torch.float64)
    for j in range(6):
        (g,) = torch.autograd.grad(h_T[0, :, j].sum(), x, retain_graph=True)  # (batch, T, d_in)
        sq += (g**2).sum(-1)
    torch.testing.assert_close(ref.grad_norms_wrt_inputs(x.detach(), None, W_xh, W_hh, b), sq.sqrt(),
                               rtol=RTOL_GRAD, atol=0)


def test_grad_norms_vanish_for_small_recurrent_weights(gen):
    W_xh, W_hh, b = random_rnn(gen, 4, 16, scale=0.5)
    x = torch.randn(1, 50, 4, generator=gen, dtype=torch.float64)
    norms = ref.grad_norms_wrt_inputs(x, None, W_xh, W_hh, b)[0]
    assert norms[0] < 1e-8 * norms[-1], f"||dh_T/dx_1|| = {norms[0]:.2e} should be tiny next to {norms[-1]:.2e}"


def test_grad_norms_last_step_is_local():
    """dh_T/dx_T = diag(1 - h_T^2) W_xh^T: with W_hh = 0 and b = 0, every earlier step has zero gradient."""
    x = torch.tensor([[[0.3], [-0.2], [0.5]]], dtype=torch.float64)  # (1, 3, 1)
    W_xh = torch.tensor([[2.0]], dtype=torch.float64)
    norms = ref.grad_norms_wrt_inputs(x, None, W_xh, torch.zeros(1, 1, dtype=torch.float64),
                                      torch.zeros(1, dtype=torch.float64))
    expected_last = 2.0 * (1 - torch.tanh(torch.tensor(1.0, dtype=torch.float64)) ** 2)
    torch.testing.assert_close(norms[0], torch.stack([torch.zeros((), dtype=torch.float64)] * 2 + [expected_last]),
                               atol=ATOL64, rtol=0)


@pytest.mark.parametrize("n,kind,k,expected", [
    (1, "rnn", 3, 0), (2, "rnn", 3, 1), (7, "rnn", 3, 6), (500, "rnn", 3, 499),
    (1, "attention", 3, 0), (2, "attention", 3, 1), (10_000, "attention", 3, 1),
    (1, "cnn", 3, 0), (3, "cnn", 3, 1), (4, "cnn", 3, 2), (5, "cnn", 3, 2), (9, "cnn", 3, 4), (9, "cnn", 5, 2),
    (100, "cnn", 2, 99),
    (1, "dilated_cnn", 3, 0), (3, "dilated_cnn", 3, 1), (4, "dilated_cnn", 3, 2), (9, "dilated_cnn", 3, 2),
    (10, "dilated_cnn", 3, 3), (27, "dilated_cnn", 3, 3), (28, "dilated_cnn", 3, 4), (1024, "dilated_cnn", 2, 10),
    # exact powers where math.log(n, k) rounds up (log(125, 5) = 3.0000000000000004): integers only
    (125, "dilated_cnn", 5, 3), (126, "dilated_cnn", 5, 4), (216, "dilated_cnn", 6, 3), (16807, "dilated_cnn", 7, 5),
])
def test_path_length_known_cases(n, kind, k, expected):
    assert ref.path_length(n, kind, k) == expected, f"path_length({n}, {kind!r}, kernel_size={k})"


def measured_causal_conv_hops(n, k, dilated):
    """Smallest number of stacked causal Conv1d layers whose last output depends on the first input,
    found with autograd on real layers (weights all positive, so no gradient cancels by chance)."""
    for layers in range(1, n + 1):
        convs = []
        for depth in range(layers):
            dil = k**depth if dilated else 1
            conv = nn.Conv1d(1, 1, k, dilation=dil, bias=False, dtype=torch.float64)
            nn.init.constant_(conv.weight, 1.0)
            convs.append((conv, (k - 1) * dil))
        x = torch.zeros(1, 1, n, dtype=torch.float64, requires_grad=True)
        h = x
        for conv, pad in convs:
            h = conv(nn.functional.pad(h, (pad, 0)))  # left padding only: causal, length stays n
        (g,) = torch.autograd.grad(h[0, 0, -1], x)
        if g[0, 0, 0] != 0:
            return layers
    raise AssertionError("unreachable: n layers always suffice")


@pytest.mark.parametrize("n", [2, 5, 9, 16, 30])
@pytest.mark.parametrize("k", [2, 3, 5])
@pytest.mark.parametrize("kind", ["cnn", "dilated_cnn"])
def test_path_length_matches_measured_conv_stack(n, k, kind):
    measured = measured_causal_conv_hops(n, k, dilated=(kind == "dilated_cnn"))
    assert ref.path_length(n, kind, k) == measured, f"n={n}, k={k}: the conv stack needs {measured} layers"


@pytest.mark.parametrize("n", [2, 6, 13])
def test_path_length_rnn_matches_first_step_influence(gen, n):
    """The RNN needs n - 1 recurrent steps: x_1 reaches h_n only through h_1 -> ... -> h_n."""
    W_xh, W_hh, b = random_rnn(gen, 2, 3)
    x = torch.randn(1, n, 2, generator=gen, dtype=torch.float64)
    assert ref.grad_norms_wrt_inputs(x, None, W_xh, W_hh, b)[0, 0] > 0
    assert ref.path_length(n, "rnn") == n - 1


@pytest.mark.parametrize("args,message", [((0, "rnn"), "positive"), ((5, "transformer"), "kind"),
                                          ((5, "cnn", 1), "kernel_size")])
def test_path_length_rejects_bad_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        ref.path_length(*args)


def torch_lstm_cell_from(W_xh, W_hh, b):
    """An nn.LSTMCell holding the same weights (stored transposed, the bias split in two)."""
    d_in, four_d_h = W_xh.shape
    cell = nn.LSTMCell(d_in, four_d_h // 4).to(W_xh.dtype)
    with torch.no_grad():
        cell.weight_ih.copy_(W_xh.T)
        cell.weight_hh.copy_(W_hh.T)
        cell.bias_ih.copy_(b)
        cell.bias_hh.zero_()
    return cell


@pytest.mark.parametrize("batch,d_in,d_h", [(1, 3, 4), (5, 8, 6), (2, 4, 4)])
def test_lstm_cell_step_matches_nn_lstm_cell(gen, batch, d_in, d_h):
    W_xh = torch.randn(d_in, 4 * d_h, generator=gen, dtype=torch.float64)
    W_hh = torch.randn(d_h, 4 * d_h, generator=gen, dtype=torch.float64)
    b = torch.randn(4 * d_h, generator=gen, dtype=torch.float64)
    x = torch.randn(batch, d_in, generator=gen, dtype=torch.float64)
    h, c = torch.randn(2, batch, d_h, generator=gen, dtype=torch.float64)
    h_new, c_new = ref.lstm_cell_step(x, h, c, W_xh, W_hh, b)
    expected_h, expected_c = torch_lstm_cell_from(W_xh, W_hh, b)(x, (h, c))
    torch.testing.assert_close(h_new, expected_h, atol=ATOL64, rtol=0)
    torch.testing.assert_close(c_new, expected_c, atol=ATOL64, rtol=0)


def test_lstm_cell_step_unbatched_and_over_a_sequence_matches_nn_lstm(gen):
    """Without a batch dimension it matches nn.LSTMCell's unbatched mode; looped over time, nn.LSTM."""
    d_in, d_h, T = 3, 5, 9
    lstm = nn.LSTM(d_in, d_h, batch_first=True).double()
    W_xh, W_hh = lstm.weight_ih_l0.detach().T, lstm.weight_hh_l0.detach().T
    b = (lstm.bias_ih_l0 + lstm.bias_hh_l0).detach()
    x = torch.randn(2, T, d_in, generator=gen, dtype=torch.float64)
    h = c = torch.zeros(2, d_h, dtype=torch.float64)
    outputs = []
    for t in range(T):
        h, c = ref.lstm_cell_step(x[:, t], h, c, W_xh, W_hh, b)
        outputs.append(h)
    expected, (h_T, c_T) = lstm(x)
    torch.testing.assert_close(torch.stack(outputs, 1), expected, atol=ATOL64, rtol=0)
    torch.testing.assert_close(c, c_T[0], atol=ATOL64, rtol=0)
    cell = torch_lstm_cell_from(W_xh, W_hh, b)
    h1, c1 = ref.lstm_cell_step(x[0, 0], h[0], c[0], W_xh, W_hh, b)
    e_h, e_c = cell(x[0, 0], (h[0], c[0]))
    assert h1.shape == (d_h,)
    torch.testing.assert_close((h1, c1), (e_h, e_c), atol=ATOL64, rtol=0)


def test_lstm_forget_gate_keeps_the_cell_state():
    """With the forget gate saturated open and the input gate shut, c passes through unchanged."""
    d_in, d_h = 2, 3
    b = torch.zeros(4 * d_h, dtype=torch.float64)
    b[:d_h], b[d_h:2 * d_h] = -50.0, 50.0  # i ~ 0, f ~ 1
    c = torch.tensor([[0.5, -1.0, 2.0]], dtype=torch.float64)
    _, c_new = ref.lstm_cell_step(torch.ones(1, d_in, dtype=torch.float64), torch.zeros(1, d_h, dtype=torch.float64), c,
                                  torch.zeros(d_in, 4 * d_h, dtype=torch.float64), torch.zeros(d_h, 4 * d_h, dtype=torch.float64), b)
    torch.testing.assert_close(c_new, c, atol=1e-12, rtol=0)

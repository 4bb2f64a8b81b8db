"""Reference solutions for chapter 01-rnn-limits: why not RNNs.

This module is the single source of truth for the chapter's exercises:
- `rnn_forward`: the step-by-step loop of a vanilla tanh RNN (the sequential dependency h_t <- h_{t-1});
- `grad_norms_wrt_inputs`: the gradient-norm experiment, ||dh_T/dx_t|| for every t (vanishing/exploding);
- `path_length`: how many sequential hops separate the first and the last position in an RNN,
  a self-attention layer or a stack of convolutions;
- `lstm_cell_step`: one step of an LSTM cell (the gates that fight vanishing gradients), equal to nn.LSTMCell.

Conventions used throughout the course: batch-first shapes, written as comments, e.g. (batch, seq, d_in).
Weights act on row vectors, x @ W, as in chapter 02: W_xh is (d_in, d_h), not nn.RNN's (d_h, d_in).
"""

import torch
from torch import Tensor

PATH_KINDS = ("rnn", "attention", "cnn", "dilated_cnn")


def rnn_forward(x: Tensor, h0: Tensor | None, W_xh: Tensor, W_hh: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """A vanilla (Elman) RNN with tanh, one time step after the other.

        h_t = tanh(x_t @ W_xh + h_{t-1} @ W_hh + b),   t = 1..T

    x: (batch, T, d_in)   h0: (batch, d_h) or None (zeros)
    W_xh: (d_in, d_h)   W_hh: (d_h, d_h)   b: (d_h,)
    returns (outputs (batch, T, d_h) = [h_1, ..., h_T], h_T (batch, d_h))

    Equals torch.nn.RNN(d_in, d_h, nonlinearity="tanh", batch_first=True) with
    W_xh = weight_ih_l0.T, W_hh = weight_hh_l0.T, b = bias_ih_l0 + bias_hh_l0
    (nn.RNN returns h_T with a leading layer dimension: (1, batch, d_h)).
    """
    batch, T, _ = x.shape
    h = x.new_zeros(batch, W_hh.shape[0]) if h0 is None else h0  # (batch, d_h)
    xw = x @ W_xh + b  # (batch, T, d_h): the input part does not depend on h, so do it for all t at once
    outputs = []
    for t in range(T):  # the recurrence itself cannot be parallelised: h_t needs h_{t-1}
        h = torch.tanh(xw[:, t] + h @ W_hh)  # (batch, d_h)
        outputs.append(h)
    if not outputs:
        return x.new_zeros(batch, 0, W_hh.shape[0]), h
    return torch.stack(outputs, dim=1), h  # (batch, T, d_h), (batch, d_h)


def grad_norms_wrt_inputs(x: Tensor, h0: Tensor | None, W_xh: Tensor, W_hh: Tensor, b: Tensor) -> Tensor:
    """||dh_T/dx_t||_F for every t: how strongly the last hidden state reacts to each input.

    x: (batch, T, d_in), h0/W_xh/W_hh/b as in rnn_forward.
    returns (batch, T): entry [i, t] is the Frobenius norm of the Jacobian dh_T/dx_t, a (d_h, d_in) matrix,
    for sequence i (sequences in a batch do not interact, so each has its own Jacobian).

    By the chain rule (with a_s = x_s W_xh + h_{s-1} W_hh + b and h_s = tanh(a_s)),
        dh_T/dx_t = [prod_{s=T..t+1} diag(1 - h_s^2) W_hh^T] diag(1 - h_t^2) W_xh^T,
    a product of T - t step Jacobians: it shrinks or grows geometrically with the distance T - t.
    """
    outputs, _ = rnn_forward(x, h0, W_xh, W_hh, b)  # (batch, T, d_h)
    batch, T, d_h = outputs.shape
    # G = dh_T/dh_s, (batch, d_h, d_h), starting at s = T with the identity.
    G = torch.eye(d_h, dtype=x.dtype, device=x.device).expand(batch, d_h, d_h)
    norms = x.new_zeros(batch, T)
    for t in range(T - 1, -1, -1):
        G_a = G * (1 - outputs[:, t] ** 2).unsqueeze(1)  # dh_T/da_t = G diag(1 - h_t^2), (batch, d_h, d_h)
        norms[:, t] = torch.linalg.matrix_norm(G_a @ W_xh.T)  # dh_T/dx_t, (batch, d_h, d_in)
        G = G_a @ W_hh.T  # dh_T/dh_{t-1}
    return norms


def path_length(n: int, kind: str, kernel_size: int = 3) -> int:
    """Maximum path length: the number of sequential hops from the first to the last of n positions.

    kind:
      "rnn"          n - 1 recurrent steps (h_1 -> h_2 -> ... -> h_n)              O(n)
      "attention"    1 layer: every position attends to every other directly        O(1)
      "cnn"          layers of contiguous (causal) convolutions of width k; L layers see
                     1 + L (k - 1) positions, so L = ceil((n - 1) / (k - 1))        O(n / k)
      "dilated_cnn"  width k, dilations 1, k, k^2, ... (WaveNet/ByteNet); L layers see
                     k^L positions, so L = ceil(log_k n)                            O(log_k n)
    kernel_size (k >= 2) is used by the two convolutional kinds only. n = 1 gives 0 for every kind.
    """
    if n < 1:
        raise ValueError(f"n must be a positive sequence length, got {n}")
    if kind not in PATH_KINDS:
        raise ValueError(f"kind must be one of {PATH_KINDS}, got {kind!r}")
    if kind in ("cnn", "dilated_cnn") and kernel_size < 2:
        raise ValueError(f"kernel_size must be >= 2 for a convolution to reach a neighbour, got {kernel_size}")
    if n == 1:
        return 0
    if kind == "rnn":
        return n - 1
    if kind == "attention":
        return 1
    if kind == "cnn":
        return -(-(n - 1) // (kernel_size - 1))  # ceil((n - 1) / (k - 1)) in integers
    layers, field = 0, 1  # dilated: integer loop, no floating-point log
    while field < n:
        field *= kernel_size
        layers += 1
    return layers


def lstm_cell_step(x: Tensor, h: Tensor, c: Tensor, W_xh: Tensor, W_hh: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """One step of an LSTM cell, gates in PyTorch's order (input, forget, cell candidate, output):

        [i, f, g, o] = x @ W_xh + h @ W_hh + b          (split the 4 d_h columns into four blocks of d_h)
        i, f, o = sigmoid(i), sigmoid(f), sigmoid(o);  g = tanh(g)
        c_new = f * c + i * g
        h_new = o * tanh(c_new)

    x: (..., d_in)   h, c: (..., d_h)   W_xh: (d_in, 4 d_h)   W_hh: (d_h, 4 d_h)   b: (4 d_h,)
    returns (h_new, c_new), each (..., d_h), like nn.LSTMCell.

    Equals torch.nn.LSTMCell(d_in, d_h) with W_xh = weight_ih.T, W_hh = weight_hh.T, b = bias_ih + bias_hh.
    """
    gates = x @ W_xh + h @ W_hh + b  # (..., 4 d_h)
    i, f, g, o = gates.chunk(4, dim=-1)  # (..., d_h) each
    c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)  # additive update of the cell state
    h_new = torch.sigmoid(o) * torch.tanh(c_new)
    return h_new, c_new

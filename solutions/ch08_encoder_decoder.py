"""Reference solutions for chapter 08-encoder-decoder: decoder layer, encoder/decoder stacks, the full model.

This module is the single source of truth for the chapter's exercises (DecoderLayer,
transformer_parameter_count, greedy_decode, train_step); the instructor notebook's solution cells are
generated from it and the hidden grading checks compare learners' code against it. ToyTranslator is the
small model the exercises of greedy_decode and train_step run on (the notebook gives it in a read-only cell).

It builds on the earlier chapters' reference modules:
- ch04 MultiHeadAttention   (self-attention and cross-attention),
- ch05 causal_mask, padding_mask,
- ch06 PositionalEncoding   (sinusoidal, batch-first),
- ch07 FeedForward, EncoderLayer.

Conventions used throughout the course:
- batch-first shapes, written as comments: (batch, heads, seq, d_k);
- boolean masks with True = "may attend" (the same convention as
  torch.nn.functional.scaled_dot_product_attention). torch.nn.Transformer* layers use the opposite
  one (True = NOT allowed): pass them ~mask.

Which attention gets which mask (the source notes 002 §2.5.5 and §2.12.5 say cross-attention needs no
mask; that is only true when no source sentence is padded):
- encoder self-attention:  source padding mask     (B, 1, 1, Ts)
- decoder self-attention:  causal mask, AND the target padding mask if targets are padded  (Tt, Tt)
- cross-attention:         source padding mask     (B, 1, 1, Ts), the same one as the encoder's
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from solutions.ch04_multi_head import MultiHeadAttention, copy_to_torch_mha
from solutions.ch05_masks import causal_mask
from solutions.ch06_positional_encoding import PositionalEncoding
from solutions.ch07_ffn_layernorm import EncoderLayer, FeedForward


class DecoderLayer(nn.Module):
    """One decoder layer (Vaswani et al. 2017, section 3.1): three sub-layers, each with a residual.

    1. masked (causal) multi-head self-attention over the target prefix,
    2. multi-head cross-attention: queries from the decoder, keys and values from the encoder output
       ("memory"),
    3. position-wise feed-forward network.

    norm_first=False (Post-LN, the paper):  x = norm(x + sublayer(x))
    norm_first=True  (Pre-LN):              x = x + sublayer(norm(x))

    forward(x (B, Tt, D), memory (B, Ts, D), tgt_mask=None, memory_mask=None) -> (B, Tt, D)
        tgt_mask:    bool, broadcastable to (B, H, Tt, Tt), True = may attend (usually causal)
        memory_mask: bool, broadcastable to (B, H, Tt, Ts), True = may attend (usually the source
                     padding mask (B, 1, 1, Ts))
    After each forward, self.self_weights (B, H, Tt, Tt) and self.cross_weights (B, H, Tt, Ts) hold
    the attention weights (detached), for plotting.

    Equals nn.TransformerDecoderLayer(batch_first=True, same norm_first) with copied weights.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)  # on each sub-layer's output, before the residual add
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)
        self.norm_first = norm_first
        self.self_weights: Tensor | None = None
        self.cross_weights: Tensor | None = None

    def _self_block(self, x: Tensor, mask: Tensor | None) -> Tensor:
        out, w = self.self_attn(x, x, x, mask)  # (B, Tt, D), (B, H, Tt, Tt)
        self.self_weights = w.detach()
        return self.dropout1(out)

    def _cross_block(self, x: Tensor, memory: Tensor, mask: Tensor | None) -> Tensor:
        out, w = self.cross_attn(x, memory, memory, mask)  # Q from the decoder, K and V from the memory
        self.cross_weights = w.detach()  # (B, H, Tt, Ts)
        return self.dropout2(out)  # (B, Tt, D)

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.dropout3(self.ff(x))

    def forward(
        self, x: Tensor, memory: Tensor, tgt_mask: Tensor | None = None, memory_mask: Tensor | None = None
    ) -> Tensor:
        if self.norm_first:
            x = x + self._self_block(self.norm1(x), tgt_mask)
            x = x + self._cross_block(self.norm2(x), memory, memory_mask)
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._self_block(x, tgt_mask))
            x = self.norm2(x + self._cross_block(x, memory, memory_mask))
            x = self.norm3(x + self._ff_block(x))
        return x  # (B, Tt, D)


def copy_to_torch_decoder_layer(layer: DecoderLayer) -> nn.TransformerDecoderLayer:
    """An nn.TransformerDecoderLayer(batch_first=True, dropout=0) with the same weights as `layer`.

    Call it as torch_layer(x, memory, tgt_mask=~tgt_mask, memory_key_padding_mask=~src_mask[:, 0, 0, :]):
    PyTorch's boolean masks mean True = NOT allowed, and its memory padding mask is (B, Ts) with
    True = padding. Its cross-attention is called multihead_attn.
    """
    w = layer.norm1.weight
    torch_layer = nn.TransformerDecoderLayer(
        layer.self_attn.d_model,
        layer.self_attn.n_heads,
        dim_feedforward=layer.ff.linear1.out_features,
        dropout=0.0,
        activation=layer.ff.activation,
        batch_first=True,
        norm_first=layer.norm_first,
        device=w.device,
        dtype=w.dtype,
    )
    torch_layer.self_attn = copy_to_torch_mha(layer.self_attn)
    torch_layer.multihead_attn = copy_to_torch_mha(layer.cross_attn)
    with torch.no_grad():
        for name in ("linear1", "linear2"):  # our FFN lives in .ff; PyTorch's directly in the layer
            getattr(torch_layer, name).weight.copy_(getattr(layer.ff, name).weight)
            getattr(torch_layer, name).bias.copy_(getattr(layer.ff, name).bias)
        for name in ("norm1", "norm2", "norm3"):
            getattr(torch_layer, name).weight.copy_(getattr(layer, name).weight)
            getattr(torch_layer, name).bias.copy_(getattr(layer, name).bias)
    return torch_layer


class Encoder(nn.Module):
    """A stack of n_layers EncoderLayer (chapter 7), with an optional final LayerNorm.

    final_norm defaults to norm_first: a Pre-LN stack needs a LayerNorm at its end (its residual
    stream is never normalised otherwise); the paper's Post-LN stack has none. torch.nn.Transformer
    always adds one.

    forward(x (B, Ts, D), mask=None) -> memory (B, Ts, D);  mask: bool (B, 1, 1, Ts), True = may attend
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        n_layers: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        final_norm: bool | None = None,
    ):
        super().__init__()
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, n_heads, d_ff, dropout=dropout, norm_first=norm_first, activation=activation)
            for _ in range(n_layers)
        )
        use_norm = norm_first if final_norm is None else final_norm
        self.norm = nn.LayerNorm(d_model) if use_norm else None

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        for layer in self.layers:
            x = layer(x, mask)  # (B, Ts, D)
        return self.norm(x) if self.norm is not None else x


class Decoder(nn.Module):
    """A stack of n_layers DecoderLayer, with an optional final LayerNorm (see Encoder).

    forward(x (B, Tt, D), memory (B, Ts, D), tgt_mask=None, memory_mask=None) -> (B, Tt, D)
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        n_layers: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        final_norm: bool | None = None,
    ):
        super().__init__()
        self.layers = nn.ModuleList(
            DecoderLayer(d_model, n_heads, d_ff, dropout=dropout, norm_first=norm_first, activation=activation)
            for _ in range(n_layers)
        )
        use_norm = norm_first if final_norm is None else final_norm
        self.norm = nn.LayerNorm(d_model) if use_norm else None

    def forward(
        self, x: Tensor, memory: Tensor, tgt_mask: Tensor | None = None, memory_mask: Tensor | None = None
    ) -> Tensor:
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask)  # (B, Tt, D)
        return self.norm(x) if self.norm is not None else x


class Transformer(nn.Module):
    """The encoder-decoder Transformer: token embeddings (times sqrt(d_model)), sinusoidal positions,
    an Encoder and a Decoder of n_layers layers each, and a linear output projection to tgt_vocab logits.

    share_embeddings: one embedding matrix for source and target (needs src_vocab == tgt_vocab); the
        paper does this with its shared 37000-token BPE vocabulary.
    tie_output: the output projection reuses the target embedding matrix (the paper, section 3.4).
    The output projection has no bias (with tie_output, a bias would be the only untied part).

    Shapes: src (B, Ts) and tgt (B, Tt) are LongTensors of token ids; tgt is the decoder INPUT
    (the target shifted right, starting with BOS).
    forward(src, tgt, src_mask=None, tgt_mask=None) -> logits (B, Tt, tgt_vocab)
        src_mask: bool (B, 1, 1, Ts), True = real source token; used by the encoder's self-attention
                  AND by every cross-attention (padded source positions must be hidden from both).
        tgt_mask: bool broadcastable to (B, 1, Tt, Tt), True = may attend; default: causal_mask(Tt).
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        d_model: int = 512,
        n_heads: int = 8,
        d_ff: int = 2048,
        n_layers: int = 6,
        dropout: float = 0.0,
        max_len: int = 512,
        norm_first: bool = False,
        share_embeddings: bool = False,
        tie_output: bool = False,
        activation: str = "relu",
        final_norm: bool | None = None,
    ):
        super().__init__()
        if share_embeddings and src_vocab != tgt_vocab:
            raise ValueError(f"share_embeddings needs one vocabulary, got {src_vocab} and {tgt_vocab}")
        self.d_model = d_model
        self.src_embed = nn.Embedding(src_vocab, d_model)
        self.tgt_embed = self.src_embed if share_embeddings else nn.Embedding(tgt_vocab, d_model)
        self.pos = PositionalEncoding(d_model, max_len=max_len, dropout=dropout)
        kw = dict(dropout=dropout, norm_first=norm_first, activation=activation, final_norm=final_norm)
        self.encoder = Encoder(d_model, n_heads, d_ff, n_layers, **kw)
        self.decoder = Decoder(d_model, n_heads, d_ff, n_layers, **kw)
        self.out_proj = nn.Linear(d_model, tgt_vocab, bias=False)
        self._reset_parameters()
        if tie_output:
            self.out_proj.weight = self.tgt_embed.weight  # one Parameter, counted once

    def _reset_parameters(self) -> None:
        # Xavier-uniform for every matrix, as torch.nn.Transformer does; biases and LayerNorms keep
        # their defaults. Embeddings then have entries of size ~1/sqrt(d_model) before the sqrt(d_model)
        # scale, so embedding and positional encoding have comparable sizes.
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def embed_src(self, src: Tensor) -> Tensor:
        return self.pos(self.src_embed(src) * math.sqrt(self.d_model))  # (B, Ts, D)

    def embed_tgt(self, tgt: Tensor) -> Tensor:
        return self.pos(self.tgt_embed(tgt) * math.sqrt(self.d_model))  # (B, Tt, D)

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """src (B, Ts) -> memory (B, Ts, D)."""
        return self.encoder(self.embed_src(src), src_mask)

    def decode(
        self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None
    ) -> Tensor:
        """tgt (B, Tt), memory (B, Ts, D) -> logits (B, Tt, tgt_vocab)."""
        if tgt_mask is None:
            tgt_mask = causal_mask(tgt.size(1), device=tgt.device)  # (Tt, Tt)
        h = self.decoder(self.embed_tgt(tgt), memory, tgt_mask, src_mask)  # (B, Tt, D)
        return self.out_proj(h)  # (B, Tt, tgt_vocab)

    def forward(
        self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None
    ) -> Tensor:
        memory = self.encode(src, src_mask)  # (B, Ts, D)
        return self.decode(tgt, memory, src_mask, tgt_mask)  # (B, Tt, tgt_vocab)


def count_parameters(module: nn.Module) -> int:
    """Number of scalar parameters. A Parameter shared by several submodules (tied embeddings) counts once:
    module.parameters() yields each Parameter object once."""
    return sum(p.numel() for p in module.parameters())


def transformer_parameter_count(
    src_vocab: int,
    tgt_vocab: int,
    d_model: int,
    d_ff: int,
    n_layers: int,
    share_embeddings: bool = False,
    tie_output: bool = False,
    final_norm: bool = False,
) -> int:
    """Closed form of count_parameters(Transformer(...)) with the same arguments.

    Per attention block 4 d^2 + 4 d (W_Q, W_K, W_V, W_O and their biases), per FFN 2 d d_ff + d_ff + d,
    per LayerNorm 2 d (gain and bias). An encoder layer has 1 attention, 1 FFN, 2 LayerNorms; a decoder
    layer 2 attentions, 1 FFN, 3 LayerNorms. The number of heads does not appear: it only decides how
    the d x d projections are cut.
    """
    d = d_model
    attn = 4 * d * d + 4 * d
    ffn = 2 * d * d_ff + d_ff + d
    ln = 2 * d
    enc_layer = attn + ffn + 2 * ln
    dec_layer = 2 * attn + ffn + 3 * ln
    embeddings = src_vocab * d + (0 if share_embeddings else tgt_vocab * d)
    output = 0 if tie_output else tgt_vocab * d
    finals = 2 * ln if final_norm else 0
    return n_layers * (enc_layer + dec_layer) + embeddings + output + finals


@torch.no_grad()
def greedy_decode(
    model: nn.Module,
    src: Tensor,
    max_len: int,
    bos_id: int,
    eos_id: int,
    src_mask: Tensor | None = None,
    pad_id: int | None = None,
) -> Tensor:
    """Greedy autoregressive decoding: encode once, then repeatedly append the most likely next token.

    src (B, Ts) -> LongTensor (B, 1 + n) with n <= max_len generated tokens; column 0 is BOS.
    A sequence is finished once it has produced EOS; after that its positions are filled with pad_id
    (or eos_id if pad_id is None). Decoding stops as soon as every sequence is finished, or after
    max_len steps. The model is put in eval mode (no dropout) for the call and restored afterwards, so
    the result is deterministic.
    """
    was_training = model.training
    model.eval()
    fill = eos_id if pad_id is None else pad_id
    memory = model.encode(src, src_mask)  # (B, Ts, D), computed once
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)  # (B,)
    for _ in range(max_len):
        logits = model.decode(ys, memory, src_mask)  # (B, t, V): recomputes the prefix (no KV cache)
        next_tok = logits[:, -1].argmax(dim=-1)  # (B,) the most likely next token
        next_tok = torch.where(finished, torch.full_like(next_tok, fill), next_tok)
        ys = torch.cat([ys, next_tok[:, None]], dim=1)  # (B, t + 1)
        finished |= next_tok == eos_id
        if finished.all():
            break
    model.train(was_training)
    return ys


class ToyTranslator(nn.Module):
    """A one-layer stand-in for Transformer with its interface (encode, decode, forward), for the exercises on
    decoding and training: learned token and position embeddings (the encoder adds to each source position the
    mean of the real ones, so that src_mask matters to encode too), one causal self-attention and one
    cross-attention (each a residual branch, no LayerNorm, no FFN, no dropout, no attention biases), and an
    output projection: 13 parameter tensors.

    encode(src (B, Ts), src_mask=None) -> memory (B, Ts, D)
    decode(tgt (B, Tt), memory (B, Ts, D), src_mask=None) -> logits (B, Tt, tgt_vocab)
    forward(src, tgt, src_mask=None) -> logits (B, Tt, tgt_vocab)
        src_mask: bool (B, 1, 1, Ts), True = real source token (the course's convention)
    Position t of the logits depends on tgt[:, :t + 1] only (the causal mask), as in Transformer.
    """

    def __init__(self, src_vocab: int, tgt_vocab: int, d_model: int, n_heads: int, max_len: int = 32):
        super().__init__()
        self.src_embed = nn.Embedding(src_vocab, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)  # learned positions: the same table for source and target
        self.self_attn = MultiHeadAttention(d_model, n_heads, bias=False)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, bias=False)
        self.out_proj = nn.Linear(d_model, tgt_vocab)

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        positions = torch.arange(src.size(1), device=src.device)  # (Ts,)
        x = self.src_embed(src) + self.pos(positions)  # (B, Ts, D)
        # Every position also gets the mean of the real source positions (src_mask True; all of them without a
        # mask): the memory depends on src_mask, so a caller that leaves the mask out gets other results.
        real = torch.ones_like(src, dtype=x.dtype) if src_mask is None else src_mask.reshape(src.shape).to(x.dtype)  # (B, Ts)
        context = (x * real[..., None]).sum(1) / real.sum(1).clamp_min(1)[..., None]  # (B, D)
        return x + context[:, None]  # (B, Ts, D)

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None = None) -> Tensor:
        t = tgt.size(1)
        y = self.tgt_embed(tgt) + self.pos(torch.arange(t, device=tgt.device))  # (B, Tt, D)
        causal = torch.ones(t, t, dtype=torch.bool, device=tgt.device).tril()  # (Tt, Tt) True = may attend
        y = y + self.self_attn(y, y, y, causal)[0]  # (B, Tt, D)
        y = y + self.cross_attn(y, memory, memory, src_mask)[0]  # Q from the target, K and V from the memory
        return self.out_proj(y)  # (B, Tt, tgt_vocab)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None) -> Tensor:
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


def train_step(
    model: nn.Module,
    src: Tensor,
    tgt: Tensor,
    src_mask: Tensor | None,
    pad_id: int,
    eps: float = 0.0,
    lr: float = 0.1,
    steps: int = 1,
    optimizer: torch.optim.Optimizer | None = None,
) -> Tensor:
    """`steps` optimisation steps of a sequence-to-sequence model on one batch, with teacher forcing.

    src (B, Ts), tgt (B, T) LongTensors; tgt is the whole target, <s> y_1 ... y_n </s> then padding.
    The decoder input is tgt[:, :-1] (the target shifted right, starting with <s>) and the labels are
    tgt[:, 1:] (position i predicts the token after it). The loss is the cross-entropy with label smoothing
    eps, averaged over the label positions that are not pad_id (padding is left out of the loss).
    optimizer: the one to step (kept across calls, e.g. Adam on the chapter page); None: plain SGD with
    learning rate lr, made here. Returns the loss of each step, before its update: (steps,), detached.
    """
    if optimizer is None:
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    dec_in, labels = tgt[:, :-1], tgt[:, 1:]  # (B, T - 1) each: teacher forcing
    losses = []
    for _ in range(steps):
        logits = model(src, dec_in, src_mask)  # (B, T - 1, V)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=pad_id,
                               label_smoothing=eps)  # mean over the non-padding labels
        optimizer.zero_grad()  # gradients add up in .grad: clear the previous step's
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses)  # (steps,)

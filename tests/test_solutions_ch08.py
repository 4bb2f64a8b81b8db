"""The chapter 08 reference (decoder layer, stacks, full model, greedy decoding) against PyTorch.

Tolerances: float64 for every comparison with torch's layers, atol=1e-10. A decoder layer is three
attention/FFN blocks and three LayerNorms on O(1) values; float64 rounding stays near 1e-15 per
operation, so 1e-10 leaves a wide margin while still catching any wrong mask, norm or residual
(those change outputs at the 1e-2 level or more).

Mask conventions: ours is True = may attend; torch.nn.Transformer* is True = NOT allowed, and its
memory padding mask is (B, Ts) with True = padding. Every comparison passes ~mask to torch.
"""

import pytest
import torch
from torch import nn

from solutions import ch08_encoder_decoder as ref
from solutions.ch04_multi_head import MultiHeadAttention
from solutions.ch05_masks import causal_mask, padding_mask

ATOL64 = 1e-10
D, H, D_FF = 16, 4, 32


def copy_mha(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    """nn.MultiheadAttention packs W_Q, W_K, W_V into in_proj_weight (3D, D), rows in the order q, k, v."""
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
        theirs.out_proj.weight.copy_(ours.w_o.weight)
        theirs.out_proj.bias.copy_(ours.w_o.bias)


def copy_linear_norm(ours: nn.Module, theirs: nn.Module) -> None:
    with torch.no_grad():
        theirs.weight.copy_(ours.weight)
        theirs.bias.copy_(ours.bias)


def copy_decoder_layer(ours: ref.DecoderLayer, theirs: nn.TransformerDecoderLayer) -> None:
    copy_mha(ours.self_attn, theirs.self_attn)
    copy_mha(ours.cross_attn, theirs.multihead_attn)
    copy_linear_norm(ours.ff.linear1, theirs.linear1)
    copy_linear_norm(ours.ff.linear2, theirs.linear2)
    for i in (1, 2, 3):
        copy_linear_norm(getattr(ours, f"norm{i}"), getattr(theirs, f"norm{i}"))


def copy_encoder_layer(ours: nn.Module, theirs: nn.TransformerEncoderLayer) -> None:
    copy_mha(ours.self_attn, theirs.self_attn)
    copy_linear_norm(ours.ff.linear1, theirs.linear1)
    copy_linear_norm(ours.ff.linear2, theirs.linear2)
    copy_linear_norm(ours.norm1, theirs.norm1)
    copy_linear_norm(ours.norm2, theirs.norm2)


def randomise_norms(module: nn.Module, gen: torch.Generator) -> None:
    """LayerNorms start as gain 1, bias 0, which would hide a swapped norm1/norm2; give them random values."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(1 + 0.3 * torch.randn(m.weight.shape, generator=gen, dtype=m.weight.dtype))
                m.bias.copy_(0.3 * torch.randn(m.bias.shape, generator=gen, dtype=m.bias.dtype))


def make_inputs(gen, batch=3, t_tgt=5, t_src=7):
    x = torch.randn(batch, t_tgt, D, generator=gen, dtype=torch.float64)
    memory = torch.randn(batch, t_src, D, generator=gen, dtype=torch.float64)
    lengths = torch.tensor([t_src, 4, 2][:batch])  # every source has at least one real token
    return x, memory, lengths


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch(gen, norm_first):
    torch.manual_seed(0)
    ours = ref.DecoderLayer(D, H, D_FF, norm_first=norm_first).double().eval()
    randomise_norms(ours, gen)
    theirs = nn.TransformerDecoderLayer(
        D, H, D_FF, dropout=0.0, batch_first=True, norm_first=norm_first, dtype=torch.float64
    ).eval()
    copy_decoder_layer(ours, theirs)

    x, memory, lengths = make_inputs(gen)
    tgt_mask = causal_mask(x.size(1))  # (Tt, Tt) True = may attend
    mem_mask = padding_mask(lengths, memory.size(1))  # (B, 1, 1, Ts) True = real token
    out = ours(x, memory, tgt_mask=tgt_mask, memory_mask=mem_mask)
    expected = theirs(
        x,
        memory,
        tgt_mask=~tgt_mask,  # torch: True = NOT allowed
        memory_key_padding_mask=~mem_mask[:, 0, 0, :],  # torch: (B, Ts), True = padding
    )
    assert out.shape == x.shape
    torch.testing.assert_close(
        out, expected, atol=ATOL64, rtol=0,
        msg=lambda m: f"DecoderLayer(norm_first={norm_first}) differs from nn.TransformerDecoderLayer. "
        "Check the order self-attn -> cross-attn -> FFN, which norm goes where, and that cross-attention "
        f"takes Q from x and K, V from memory.\n{m}",
    )


def test_decoder_layer_cross_attention_uses_memory_and_ignores_padding(gen):
    torch.manual_seed(1)
    layer = ref.DecoderLayer(D, H, D_FF).double().eval()
    x, memory, lengths = make_inputs(gen)
    mem_mask = padding_mask(lengths, memory.size(1))
    out = layer(x, memory, causal_mask(x.size(1)), mem_mask)
    assert layer.cross_weights.shape == (3, H, x.size(1), memory.size(1)), "cross weights are (B, H, Tt, Ts)"
    # Changing the padded memory rows must not change anything; changing a real one must.
    memory2 = memory.clone()
    memory2[1, 4:] = 100.0  # rows beyond length 4 of sequence 1 are padding
    torch.testing.assert_close(layer(x, memory2, causal_mask(x.size(1)), mem_mask), out, atol=ATOL64, rtol=0)
    assert (layer.cross_weights[1, :, :, 4:] == 0).all(), "padded source positions must get zero weight"
    memory3 = memory.clone()
    memory3[1, 0] += 1.0
    assert not torch.allclose(layer(x, memory3, causal_mask(x.size(1)), mem_mask)[1], out[1])


def test_decoder_layer_is_causal(gen):
    """Output position i depends on target positions <= i only (checked by gradients)."""
    torch.manual_seed(2)
    layer = ref.DecoderLayer(D, H, D_FF).double().eval()
    x, memory, _ = make_inputs(gen, batch=1)
    x.requires_grad_(True)
    i = 2
    probe = torch.randn(D, generator=gen, dtype=torch.float64)  # not .sum(): a LayerNorm output sums to a constant
    (layer(x, memory, causal_mask(x.size(1)))[0, i] @ probe).backward()
    leak = x.grad[0, i + 1:].abs().max().item()
    assert leak == 0, f"output position {i} has a gradient {leak:.2e} from a future position: is the mask causal?"
    assert x.grad[0, : i + 1].abs().sum() > 0


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")  # nn.Transformer's own notice for Pre-LN
@pytest.mark.parametrize("norm_first", [False, True])
def test_stacks_match_nn_transformer(gen, norm_first):
    """Encoder + Decoder (with final norms, as nn.Transformer always has) vs nn.Transformer, copied weights."""
    torch.manual_seed(3)
    n_layers = 2
    enc = ref.Encoder(D, H, D_FF, n_layers, norm_first=norm_first, final_norm=True).double().eval()
    dec = ref.Decoder(D, H, D_FF, n_layers, norm_first=norm_first, final_norm=True).double().eval()
    randomise_norms(enc, gen)
    randomise_norms(dec, gen)
    theirs = nn.Transformer(
        D, H, n_layers, n_layers, D_FF, dropout=0.0, batch_first=True, norm_first=norm_first, dtype=torch.float64
    ).eval()
    for o, t in zip(enc.layers, theirs.encoder.layers):
        copy_encoder_layer(o, t)
    for o, t in zip(dec.layers, theirs.decoder.layers):
        copy_decoder_layer(o, t)
    copy_linear_norm(enc.norm, theirs.encoder.norm)
    copy_linear_norm(dec.norm, theirs.decoder.norm)

    tgt, src, lengths = make_inputs(gen)
    src_mask = padding_mask(lengths, src.size(1))  # (B, 1, 1, Ts)
    tgt_mask = causal_mask(tgt.size(1))
    out = dec(tgt, enc(src, src_mask), tgt_mask, src_mask)
    key_pad = ~src_mask[:, 0, 0, :]  # (B, Ts) True = padding
    expected = theirs(
        src, tgt, tgt_mask=~tgt_mask, src_key_padding_mask=key_pad, memory_key_padding_mask=key_pad
    )
    torch.testing.assert_close(out, expected, atol=ATOL64, rtol=0)


def test_final_norm_default_follows_norm_first():
    assert ref.Encoder(D, H, D_FF, 1).norm is None, "the paper's Post-LN stack has no final LayerNorm"
    assert ref.Decoder(D, H, D_FF, 1, norm_first=True).norm is not None, "a Pre-LN stack needs one"


def small_model(**kw):
    torch.manual_seed(4)
    cfg = dict(src_vocab=11, tgt_vocab=13, d_model=D, n_heads=H, d_ff=D_FF, n_layers=2, max_len=32)
    cfg.update(kw)
    return ref.Transformer(**cfg).eval()


def test_transformer_shapes(gen):
    model = small_model()
    src = torch.randint(0, 11, (3, 7), generator=gen)
    tgt = torch.randint(0, 13, (3, 5), generator=gen)
    src_mask = padding_mask(torch.tensor([7, 4, 2]), 7)
    memory = model.encode(src, src_mask)
    assert memory.shape == (3, 7, D), f"memory: expected (B, Ts, D) = (3, 7, {D}), got {tuple(memory.shape)}"
    logits = model(src, tgt, src_mask)
    assert logits.shape == (3, 5, 13), f"logits: expected (B, Tt, tgt_vocab) = (3, 5, 13), got {tuple(logits.shape)}"
    assert torch.isfinite(logits).all()
    for layer in model.decoder.layers:
        assert layer.cross_weights.shape == (3, H, 5, 7), "cross-attention weights are tgt_len x src_len"


def test_transformer_decoder_is_causal_and_ignores_source_padding(gen):
    model = small_model()
    src = torch.randint(0, 11, (2, 6), generator=gen)
    tgt = torch.randint(0, 13, (2, 5), generator=gen)
    src_mask = padding_mask(torch.tensor([6, 3]), 6)
    logits = model(src, tgt, src_mask)
    tgt2 = tgt.clone()
    tgt2[:, 3:] = (tgt2[:, 3:] + 1) % 13  # change future target tokens
    torch.testing.assert_close(model(src, tgt2, src_mask)[:, :3], logits[:, :3], atol=1e-6, rtol=0)
    src2 = src.clone()
    src2[1, 3:] = (src2[1, 3:] + 1) % 11  # change the padded source tokens of sequence 1
    torch.testing.assert_close(model(src2, tgt, src_mask), logits, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "share,tie,norm_first",
    [(False, False, False), (True, True, False), (False, True, True), (True, False, True)],
)
def test_parameter_count_formula(share, tie, norm_first):
    v = 13
    model = ref.Transformer(v, v, D, H, D_FF, n_layers=3, share_embeddings=share, tie_output=tie, norm_first=norm_first)
    formula = ref.transformer_parameter_count(
        v, v, D, D_FF, 3, share_embeddings=share, tie_output=tie, final_norm=norm_first
    )
    assert ref.count_parameters(model) == formula


def test_count_parameters_counts_shared_weights_once():
    model = ref.Transformer(20, 20, D, H, D_FF, n_layers=1, share_embeddings=True, tie_output=True)
    assert model.out_proj.weight is model.src_embed.weight
    every_reference = model.named_modules(remove_duplicate=False)  # src_embed and tgt_embed are one module
    naive = sum(p.numel() for _, m in every_reference for p in m.parameters(recurse=False))
    assert ref.count_parameters(model) == naive - 2 * 20 * D  # two extra references to the 20 x D matrix


def test_parameter_count_base_model_on_meta():
    """The paper's base configuration, built on the meta device (no memory)."""
    with torch.device("meta"):
        model = ref.Transformer(37000, 37000, share_embeddings=True, tie_output=True)
    assert ref.count_parameters(model) == ref.transformer_parameter_count(
        37000, 37000, 512, 2048, 6, share_embeddings=True, tie_output=True
    )


class ScriptedModel(ref.Transformer):
    """A model whose next token is fixed: position t predicts script[t]; for checking the decoding loop."""

    def __init__(self, script, vocab=6):
        super().__init__(vocab, vocab, d_model=8, n_heads=2, d_ff=8, n_layers=1, max_len=32)
        self.script = script
        self.vocab = vocab

    def decode(self, tgt, memory, src_mask=None, tgt_mask=None):
        b, t = tgt.shape
        logits = torch.zeros(b, t, self.vocab)
        for row in range(b):
            for pos in range(t):
                logits[row, pos, self.script[row][min(pos, len(self.script[row]) - 1)]] = 1.0
        return logits


def test_greedy_decode_stops_at_eos():
    bos, eos = 1, 2
    model = ScriptedModel([[3, 4, eos, 5, 5], [3, 3, 3, 3, eos]])
    out = ref.greedy_decode(model, torch.zeros(2, 4, dtype=torch.long), max_len=10, bos_id=bos, eos_id=eos, pad_id=0)
    expected = torch.tensor([[bos, 3, 4, eos, 0, 0], [bos, 3, 3, 3, 3, eos]])
    assert torch.equal(out, expected), f"expected\n{expected}\ngot\n{out}\n(stop once all rows hit EOS; pad after EOS)"


def test_greedy_decode_respects_max_len():
    model = ScriptedModel([[3]])  # never produces EOS
    out = ref.greedy_decode(model, torch.zeros(1, 4, dtype=torch.long), max_len=5, bos_id=1, eos_id=2)
    assert out.shape == (1, 6), "BOS plus max_len generated tokens"


def test_greedy_decode_is_deterministic_and_matches_argmax_of_forward(gen):
    model = small_model(src_vocab=13, dropout=0.3).train()  # dropout on: greedy_decode must switch it off
    src = torch.randint(3, 13, (2, 6), generator=gen)
    a = ref.greedy_decode(model, src, max_len=6, bos_id=1, eos_id=2)
    b = ref.greedy_decode(model, src, max_len=6, bos_id=1, eos_id=2)
    assert torch.equal(a, b), "greedy decoding must be deterministic (eval mode, argmax)"
    assert model.training, "greedy_decode must restore the model's training mode"
    model.eval()
    with torch.no_grad():
        logits = model(src, a[:, :-1])  # teacher-forced on the decoded prefix
    generated = a[:, 1:]  # (B, n)
    is_eos = generated == 2
    eos_earlier = (torch.cumsum(is_eos, dim=1) - is_eos.long()) > 0  # an EOS strictly before this position
    pred = logits.argmax(-1)  # (B, n): position p predicts generated[:, p]
    assert torch.equal(pred[~eos_earlier], generated[~eos_earlier]), (
        "each decoded token must be the argmax of the model's next-token logits on the prefix"
    )


def test_copy_to_torch_decoder_layer_helper(gen):
    torch.manual_seed(5)
    ours = ref.DecoderLayer(D, H, D_FF, norm_first=True).double().eval()
    randomise_norms(ours, gen)
    theirs = ref.copy_to_torch_decoder_layer(ours).eval()
    x, memory, lengths = make_inputs(gen)
    tgt_mask, mem_mask = causal_mask(x.size(1)), padding_mask(lengths, memory.size(1))
    torch.testing.assert_close(
        ours(x, memory, tgt_mask, mem_mask),
        theirs(x, memory, tgt_mask=~tgt_mask, memory_key_padding_mask=~mem_mask[:, 0, 0, :]),
        atol=ATOL64, rtol=0,
    )

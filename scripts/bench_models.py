#!/usr/bin/env python3
"""Random-weight GGUF files of real model shapes, for speed measurements at the sizes people run.

Speed depends on shapes, not on values: each file has the tensor shapes and hyperparameters of
a real model (Llama-3.2-1B, Qwen3-1.7B, Gemma-3-1B, Phi-4-mini, ...), its architecture's tensors
(qwen3's q/k norms, gemma3's post-norms and windows, phi3's fused qkv and gate|up and LongRoPE
factors), random weights, and a real vocabulary: the default model's (tokenizer metadata copied
from models/SmolLM2-135M-Instruct.Q4_1.gguf, so the embedding and LM head are 49,152 rows), or
for gemma3 the real gemma-3-270m file's (262,144 rows, as Gemma 3 1B has). The script writes an F16 file with the PyPI `gguf` package, then
llama-quantize (the reference build, ../shared/tools/llama-cpp-reference.sh) makes each
quantized type from it; the F16 source is deleted afterwards unless --keep-f16. Files are
cached outside the repository (KILN_MODELS_CACHE, default ~/.cache/kiln-models) and made only
when missing.

    scripts/bench_models.py paths --sizes llama-1b,llama-3b --types Q4_K_M,Q4_0
        -> makes what is missing, prints one path per line
    scripts/bench_models.py list  -> the known sizes and types

A new family: add a `Family` (architecture name, metadata, tensor list) and its sizes to
SIZES below; `tensors` yields (name, shape in ggml order: row length first).
"""
import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent
VOCAB_SOURCE = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA_VOCAB = ROOT / "models" / "gemma-3-270m-Q4_K_M.gguf"
CACHE = Path(os.environ.get("KILN_MODELS_CACHE", Path.home() / ".cache" / "kiln-models"))
# The F16 sources (several GB each, deleted once quantized unless --keep-f16).
F16_DIR = Path(os.environ.get("KILN_F16_DIR", CACHE))
TYPES = ["Q4_K_M", "Q5_K_M", "Q6_K", "Q4_0", "Q8_0"]


@dataclass
class Shape:
    """Hyperparameters of one model size (names as in the GGUF `{arch}.` keys)."""
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    tied: bool = True
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5
    ctx: int = 131072
    # Mixture-of-experts files: the architecture (it decides the attention's extra tensors)
    # and the experts.
    arch: str = ""
    moe: "Moe | None" = None
    # The hybrid families (issue 41): their recurrent mixers and layer patterns.
    hybrid: "Hybrid | None" = None


@dataclass
class Family:
    """How a family's files look: its architecture name, metadata and tensors."""
    arch: str
    metadata: Callable[["Shape"], dict]
    tensors: Callable[["Shape", int], Iterator[tuple]]
    vocab: Path = VOCAB_SOURCE


def llama_metadata(s: Shape) -> dict:
    return {
        "context_length": s.ctx,
        "embedding_length": s.n_embd,
        "block_count": s.n_layer,
        "feed_forward_length": s.n_ff,
        "attention.head_count": s.n_head,
        "attention.head_count_kv": s.n_head_kv,
        "attention.key_length": s.head_dim,
        "attention.value_length": s.head_dim,
        "rope.dimension_count": s.head_dim,
        "rope.freq_base": s.rope_theta,
        "attention.layer_norm_rms_epsilon": s.norm_eps,
    }


def llama_tensors(s: Shape, n_vocab: int):
    q, kv = s.n_head * s.head_dim, s.n_head_kv * s.head_dim
    yield "token_embd.weight", (s.n_embd, n_vocab)
    for i in range(s.n_layer):
        b = f"blk.{i}."
        yield b + "attn_norm.weight", (s.n_embd,)
        yield b + "attn_q.weight", (s.n_embd, q)
        yield b + "attn_k.weight", (s.n_embd, kv)
        yield b + "attn_v.weight", (s.n_embd, kv)
        yield b + "attn_output.weight", (q, s.n_embd)
        yield b + "ffn_norm.weight", (s.n_embd,)
        yield b + "ffn_gate.weight", (s.n_embd, s.n_ff)
        yield b + "ffn_up.weight", (s.n_embd, s.n_ff)
        yield b + "ffn_down.weight", (s.n_ff, s.n_embd)
    yield "output_norm.weight", (s.n_embd,)
    if not s.tied:
        yield "output.weight", (s.n_embd, n_vocab)


def qwen3_tensors(s: Shape, n_vocab: int):
    """Llama's tensors plus the per-head q/k RMSNorm weights."""
    for name, dims in llama_tensors(s, n_vocab):
        yield name, dims
        if name.endswith("attn_k.weight"):
            b = name[: -len("attn_k.weight")]
            yield b + "attn_q_norm.weight", (s.head_dim,)
            yield b + "attn_k_norm.weight", (s.head_dim,)


def gemma3_metadata(s: Shape) -> dict:
    """Gemma 3: 512-position windows on 5 of 6 layers (llama.cpp's default pattern), local
    RoPE base 10000, global base `rope_theta`."""
    m = llama_metadata(s)
    del m["rope.dimension_count"]
    m["attention.sliding_window"] = 512
    m["rope.freq_base_swa"] = 10000.0
    return m


def gemma3_tensors(s: Shape, n_vocab: int):
    """Qwen3's tensors plus the post-attention and post-FFN norms (tied output)."""
    for name, dims in qwen3_tensors(s, n_vocab):
        yield name, dims
        if name.endswith("attn_output.weight"):
            yield name.replace("attn_output", "post_attention_norm"), (s.n_embd,)
        if name.endswith("ffn_down.weight"):
            yield name.replace("ffn_down", "post_ffw_norm"), (s.n_embd,)


def phi3_metadata(s: Shape) -> dict:
    """Phi-4-mini: RoPE on 96 of 128 dimensions, LongRoPE over an original 4096 context
    (attn_factor sqrt(1 + ln(32) / ln(4096)))."""
    m = llama_metadata(s)
    m["rope.dimension_count"] = s.head_dim * 3 // 4
    m["rope.scaling.original_context_length"] = 4096
    m["rope.scaling.attn_factor"] = 1.1902380714238083
    return m


def phi3_tensors(s: Shape, n_vocab: int):
    """Fused attn_qkv and gate|up, one pair of LongRoPE factor vectors."""
    q, kv = s.n_head * s.head_dim, s.n_head_kv * s.head_dim
    yield "token_embd.weight", (s.n_embd, n_vocab)
    yield "rope_factors_long.weight", (s.head_dim * 3 // 8,)
    yield "rope_factors_short.weight", (s.head_dim * 3 // 8,)
    for i in range(s.n_layer):
        b = f"blk.{i}."
        yield b + "attn_norm.weight", (s.n_embd,)
        yield b + "attn_qkv.weight", (s.n_embd, q + 2 * kv)
        yield b + "attn_output.weight", (q, s.n_embd)
        yield b + "ffn_norm.weight", (s.n_embd,)
        yield b + "ffn_up.weight", (s.n_embd, 2 * s.n_ff)
        yield b + "ffn_down.weight", (s.n_ff, s.n_embd)
    yield "output_norm.weight", (s.n_embd,)
    if not s.tied:
        yield "output.weight", (s.n_embd, n_vocab)


@dataclass
class Moe:
    """A mixture-of-experts FFN: expert count, used count, one expert's hidden width."""
    n_expert: int
    n_used: int
    width: int
    # Metadata of the family beyond llama's (multipliers, windows, YaRN).
    extra: dict = field(default_factory=dict)


def moe_metadata(s: Shape) -> dict:
    m = llama_metadata(s)
    x = s.moe
    m["expert_count"] = x.n_expert
    m["expert_used_count"] = x.n_used
    m["expert_feed_forward_length"] = x.width
    m.update(x.extra)
    return m


def moe_tensors(s: Shape, n_vocab: int):
    """Attention as the family has it, the router and the stacked experts (ggml order: row
    length, rows, experts). qwen3moe: per-head q/k norms; olmoe: q/k norms over the whole
    width; gpt-oss: q/k/v/o biases, sinks, router and expert biases, FFN norm named
    post_attention_norm."""
    arch, x = s.arch, s.moe
    q, kv = s.n_head * s.head_dim, s.n_head_kv * s.head_dim
    oss = arch == "gpt-oss"
    yield "token_embd.weight", (s.n_embd, n_vocab)
    for i in range(s.n_layer):
        b = f"blk.{i}."
        yield b + "attn_norm.weight", (s.n_embd,)
        yield b + "attn_q.weight", (s.n_embd, q)
        yield b + "attn_k.weight", (s.n_embd, kv)
        yield b + "attn_v.weight", (s.n_embd, kv)
        if oss:
            yield b + "attn_q.bias", (q,)
            yield b + "attn_k.bias", (kv,)
            yield b + "attn_v.bias", (kv,)
        if arch == "qwen3moe":
            yield b + "attn_q_norm.weight", (s.head_dim,)
            yield b + "attn_k_norm.weight", (s.head_dim,)
        if arch == "olmoe":
            yield b + "attn_q_norm.weight", (q,)
            yield b + "attn_k_norm.weight", (kv,)
        yield b + "attn_output.weight", (q, s.n_embd)
        if oss:
            yield b + "attn_output.bias", (s.n_embd,)
            yield b + "attn_sinks.weight", (s.n_head,)
        yield b + ("post_attention_norm.weight" if oss else "ffn_norm.weight"), (s.n_embd,)
        yield b + "ffn_gate_inp.weight", (s.n_embd, x.n_expert)
        yield b + "ffn_gate_exps.weight", (s.n_embd, x.width, x.n_expert)
        yield b + "ffn_up_exps.weight", (s.n_embd, x.width, x.n_expert)
        yield b + "ffn_down_exps.weight", (x.width, s.n_embd, x.n_expert)
        if oss:
            yield b + "ffn_gate_inp.bias", (x.n_expert,)
            yield b + "ffn_gate_exps.bias", (x.width, x.n_expert)
            yield b + "ffn_up_exps.bias", (x.width, x.n_expert)
            yield b + "ffn_down_exps.bias", (s.n_embd, x.n_expert)
    yield "output_norm.weight", (s.n_embd,)
    if not s.tied:
        yield "output.weight", (s.n_embd, n_vocab)


@dataclass
class Hybrid:
    """The part of a hybrid family's shape beyond llama's (names as in the GGUF keys).

    `attn`: the attention layers (lfm2, granitehybrid; the others are recurrent); qwen35's are
    each `interval`-th. qwen35's gated DeltaNet: `n_k_heads` key and `n_v_heads` value heads
    of `ssm_head_dim`. granitehybrid's Mamba2: `d_inner`, `d_state`, `n_group`, `ssm_heads`.
    gemma4: one global layer in `swa_every`, local heads `head_dim_swa` wide, the last
    `n_shared_kv` layers reading earlier layers' K/V with FFNs twice as wide, per-layer
    embeddings `per_layer` wide."""
    attn: tuple = ()
    interval: int = 0
    d_conv: int = 4
    n_k_heads: int = 0
    n_v_heads: int = 0
    ssm_head_dim: int = 0
    d_inner: int = 0
    d_state: int = 0
    n_group: int = 1
    ssm_heads: int = 0
    head_dim_swa: int = 0
    swa_every: int = 0
    window: int = 0
    n_shared_kv: int = 0
    per_layer: int = 0
    extra: dict = field(default_factory=dict)


def ffn_tensors(s: Shape, b: str, n_ff: int, norm: str = "ffn_norm.weight"):
    yield b + norm, (s.n_embd,)
    yield b + "ffn_gate.weight", (s.n_embd, n_ff)
    yield b + "ffn_up.weight", (s.n_embd, n_ff)
    yield b + "ffn_down.weight", (n_ff, s.n_embd)


def attn_tensors(s: Shape, b: str, q_mult: int = 1, qk_norm: bool = False):
    q, kv = s.n_head * s.head_dim, s.n_head_kv * s.head_dim
    yield b + "attn_q.weight", (s.n_embd, q_mult * q)
    yield b + "attn_k.weight", (s.n_embd, kv)
    yield b + "attn_v.weight", (s.n_embd, kv)
    if qk_norm:
        yield b + "attn_q_norm.weight", (s.head_dim,)
        yield b + "attn_k_norm.weight", (s.head_dim,)
    yield b + "attn_output.weight", (q, s.n_embd)


def per_layer_kv(s: Shape) -> list:
    """head_count_kv per layer: 0 on the recurrent layers."""
    return [s.n_head_kv if i in s.hybrid.attn else 0 for i in range(s.n_layer)]


def lfm2_metadata(s: Shape) -> dict:
    m = llama_metadata(s)
    m["attention.head_count_kv"] = per_layer_kv(s)
    m["shortconv.l_cache"] = s.hybrid.d_conv
    return m


def lfm2_tensors(s: Shape, n_vocab: int):
    """Short convolutions (conv taps, in_proj to 3 n_embd, out_proj) on the non-attention
    layers, q/k norms on the attention ones, final norm token_embd_norm."""
    d = s.n_embd
    yield "token_embd.weight", (d, n_vocab)
    for i in range(s.n_layer):
        b = f"blk.{i}."
        yield b + "attn_norm.weight", (d,)
        if i in s.hybrid.attn:
            yield from attn_tensors(s, b, qk_norm=True)
        else:
            yield b + "shortconv.conv.weight", (s.hybrid.d_conv, d)
            yield b + "shortconv.in_proj.weight", (d, 3 * d)
            yield b + "shortconv.out_proj.weight", (d, d)
        yield from ffn_tensors(s, b, s.n_ff)
    yield "token_embd_norm.weight", (d,)


def qwen35_metadata(s: Shape) -> dict:
    """Gated DeltaNet keys, the attention interval, partial (1/4) multi-section RoPE."""
    h = s.hybrid
    m = llama_metadata(s)
    rot = s.head_dim // 4
    m["rope.dimension_count"] = rot
    # Qwen3.5's mrope_section over the 32 rotated pairs (text only: all are positions).
    m["rope.dimension_sections"] = [11, 11, 10, 0]
    m.update({
        "ssm.conv_kernel": h.d_conv,
        "ssm.inner_size": h.n_v_heads * h.ssm_head_dim,
        "ssm.state_size": h.ssm_head_dim,
        "ssm.time_step_rank": h.n_v_heads,
        "ssm.group_count": h.n_k_heads,
        "full_attention_interval": h.interval,
    })
    return m


def qwen35_tensors(s: Shape, n_vocab: int):
    """DeltaNet layers (fused qkv, output gate, conv, dt/a/beta/alpha, gated norm, out) and
    gated attention (q twice as wide: each head's query then its gate) every interval-th
    layer; the FFN norm is post_attention_norm."""
    h, d = s.hybrid, s.n_embd
    kd, vd = h.n_k_heads * h.ssm_head_dim, h.n_v_heads * h.ssm_head_dim
    c = 2 * kd + vd
    yield "token_embd.weight", (d, n_vocab)
    for i in range(s.n_layer):
        b = f"blk.{i}."
        yield b + "attn_norm.weight", (d,)
        if (i + 1) % h.interval == 0:
            yield from attn_tensors(s, b, q_mult=2, qk_norm=True)
        else:
            yield b + "attn_qkv.weight", (d, c)
            yield b + "attn_gate.weight", (d, vd)
            yield b + "ssm_conv1d.weight", (h.d_conv, c)
            yield b + "ssm_dt.bias", (h.n_v_heads,)
            yield b + "ssm_a", (h.n_v_heads,)
            yield b + "ssm_beta.weight", (d, h.n_v_heads)
            yield b + "ssm_alpha.weight", (d, h.n_v_heads)
            yield b + "ssm_norm.weight", (h.ssm_head_dim,)
            yield b + "ssm_out.weight", (vd, d)
        yield from ffn_tensors(s, b, s.n_ff, "post_attention_norm.weight")
    yield "output_norm.weight", (d,)


def granitehybrid_metadata(s: Shape) -> dict:
    h = s.hybrid
    m = llama_metadata(s)
    m["attention.head_count_kv"] = per_layer_kv(s)
    m.update({
        "ssm.conv_kernel": h.d_conv,
        "ssm.inner_size": h.d_inner,
        "ssm.state_size": h.d_state,
        "ssm.group_count": h.n_group,
        "ssm.time_step_rank": h.ssm_heads,
    })
    m.update(h.extra)
    return m


def granitehybrid_tensors(s: Shape, n_vocab: int):
    """Mamba2 (in_proj to z|xBC|dt, conv with bias, dt bias, A, D, grouped gated norm, out)
    on the non-attention layers; the dense FFN on every layer."""
    h, d = s.hybrid, s.n_embd
    cd = h.d_inner + 2 * h.n_group * h.d_state
    yield "token_embd.weight", (d, n_vocab)
    for i in range(s.n_layer):
        b = f"blk.{i}."
        yield b + "attn_norm.weight", (d,)
        if i in h.attn:
            yield from attn_tensors(s, b)
        else:
            yield b + "ssm_in.weight", (d, h.d_inner + cd + h.ssm_heads)
            yield b + "ssm_conv1d.weight", (h.d_conv, cd)
            yield b + "ssm_conv1d.bias", (cd,)
            yield b + "ssm_dt.bias", (h.ssm_heads,)
            yield b + "ssm_a", (1, h.ssm_heads)
            yield b + "ssm_d", (1, h.ssm_heads)
            yield b + "ssm_norm.weight", (h.d_inner // h.n_group, h.n_group)
            yield b + "ssm_out.weight", (h.d_inner, d)
        yield from ffn_tensors(s, b, s.n_ff)
    yield "output_norm.weight", (d,)


def gemma4_local(s: Shape, i: int) -> bool:
    return (i + 1) % s.hybrid.swa_every != 0


def gemma4_ff(s: Shape, i: int) -> int:
    return 2 * s.n_ff if i >= s.n_layer - s.hybrid.n_shared_kv else s.n_ff


def gemma4_metadata(s: Shape) -> dict:
    """Local/global head widths and RoPE, the window pattern, shared K/V layers, per-layer
    FFN widths, per-layer embeddings, final softcap 30."""
    h = s.hybrid
    m = llama_metadata(s)
    m.update({
        "feed_forward_length": [gemma4_ff(s, i) for i in range(s.n_layer)],
        "attention.key_length_swa": h.head_dim_swa,
        "attention.value_length_swa": h.head_dim_swa,
        "attention.sliding_window": h.window,
        "attention.sliding_window_pattern": [gemma4_local(s, i) for i in range(s.n_layer)],
        "attention.shared_kv_layers": h.n_shared_kv,
        "rope.freq_base_swa": 10000.0,
        "rope.dimension_count_swa": h.head_dim_swa,
        "embedding_length_per_layer_input": h.per_layer,
        "final_logit_softcapping": 30.0,
    })
    return m


def gemma4_tensors(s: Shape, n_vocab: int):
    """Per-layer embeddings (table, model projection, norm; each layer's input gate,
    projection and norm), q/k norms, local heads narrower than global ones, K/V only on the
    layers before the shared ones, post-norms, a per-layer output scale; tied output."""
    h, d, pl = s.hybrid, s.n_embd, s.hybrid.per_layer
    yield "token_embd.weight", (d, n_vocab)
    yield "rope_freqs.weight", (s.head_dim // 2,)
    yield "per_layer_token_embd.weight", (pl * s.n_layer, n_vocab)
    yield "per_layer_model_proj.weight", (d, pl * s.n_layer)
    yield "per_layer_proj_norm.weight", (pl,)
    for i in range(s.n_layer):
        b = f"blk.{i}."
        hd = h.head_dim_swa if gemma4_local(s, i) else s.head_dim
        q, kv = s.n_head * hd, s.n_head_kv * hd
        yield b + "attn_norm.weight", (d,)
        yield b + "attn_q.weight", (d, q)
        yield b + "attn_q_norm.weight", (hd,)
        if i < s.n_layer - h.n_shared_kv:
            yield b + "attn_k.weight", (d, kv)
            yield b + "attn_v.weight", (d, kv)
            yield b + "attn_k_norm.weight", (hd,)
        yield b + "attn_output.weight", (q, d)
        yield b + "post_attention_norm.weight", (d,)
        yield from ffn_tensors(s, b, gemma4_ff(s, i))
        yield b + "post_ffw_norm.weight", (d,)
        yield b + "inp_gate.weight", (d, pl)
        yield b + "proj.weight", (pl, d)
        yield b + "post_norm.weight", (d,)
        yield b + "layer_output_scale.weight", (1,)
    yield "output_norm.weight", (d,)


LLAMA = Family("llama", llama_metadata, llama_tensors)
QWEN3 = Family("qwen3", llama_metadata, qwen3_tensors)
GEMMA3 = Family("gemma3", gemma3_metadata, gemma3_tensors, GEMMA_VOCAB)
PHI3 = Family("phi3", phi3_metadata, phi3_tensors)
QWEN3MOE = Family("qwen3moe", moe_metadata, moe_tensors)
OLMOE = Family("olmoe", moe_metadata, moe_tensors)
GRANITEMOE = Family("granitemoe", moe_metadata, moe_tensors)
GPT_OSS = Family("gpt-oss", moe_metadata, moe_tensors)
LFM2 = Family("lfm2", lfm2_metadata, lfm2_tensors)
QWEN35 = Family("qwen35", qwen35_metadata, qwen35_tensors)
GRANITEHYBRID = Family("granitehybrid", granitehybrid_metadata, granitehybrid_tensors)
GEMMA4 = Family("gemma4", gemma4_metadata, gemma4_tensors, GEMMA_VOCAB)

# name -> (family, shape, in the default run). Shapes from the models' config.json; the
# vocabulary is the default model's (49,152 tokens) except gemma3's, which is gemma-3-270m's
# real 262,144-token one (Gemma 3 1B has the same).
SIZES = {
    "llama-1b": (LLAMA, Shape(2048, 16, 32, 8, 64, 8192), True),
    "llama-3b": (LLAMA, Shape(3072, 28, 24, 8, 128, 8192), True),
    "qwen3-1.7b": (QWEN3, Shape(2048, 28, 16, 8, 128, 6144, rope_theta=1e6, norm_eps=1e-6,
                                ctx=40960), True),
    "qwen3-4b": (QWEN3, Shape(2560, 36, 32, 8, 128, 9728, rope_theta=1e6, norm_eps=1e-6,
                              ctx=40960), False),
    "gemma3-1b": (GEMMA3, Shape(1152, 26, 4, 1, 256, 6912, rope_theta=1e6, norm_eps=1e-6,
                                ctx=32768), True),
    "phi4-mini": (PHI3, Shape(3072, 32, 24, 8, 128, 8192, rope_theta=10000.0, ctx=131072),
                  True),
    "llama-8b": (LLAMA, Shape(4096, 32, 32, 8, 128, 14336, tied=False), False),
    # Mixtures of experts (issue 40): every layer at the real model's shape, FEWER LAYERS than
    # the real model (the layer count is the second field; the real one in the comment) so a
    # file fits this machine. Shapes from the models' config.json (Qwen/Qwen3-30B-A3B,
    # openai/gpt-oss-20b, allenai/OLMoE-1B-7B-0924, ibm-granite/granite-3.1-1b-a400m-instruct).
    # Qwen3-30B-A3B: 48 layers, 128 experts of 768, 8 used, 32/4 heads of 128, untied.
    "qwen3moe-30b-a3b": (QWEN3MOE, Shape(2048, 4, 32, 4, 128, 6144, tied=False,
                                         rope_theta=1e6, norm_eps=1e-6, ctx=40960,
                                         arch="qwen3moe", moe=Moe(128, 8, 768)), False),
    # gpt-oss-20b: 24 layers, 32 experts of 2880, 4 used, 64/8 heads of 64, window 128 on
    # alternate layers, sinks, YaRN x32 over 4096, untied.
    "gpt-oss-20b": (GPT_OSS, Shape(2880, 4, 64, 8, 64, 2880, tied=False, rope_theta=150000.0,
                                   arch="gpt-oss", moe=Moe(32, 4, 2880, {
                                       "attention.sliding_window": 128,
                                       "rope.scaling.type": "yarn",
                                       "rope.scaling.factor": 32.0,
                                       "rope.scaling.original_context_length": 4096})),
                    False),
    # OLMoE-1B-7B: 16 layers, 64 experts of 1024, 8 used, 16 heads of 128 (no GQA), untied.
    "olmoe-1b-7b": (OLMOE, Shape(2048, 4, 16, 16, 128, 1024, tied=False, rope_theta=10000.0,
                                 ctx=4096, arch="olmoe", moe=Moe(64, 8, 1024)), False),
    # granite-3.1-1b-a400m: all 24 layers, 32 experts of 512, 8 used, 16/8 heads of 64, tied,
    # granite's multipliers.
    "granitemoe-1b-a400m": (GRANITEMOE, Shape(1024, 24, 16, 8, 64, 512, rope_theta=10000.0,
                                              ctx=131072, arch="granitemoe",
                                              moe=Moe(32, 8, 512, {
                                                  "embedding_scale": 12.0,
                                                  "residual_scale": 0.22,
                                                  "logit_scale": 6.0,
                                                  "attention.scale": 0.015625})), False),
    # The hybrid families (issue 41), every layer of the real model, the default model's
    # 49,152-token vocabulary (gemma4: the real 262,144-token one). Qwen3.5-2B: 24 layers
    # (llama.cpp's qwen35 size table: 24 layers and n_embd 2048 is the 2B), every 4th gated
    # attention (8/2 heads of 256, RoPE on 64 dims), gated DeltaNet with 16 key and 16 value
    # heads of 128, conv 4, FFN 6144, tied.
    "qwen35-2b": (QWEN35, Shape(2048, 24, 8, 2, 256, 6144, rope_theta=1e7, norm_eps=1e-6,
                                ctx=262144, hybrid=Hybrid(interval=4, n_k_heads=16,
                                                          n_v_heads=16, ssm_head_dim=128)),
                  False),
    # LFM2-1.2B: 16 layers, attention (32/8 heads of 64, q/k norms) on layers 2, 5, 8, 10, 12,
    # 14, short convolutions of 3 taps on the other 10, FFN 8192 (llama.cpp's lfm2 size
    # table: n_ff 8192 is the 1.2B), tied.
    "lfm2-1.2b": (LFM2, Shape(2048, 16, 32, 8, 64, 8192, rope_theta=1e6, ctx=128000,
                              hybrid=Hybrid(attn=(2, 5, 8, 10, 12, 14), d_conv=3)), False),
    # Granite-4.0-H-1B: 40 layers, 4 of them attention (12/4 heads of 128; placed one in ten
    # here), Mamba2 on 36 (48 heads of 64 = inner 3072, state 128, 1 group, conv 4), the
    # dense FFN 4096 on every layer, granite's multipliers, tied.
    "granitehybrid-1b": (GRANITEHYBRID, Shape(1536, 40, 12, 4, 128, 4096, rope_theta=10000.0,
                                              ctx=131072, hybrid=Hybrid(
                                                  attn=(9, 19, 29, 39), d_inner=3072,
                                                  d_state=128, n_group=1, ssm_heads=48,
                                                  extra={"embedding_scale": 12.0,
                                                         "residual_scale": 0.22,
                                                         "logit_scale": 6.0,
                                                         "attention.scale": 0.0078125})),
                         False),
    # Gemma-4-E2B (text) at its per-layer shape, 10 OF ITS 35 LAYERS (all 35 make a 9 GB F16
    # source, 4.5 G parameters, 2.3 G of them the per-layer embedding table): one global
    # layer in five (8/1 heads of 512; local ones of 256, window 512), the last 5 layers (the
    # real model's last 20 of 35; the layers before them must end local, global) reading
    # earlier K/V with FFNs of 12288 (6144 before), per-layer embeddings 256 wide per layer
    # (a 262,144 x 2,560 table here), tied.
    "gemma4-e2b": (GEMMA4, Shape(1536, 10, 8, 1, 512, 6144, rope_theta=1e6, norm_eps=1e-6,
                                 ctx=131072, hybrid=Hybrid(head_dim_swa=256, swa_every=5,
                                                           window=512, n_shared_kv=5,
                                                           per_layer=256)), False),
}
# The mixture-of-experts sizes (`make bench-moe`).
MOE_SIZES = ["qwen3moe-30b-a3b", "gpt-oss-20b", "olmoe-1b-7b", "granitemoe-1b-a400m"]
# The hybrid families (`make bench-hybrid`).
HYBRID_SIZES = ["qwen35-2b", "lfm2-1.2b", "granitehybrid-1b", "gemma4-e2b"]


def log(msg):
    print(f"bench_models: {msg}", file=sys.stderr, flush=True)


def reference_bin() -> Path:
    shared = Path(os.environ.get("KILN_SHARED", ROOT.parent / "shared"))
    out = subprocess.run(["bash", str(shared / "tools/llama-cpp-reference.sh")],
                         check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def write_f16(name: str, path: Path):
    import gguf
    import numpy as np

    family, shape, _ = SIZES[name]
    if not family.vocab.is_file():
        sys.exit(f"bench_models: {family.vocab} (the vocabulary of {name}) is missing: "
                 "scripts/fetch-model.sh fetches it")
    src = gguf.GGUFReader(str(family.vocab))
    tmp = path.with_suffix(".partial")
    w = gguf.GGUFWriter(str(tmp), family.arch)
    w.add_name(f"kiln bench {name} (random weights)")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    n_vocab = 0
    for key, f in src.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vt = f.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            vals = f.contents()
            n_vocab = max(n_vocab, len(vals)) if key == "tokenizer.ggml.tokens" else n_vocab
            w.add_key_value(key, vals, vt, sub_type=f.types[1])
        else:
            w.add_key_value(key, f.contents(), vt)
    for k, v in family.metadata(shape).items():
        full = f"{family.arch}.{k}"
        if isinstance(v, list):
            w.add_array(full, v)  # per-layer values: int32 or bool
        elif isinstance(v, str):
            w.add_string(full, v)
        elif isinstance(v, float):
            w.add_float32(full, v)
        else:
            w.add_uint32(full, v)
    w.add_uint32(f"{family.arch}.vocab_size", n_vocab)
    tensors = list(family.tensors(shape, n_vocab))

    def is_f32(tname, dims):
        # Vectors, biases and what ggml's recurrent ops read as f32 (conv taps, A, D).
        return (len(dims) == 1 or tname.endswith((".bias", "ssm_a", "ssm_d", "norm.weight"))
                or tname.endswith(("ssm_conv1d.weight", "shortconv.conv.weight")))

    for tname, dims in tensors:
        n = int(np.prod(dims))
        dt = np.float32 if is_f32(tname, dims) else np.float16
        # gguf-py takes numpy's shape order (outermost first), the reverse of ggml's.
        w.add_tensor_info(tname, tuple(reversed(dims)), np.dtype(dt), n * np.dtype(dt).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    # One pool of normal(0, 0.02) values; each tensor is a slice of it from its own offset
    # (values repeat across tensors, which no speed figure can see). Norms, D and other
    # vectors are ones; A (the recurrent decay) -0.5.
    rng = np.random.default_rng(0)
    pool = (rng.standard_normal(1 << 24, dtype=np.float32) * 0.02).astype(np.float16)
    for tname, dims in tensors:
        n = int(np.prod(dims))
        f32 = is_f32(tname, dims)
        if tname.endswith("ssm_a"):
            data = np.full(n, -0.5, dtype=np.float32)
        elif tname.endswith((".bias", "conv.weight", "conv1d.weight")):
            data = pool[:min(n, pool.size)].astype(np.float32)
        elif f32:
            data = np.ones(n, dtype=np.float32)
        else:
            data = np.roll(pool, -int(rng.integers(0, pool.size)))
        write_repeated(w, data, n)
    w.close()
    tmp.rename(path)


def write_repeated(w, data, n: int):
    """The next tensor's data: `data` repeated to n values, written a pool at a time (the
    largest tables, gemma4's per-layer embeddings, are 2.3 G values)."""
    from gguf.gguf_writer import WriterState

    fout = w.fout[0]
    w.tensors[0].pop(next(iter(w.tensors[0])))
    w.write_padding(fout, fout.tell())
    left = n
    while left > 0:
        k = min(left, data.size)
        data[:k].tofile(fout)
        left -= k
    w.write_padding(fout, n * data.itemsize)
    w.state = WriterState.WEIGHTS


def make(name: str, qtype: str, keep_f16: bool, bin_dir) -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    out = CACHE / f"{name}.{qtype}.gguf"
    if out.is_file():
        return out
    f16 = F16_DIR / f"{name}.F16.gguf"
    if not f16.is_file():
        t = time.time()
        log(f"writing {f16.name}")
        write_f16(name, f16)
        log(f"wrote {f16.name} ({f16.stat().st_size / 1e9:.2f} GB) in {time.time() - t:.0f} s")
    if bin_dir[0] is None:
        bin_dir[0] = reference_bin()
    b = bin_dir[0]
    t = time.time()
    log(f"quantizing {out.name}")
    tmp = out.with_suffix(".partial")
    res = subprocess.run([str(b / "llama-quantize"), str(f16), str(tmp), qtype],
                         env=dict(os.environ, LD_LIBRARY_PATH=str(b)),
                         capture_output=True, text=True)
    if res.returncode != 0:
        tmp.unlink(missing_ok=True)
        sys.exit(f"bench_models: llama-quantize {qtype} failed:\n{res.stderr[-2000:]}")
    tmp.rename(out)
    log(f"quantized {out.name} ({out.stat().st_size / 1e9:.2f} GB) in {time.time() - t:.0f} s")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("paths", help="make the files that are missing, print their paths")
    p.add_argument("--sizes", default="default",
                   help="comma-separated names, 'default' (the sizes marked so), 'all' (every "
                   "dense size), 'moe' (the mixtures of experts) or 'hybrid' (issue 41's)")
    p.add_argument("--types", default=",".join(TYPES))
    p.add_argument("--keep-f16", action="store_true")
    sub.add_parser("list")
    a = ap.parse_args()
    if a.cmd == "list":
        for name, (fam, s, default) in SIZES.items():
            print(f"{name}\t{fam.arch}\t{'default' if default else 'extra'}\t{s}")
        print("types:", ",".join(TYPES))
        return
    if a.sizes == "default":
        names = [n for n, (_, _, d) in SIZES.items() if d]
    elif a.sizes == "all":
        # The dense sizes; the mixtures of experts come with `moe` (`make bench-moe`).
        names = [n for n in SIZES if n not in MOE_SIZES + HYBRID_SIZES]
    elif a.sizes == "moe":
        names = MOE_SIZES
    elif a.sizes == "hybrid":
        names = HYBRID_SIZES
    else:
        names = [n for n in a.sizes.split(",") if n]
    types = [t for t in a.types.split(",") if t]
    for n in names:
        if n not in SIZES:
            sys.exit(f"bench_models: unknown size {n!r} (known: {', '.join(SIZES)})")
    bin_dir = [None]
    for n in names:
        for t in types:
            print(make(n, t, a.keep_f16, bin_dir))
        f16 = F16_DIR / f"{n}.F16.gguf"
        if not a.keep_f16 and f16.is_file():
            f16.unlink()
            log(f"removed {f16.name}")


if __name__ == "__main__":
    main()

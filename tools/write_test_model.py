#!/usr/bin/env python3
"""Write a GGUF v3 test model with seeded random weights.

Architectures: llama, qwen2 (q/k/v biases), qwen3 (per-head q/k RMSNorm).
Tensor names, shapes and metadata keys follow the GGUF files llama.cpp's
converter writes, so the same file loads in llama.cpp and in inferd.

Shapes below are numpy shapes (GGUF `ne` is the reverse): token_embd.weight is
(vocab, dim), i.e. ne = [dim, vocab].

Weights are generated and written one tensor at a time, so a ~1B-parameter
model (dim 2048, 16 layers, FFN 8192, vocab 32000) fits easily in memory.
Every tensor gets its own random stream, derived from (seed, tensor name), so a
tensor's values do not depend on which other tensors are in the file.

CLI:   python tools/write_test_model.py --arch qwen2 --dim 256 --n-layers 2 \
           --n-heads 4 --n-kv-heads 2 --ffn 512 --type Q8_0 --out /tmp/m.gguf
Module: from write_test_model import write_model
        write_model("/tmp/m.gguf", arch="qwen3", head_dim=128, type="BF16")
"""
from __future__ import annotations

import argparse
import math
import sys
import time
import zlib

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT
from gguf.constants import GGML_QUANT_SIZES

ARCHES = ("llama", "qwen2", "qwen3")
ROPE_SCALINGS = ("none", "linear", "llama3")

# --type -> (GGML type of the 2-D matrices, general.file_type)
WEIGHT_TYPES = {
    "F32": (QT.F32, gguf.LlamaFileType.ALL_F32),
    "F16": (QT.F16, gguf.LlamaFileType.MOSTLY_F16),
    "BF16": (QT.BF16, gguf.LlamaFileType.MOSTLY_BF16),
    "Q8_0": (QT.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
    "Q4_0": (QT.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0),
    # gguf.quants has quantizers for these too (inferd computes them by reference kernels)
    "Q4_1": (QT.Q4_1, gguf.LlamaFileType.MOSTLY_Q4_1),
    "Q5_0": (QT.Q5_0, gguf.LlamaFileType.MOSTLY_Q5_0),
    "Q5_1": (QT.Q5_1, gguf.LlamaFileType.MOSTLY_Q5_1),
}

# SentencePiece token types as GGUF stores them (tokenizer.ggml.token_type).
TOK_NORMAL, TOK_UNKNOWN, TOK_CONTROL, TOK_BYTE = 1, 2, 3, 6
N_SPECIAL = 3      # <unk>, <s>, </s>
N_BYTES = 256      # <0x00>..<0xFF>

DEFAULTS = dict(
    arch="llama",
    dim=256,
    n_layers=2,
    n_heads=4,
    n_kv_heads=None,     # default: n_heads
    head_dim=None,       # default: dim // n_heads
    ffn=None,            # default: 2 * dim
    vocab=300,
    ctx=256,
    rope_base=10000.0,
    rope_scaling="none",
    rope_factor=1.0,
    rope_orig_ctx=8192,  # llama3 scaling: original_context_length
    rope_low_freq_factor=1.0,
    rope_high_freq_factor=4.0,
    rms_eps=1e-5,
    tied=False,
    type="F32",
    seed=0,
    name=None,
    verbose=False,
)


# --------------------------------------------------------------------------
# vocabulary


def _filler_word(i: int) -> str:
    """i-th string of the sequence a, b, ..., z, aa, ab, ..., zz, aaa, ..."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    n = i
    length = 1
    while n >= 26 ** length:
        n -= 26 ** length
        length += 1
    chars = []
    for _ in range(length):
        chars.append(letters[n % 26])
        n //= 26
    return "".join(reversed(chars))


def make_vocab(n_vocab: int) -> tuple[list[str], list[float], list[int]]:
    """A SentencePiece-style vocabulary: specials, 256 byte tokens, then
    '▁'-prefixed filler pieces with decreasing scores."""
    if n_vocab < N_SPECIAL + N_BYTES:
        raise ValueError(f"vocab must be >= {N_SPECIAL + N_BYTES} (3 specials + 256 byte tokens), got {n_vocab}")
    tokens = ["<unk>", "<s>", "</s>"]
    scores = [0.0, 0.0, 0.0]
    types = [TOK_UNKNOWN, TOK_CONTROL, TOK_CONTROL]
    for b in range(N_BYTES):
        tokens.append(f"<0x{b:02X}>")
        scores.append(0.0)
        types.append(TOK_BYTE)
    for i in range(n_vocab - len(tokens)):
        tokens.append("\u2581" + _filler_word(i))
        scores.append(-float(i))
        types.append(TOK_NORMAL)
    return tokens, scores, types


# --------------------------------------------------------------------------
# rope scaling


def llama3_rope_freqs(head_dim: int, base: float, factor: float, low_freq_factor: float = 1.0,
                      high_freq_factor: float = 4.0, orig_ctx: int = 8192, n_rot: int | None = None) -> np.ndarray:
    """Per-frequency divisors of Llama 3.1's RoPE scaling (what llama.cpp's
    converter stores as rope_freqs.weight): theta_i is divided by out[i]."""
    n_rot = head_dim if n_rot is None else n_rot
    inv_freq = base ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
    wavelen = 2.0 * math.pi / inv_freq
    low_freq_wavelen = orig_ctx / low_freq_factor
    high_freq_wavelen = orig_ctx / high_freq_factor
    out = np.empty_like(inv_freq)
    for i, wl in enumerate(wavelen):
        if wl < high_freq_wavelen:
            out[i] = 1.0
        elif wl > low_freq_wavelen:
            out[i] = factor
        else:
            smooth = (orig_ctx / wl - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out[i] = 1.0 / ((1.0 - smooth) / factor + smooth)
    return out.astype(np.float32)


# --------------------------------------------------------------------------
# tensors


def _resolve(opts: dict) -> dict:
    unknown = set(opts) - set(DEFAULTS)
    if unknown:
        raise TypeError(f"write_model: unknown option(s) {sorted(unknown)}")
    o = dict(DEFAULTS)
    o.update({k: v for k, v in opts.items() if v is not None})
    if o["arch"] not in ARCHES:
        raise ValueError(f"arch must be one of {ARCHES}, got {o['arch']!r}")
    if o["type"] not in WEIGHT_TYPES:
        raise ValueError(f"type must be one of {tuple(WEIGHT_TYPES)}, got {o['type']!r}")
    if o["rope_scaling"] not in ROPE_SCALINGS:
        raise ValueError(f"rope_scaling must be one of {ROPE_SCALINGS}, got {o['rope_scaling']!r}")
    if o["n_kv_heads"] is None:
        o["n_kv_heads"] = o["n_heads"]
    if o["head_dim"] is None:
        if o["dim"] % o["n_heads"]:
            raise ValueError("dim must be a multiple of n_heads unless head_dim is given")
        o["head_dim"] = o["dim"] // o["n_heads"]
    if o["ffn"] is None:
        o["ffn"] = 2 * o["dim"]
    if o["n_heads"] % o["n_kv_heads"]:
        raise ValueError("n_heads must be a multiple of n_kv_heads")
    if o["head_dim"] % 2:
        raise ValueError("head_dim must be even")
    if o["rope_scaling"] != "none" and not o["rope_factor"] > 0:
        raise ValueError("rope_factor must be > 0")
    qtype = WEIGHT_TYPES[o["type"]][0]
    if qtype in (QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1):
        bs = GGML_QUANT_SIZES[qtype][0]
        for what in ("dim", "ffn"):
            if o[what] % bs:
                raise ValueError(f"{o['type']} needs {what} to be a multiple of {bs}")
        if (o["n_heads"] * o["head_dim"]) % bs:
            raise ValueError(f"{o['type']} needs n_heads*head_dim to be a multiple of {bs}")
    if o["name"] is None:
        o["name"] = f"inferd-test-{o['arch']}-{o['type']}"
    return o


def tensor_plan(o: dict) -> list[tuple[str, tuple[int, ...], str, float]]:
    """(name, numpy shape, kind, scale) for every tensor, in file order.
    kind: 'matrix' (std = scale), 'norm' (1 + scale*N(0,1)), 'bias' (std = scale),
    'rope_freqs'."""
    dim, hd, ffn, nv = o["dim"], o["head_dim"], o["ffn"], o["vocab"]
    nq, nkv = o["n_heads"] * hd, o["n_kv_heads"] * hd
    # The embedding feeds an RMSNorm, so its scale only sets how strongly the
    # residual stream resists the layers' updates (which are O(1)). When tied it
    # is also the output matrix: logits ~ N(0, dim * std^2); dim^-1/4 keeps them
    # O(sqrt(dim)^(1/2)), i.e. a few units, like the untied 1/sqrt(dim) output.
    embd_std = 1.0 if not o["tied"] else dim ** -0.25
    plan = [("token_embd.weight", (nv, dim), "matrix", embd_std)]
    if o["rope_scaling"] == "llama3":
        plan.append(("rope_freqs.weight", (hd // 2,), "rope_freqs", 0.0))
    for i in range(o["n_layers"]):
        p = f"blk.{i}."
        plan.append((p + "attn_norm.weight", (dim,), "norm", 0.1))
        plan.append((p + "attn_q.weight", (nq, dim), "matrix", dim ** -0.5))
        plan.append((p + "attn_k.weight", (nkv, dim), "matrix", dim ** -0.5))
        plan.append((p + "attn_v.weight", (nkv, dim), "matrix", dim ** -0.5))
        if o["arch"] == "qwen2":
            plan.append((p + "attn_q.bias", (nq,), "bias", 0.2))
            plan.append((p + "attn_k.bias", (nkv,), "bias", 0.2))
            plan.append((p + "attn_v.bias", (nkv,), "bias", 0.2))
        if o["arch"] == "qwen3":
            plan.append((p + "attn_q_norm.weight", (hd,), "norm", 0.1))
            plan.append((p + "attn_k_norm.weight", (hd,), "norm", 0.1))
        plan.append((p + "attn_output.weight", (dim, nq), "matrix", nq ** -0.5))
        plan.append((p + "ffn_norm.weight", (dim,), "norm", 0.1))
        plan.append((p + "ffn_gate.weight", (ffn, dim), "matrix", dim ** -0.5))
        plan.append((p + "ffn_up.weight", (ffn, dim), "matrix", dim ** -0.5))
        plan.append((p + "ffn_down.weight", (dim, ffn), "matrix", ffn ** -0.5))
    plan.append(("output_norm.weight", (dim,), "norm", 0.1))
    if not o["tied"]:
        plan.append(("output.weight", (nv, dim), "matrix", dim ** -0.5))
    return plan


def _rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def _gen(o: dict, name: str, shape: tuple[int, ...], kind: str, scale: float) -> np.ndarray:
    """The float32 values of one tensor (before conversion to the stored type)."""
    if kind == "rope_freqs":
        return llama3_rope_freqs(o["head_dim"], o["rope_base"], o["rope_factor"], o["rope_low_freq_factor"],
                                 o["rope_high_freq_factor"], o["rope_orig_ctx"])
    rng = _rng(o["seed"], name)
    x = rng.standard_normal(shape, dtype=np.float32)
    if kind == "norm":
        x *= np.float32(scale)
        x += np.float32(1.0)
    else:
        x *= np.float32(scale)
    return x


def _encode(x: np.ndarray, qtype: QT) -> np.ndarray:
    """float32 values -> the array whose bytes GGUF stores."""
    if qtype == QT.F32:
        return np.ascontiguousarray(x, dtype=np.float32)
    if qtype == QT.F16:
        return x.astype(np.float16)
    # BF16 / Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1: uint8 rows, quantized in row chunks to bound memory.
    rows = x.reshape(-1, x.shape[-1])
    byte_shape = gguf.quant_shape_to_byte_shape(x.shape, qtype)
    out = np.empty((rows.shape[0], byte_shape[-1]), dtype=np.uint8)
    chunk = max(1, (1 << 22) // rows.shape[1])
    for r in range(0, rows.shape[0], chunk):
        out[r:r + chunk] = gguf.quants.quantize(rows[r:r + chunk], qtype)
    return out.reshape(byte_shape)


def _stored_info(shape: tuple[int, ...], qtype: QT) -> tuple[tuple[int, ...], type, int]:
    """(shape to declare, numpy dtype to declare, nbytes) for add_tensor_info."""
    n = int(np.prod(shape))
    if qtype == QT.F32:
        return shape, np.float32, 4 * n
    if qtype == QT.F16:
        return shape, np.float16, 2 * n
    byte_shape = gguf.quant_shape_to_byte_shape(shape, qtype)
    return byte_shape, np.uint8, int(np.prod(byte_shape))


def write_model(path, **opts) -> None:
    """Write a test model to `path`. Options: see DEFAULTS (same names as the
    CLI flags with '-' -> '_'; `type` is the weight-matrix type)."""
    o = _resolve(opts)
    arch = o["arch"]
    wtype, ftype = WEIGHT_TYPES[o["type"]]
    t0 = time.time()

    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(o["name"])
    w.add_context_length(o["ctx"])
    w.add_embedding_length(o["dim"])
    w.add_block_count(o["n_layers"])
    w.add_feed_forward_length(o["ffn"])
    w.add_head_count(o["n_heads"])
    w.add_head_count_kv(o["n_kv_heads"])
    w.add_key_length(o["head_dim"])
    w.add_value_length(o["head_dim"])
    w.add_layer_norm_rms_eps(float(o["rms_eps"]))
    w.add_rope_freq_base(float(o["rope_base"]))
    w.add_rope_dimension_count(o["head_dim"])
    if o["rope_scaling"] == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(float(o["rope_factor"]))
    w.add_vocab_size(o["vocab"])
    w.add_file_type(int(ftype))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    tokens, scores, types = make_vocab(o["vocab"])
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    plan = tensor_plan(o)
    stored = []
    for name, shape, kind, scale in plan:
        qtype = wtype if kind == "matrix" else QT.F32
        sshape, sdtype, nbytes = _stored_info(shape, qtype)
        w.add_tensor_info(name, sshape, np.dtype(sdtype), nbytes, raw_dtype=qtype)
        stored.append(qtype)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for (name, shape, kind, scale), qtype in zip(plan, stored):
        data = _encode(_gen(o, name, shape, kind, scale), qtype)
        w.write_tensor_data(data)
        if o["verbose"]:
            print(f"  {name:28s} {str(shape):16s} {qtype.name:5s} {time.time() - t0:7.1f}s", file=sys.stderr)
        del data
    w.close()
    if o["verbose"]:
        n_params = sum(int(np.prod(s)) for _, s, _, _ in plan)
        print(f"wrote {path}: {arch} {o['type']} {n_params / 1e6:.1f}M params in {time.time() - t0:.1f}s",
              file=sys.stderr)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", choices=ARCHES, default=DEFAULTS["arch"])
    ap.add_argument("--dim", type=int, default=DEFAULTS["dim"], help="embedding_length")
    ap.add_argument("--n-layers", type=int, default=DEFAULTS["n_layers"])
    ap.add_argument("--n-heads", type=int, default=DEFAULTS["n_heads"])
    ap.add_argument("--n-kv-heads", type=int, default=None, help="default: n_heads")
    ap.add_argument("--head-dim", type=int, default=None, help="default: dim / n_heads")
    ap.add_argument("--ffn", type=int, default=None, help="feed_forward_length (default: 2*dim)")
    ap.add_argument("--vocab", type=int, default=DEFAULTS["vocab"], help=">= 259")
    ap.add_argument("--ctx", type=int, default=DEFAULTS["ctx"], help="context_length")
    ap.add_argument("--rope-base", type=float, default=DEFAULTS["rope_base"])
    ap.add_argument("--rope-scaling", choices=ROPE_SCALINGS, default="none")
    ap.add_argument("--rope-factor", type=float, default=DEFAULTS["rope_factor"])
    ap.add_argument("--rope-orig-ctx", type=int, default=DEFAULTS["rope_orig_ctx"],
                    help="llama3 scaling: original_context_length (default 8192)")
    ap.add_argument("--rms-eps", type=float, default=DEFAULTS["rms_eps"])
    ap.add_argument("--tied", action="store_true", help="no output.weight (output = token_embd)")
    ap.add_argument("--type", choices=tuple(WEIGHT_TYPES), default="F32", help="type of the 2-D weight matrices")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default=None, help="general.name")
    ap.add_argument("--out", required=True, help="output .gguf path")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    opts = {k: v for k, v in vars(a).items() if k != "out"}
    write_model(a.out, **opts)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Independent NumPy reference forward pass for llama / qwen2 / qwen3 GGUF models.

Reads a GGUF with gguf.GGUFReader, dequantizes every weight with
gguf.quants.dequantize, and computes in float64 the logits of every position of
a token sequence with full causal attention (no KV cache). It is written from
the model definitions, not from inferd's C code, so it can check inferd's
forward pass.

RoPE follows llama.cpp:
  * llama: "normal" layout, rotates adjacent pairs (x[2i], x[2i+1]);
  * qwen2, qwen3: NEOX layout, rotates (x[i], x[i + n_rot/2]);
  * theta_i = pos * freq_scale * base^(-2i/n_rot) / rope_freqs[i], where
    freq_scale = 1/factor for `{arch}.rope.scaling.type = linear` and
    rope_freqs is the optional rope_freqs.weight tensor (llama3 scaling).

CLI:
  python tools/numpy_ref.py -m FILE --ids "1 5 9"      # logits, one line per position (%.9g)
  python tools/numpy_ref.py -m FILE --ids "1 5 9" --greedy 48   # greedy continuation ids
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import gguf
from gguf import GGUFReader

NEOX_ARCHES = {"qwen2", "qwen3"}
NORMAL_ARCHES = {"llama"}


def _field(reader: GGUFReader, key: str, default=None):
    f = reader.get_field(key)
    if f is None:
        return default
    v = f.contents()
    return v


class Model:
    """Hyperparameters and float64 weights (numpy logical shapes: (out, in))."""

    def __init__(self, path, dtype=np.float64, emulate_ggml_activations: bool = False):
        """emulate_ggml_activations: round every matmul input the way ggml's CPU
        backend does before its dot products (to F16 for F16 weights, BF16 for
        BF16, Q8_0 blocks for Q8_0/Q4_0 weights; F32 weights: unchanged). Off by
        default: the reference is the exact product with the stored weights."""
        self.emulate_ggml_activations = emulate_ggml_activations
        r = GGUFReader(str(path))
        arch = _field(r, "general.architecture")
        if arch not in NEOX_ARCHES | NORMAL_ARCHES:
            raise ValueError(f"unsupported architecture {arch!r}")
        self.arch = arch
        self.dim = int(_field(r, f"{arch}.embedding_length"))
        self.n_layers = int(_field(r, f"{arch}.block_count"))
        self.n_heads = int(_field(r, f"{arch}.attention.head_count"))
        self.n_kv_heads = int(_field(r, f"{arch}.attention.head_count_kv", self.n_heads))
        self.head_dim = int(_field(r, f"{arch}.attention.key_length", self.dim // self.n_heads))
        vdim = int(_field(r, f"{arch}.attention.value_length", self.head_dim))
        if vdim != self.head_dim:
            raise ValueError("value_length != key_length is not supported")
        self.ffn = int(_field(r, f"{arch}.feed_forward_length"))
        self.eps = float(_field(r, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5))
        self.rope_base = float(_field(r, f"{arch}.rope.freq_base", 10000.0))
        self.n_rot = int(_field(r, f"{arch}.rope.dimension_count", self.head_dim))
        self.ctx = int(_field(r, f"{arch}.context_length", 0))
        scaling = _field(r, f"{arch}.rope.scaling.type", "none")
        factor = float(_field(r, f"{arch}.rope.scaling.factor", 0.0) or 0.0)
        if scaling == "linear" and factor > 0:
            self.freq_scale = 1.0 / factor
        elif scaling in ("none", "linear"):
            self.freq_scale = 1.0
        else:
            raise ValueError(f"unsupported rope scaling type {scaling!r}")
        self.neox = arch in NEOX_ARCHES
        self.bos = _field(r, "tokenizer.ggml.bos_token_id")
        self.eos = _field(r, "tokenizer.ggml.eos_token_id")

        self.w: dict[str, np.ndarray] = {}
        self.types: dict[str, str] = {}
        for t in r.tensors:
            a = gguf.quants.dequantize(t.data, t.tensor_type)
            expect = tuple(int(n) for n in reversed(t.shape.tolist()))
            a = np.asarray(a).reshape(expect)  # logical numpy shape (ne reversed)
            self.w[t.name] = a.astype(dtype)
            self.types[t.name] = t.tensor_type.name
        emb = self.w["token_embd.weight"]
        self.vocab = emb.shape[0]
        assert emb.shape == (self.vocab, self.dim), emb.shape
        # tied when output.weight is absent
        self.output_name = "output.weight" if "output.weight" in self.w else "token_embd.weight"
        self.rope_freqs = self.w.get("rope_freqs.weight")
        if self.rope_freqs is not None:
            assert self.rope_freqs.shape == (self.n_rot // 2,), self.rope_freqs.shape

    # ------------------------------------------------------------------

    def round_activations(self, x: np.ndarray, wtype: str) -> np.ndarray:
        """x rounded to what ggml feeds a dot product with a `wtype` weight."""
        # the 32-element block family: ggml's Q8_0 / Q8_1 activations (the same int8 rounding)
        if wtype in ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL"):
            x32 = np.ascontiguousarray(x, dtype=np.float32)
            q = gguf.quants.quantize(x32, gguf.GGMLQuantizationType.Q8_0)
            return gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q8_0).astype(x.dtype)
        if wtype == "F16":
            return x.astype(np.float16).astype(x.dtype)
        if wtype == "BF16":
            bf = gguf.quants.quantize(np.ascontiguousarray(x, dtype=np.float32), gguf.GGMLQuantizationType.BF16)
            return gguf.quants.dequantize(bf, gguf.GGMLQuantizationType.BF16).astype(x.dtype)
        if wtype in ("F32",):
            return x
        raise NotImplementedError(f"activation rounding for {wtype} weights")

    def matmul(self, x: np.ndarray, name: str) -> np.ndarray:
        """x @ W.T for the weight `name` (numpy shape (out, in))."""
        if self.emulate_ggml_activations:
            x = self.round_activations(x, self.types[name])
        return x @ self.w[name].T

    def rms_norm(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """x: (n, heads, head_dim); rotates the first n_rot dims of every head."""
        n_rot, half = self.n_rot, self.n_rot // 2
        inv = self.rope_base ** (-2.0 * np.arange(half, dtype=np.float64) / n_rot)
        if self.rope_freqs is not None:
            inv = inv / self.rope_freqs
        theta = pos.astype(np.float64)[:, None] * self.freq_scale * inv[None, :]  # (n, half)
        cos = np.cos(theta)[:, None, :]
        sin = np.sin(theta)[:, None, :]
        out = x.copy()
        if self.neox:
            x0, x1 = x[..., :half], x[..., half:n_rot]
            out[..., :half] = x0 * cos - x1 * sin
            out[..., half:n_rot] = x0 * sin + x1 * cos
        else:
            x0, x1 = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
            out[..., 0:n_rot:2] = x0 * cos - x1 * sin
            out[..., 1:n_rot:2] = x0 * sin + x1 * cos
        return out

    @staticmethod
    def expand_kv(x: np.ndarray, group: int) -> np.ndarray:
        """(n, KV, hd) -> (n, KV*group, hd): query head h uses KV head h // group."""
        return np.repeat(x, group, axis=1)

    def attention(self, i: int, x: np.ndarray, pos: np.ndarray) -> np.ndarray:
        w, p = self.w, f"blk.{i}."
        n, hd, H, KV = x.shape[0], self.head_dim, self.n_heads, self.n_kv_heads
        q = self.matmul(x, p + "attn_q.weight")
        k = self.matmul(x, p + "attn_k.weight")
        v = self.matmul(x, p + "attn_v.weight")
        if p + "attn_q.bias" in w:
            q = q + w[p + "attn_q.bias"]
            k = k + w[p + "attn_k.bias"]
            v = v + w[p + "attn_v.bias"]
        q = q.reshape(n, H, hd)
        k = k.reshape(n, KV, hd)
        v = v.reshape(n, KV, hd)
        if p + "attn_q_norm.weight" in w:  # qwen3: per-head RMSNorm before RoPE
            q = self.rms_norm(q, w[p + "attn_q_norm.weight"])
            k = self.rms_norm(k, w[p + "attn_k_norm.weight"])
        q = self.rope(q, pos)
        k = self.rope(k, pos)
        group = H // KV
        k = self.expand_kv(k, group)
        v = self.expand_kv(v, group)
        s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd)  # (H, n, n)
        causal = np.triu(np.ones((n, n), dtype=bool), 1)
        s = np.where(causal[None], -np.inf, s)
        s = s - s.max(axis=-1, keepdims=True)
        pr = np.exp(s)
        pr /= pr.sum(axis=-1, keepdims=True)
        o = np.einsum("hqk,khd->qhd", pr, v).reshape(n, H * hd)
        return self.matmul(o, p + "attn_output.weight")

    def mlp(self, i: int, x: np.ndarray) -> np.ndarray:
        p = f"blk.{i}."
        g = self.matmul(x, p + "ffn_gate.weight")
        u = self.matmul(x, p + "ffn_up.weight")
        silu = g / (1.0 + np.exp(-g))
        return self.matmul(silu * u, p + "ffn_down.weight")

    def forward(self, ids) -> np.ndarray:
        """Logits (len(ids), vocab) of every position, positions 0..n-1."""
        ids = np.asarray(list(ids), dtype=np.int64)
        if ids.ndim != 1 or len(ids) == 0:
            raise ValueError("ids must be a non-empty 1-D sequence")
        if ids.min() < 0 or ids.max() >= self.vocab:
            raise ValueError(f"token id out of range [0, {self.vocab})")
        pos = np.arange(len(ids))
        x = self.w["token_embd.weight"][ids]
        for i in range(self.n_layers):
            p = f"blk.{i}."
            x = x + self.attention(i, self.rms_norm(x, self.w[p + "attn_norm.weight"]), pos)
            x = x + self.mlp(i, self.rms_norm(x, self.w[p + "ffn_norm.weight"]))
        x = self.rms_norm(x, self.w["output_norm.weight"])
        return self.matmul(x, self.output_name)

    def greedy(self, ids, n_new: int, stop_at_eos: bool = True) -> list[int]:
        seq = list(ids)
        out = []
        for _ in range(n_new):
            nxt = int(np.argmax(self.forward(seq)[-1]))
            if stop_at_eos and nxt == self.eos:
                break
            out.append(nxt)
            seq.append(nxt)
        return out


def logits(path, ids) -> np.ndarray:
    """float64 logits (len(ids), vocab) of the GGUF model at `path`."""
    return Model(path).forward(ids)


def parse_ids(s: str) -> list[int]:
    return [int(t) for t in s.replace(",", " ").split()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="NumPy reference logits for a GGUF model")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--ids", required=True, help='token ids, e.g. "1 5 9" (used verbatim, no BOS added)')
    ap.add_argument("--greedy", type=int, default=0, metavar="N",
                    help="print N greedily decoded ids instead of logits")
    a = ap.parse_args(argv)
    m = Model(a.model)
    ids = parse_ids(a.ids)
    if a.greedy:
        print(" ".join(str(t) for t in m.greedy(ids, a.greedy, stop_at_eos=False)))
    else:
        out = sys.stdout
        for row in m.forward(ids):
            out.write(" ".join("%.9g" % v for v in row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

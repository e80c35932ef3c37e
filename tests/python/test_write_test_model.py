"""tools/write_test_model.py writes GGUF files GGUFReader reads back with the
right metadata, tensor names, shapes, types and values."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import gguf
from gguf import GGMLQuantizationType as QT

import write_test_model as wtm
from write_test_model import write_model

ARCHES = ("llama", "qwen2", "qwen3")
TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0")
MATRIX_SUFFIXES = ("attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
                   "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")


def _fields(reader):
    return {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}


def _tensors(reader):
    # name -> (numpy logical shape, ggml type); GGUF ne is the reverse of the numpy shape.
    return {t.name: (tuple(int(n) for n in reversed(t.shape.tolist())), t.tensor_type) for t in reader.tensors}


def expected_tensors(arch, dim, n_layers, n_heads, n_kv, hd, ffn, vocab, wtype, tied=False, llama3=False):
    WT = {"F32": QT.F32, "F16": QT.F16, "BF16": QT.BF16, "Q8_0": QT.Q8_0, "Q4_0": QT.Q4_0}[wtype]
    e = {"token_embd.weight": ((vocab, dim), WT), "output_norm.weight": ((dim,), QT.F32)}
    if not tied:
        e["output.weight"] = ((vocab, dim), WT)
    if llama3:
        e["rope_freqs.weight"] = ((hd // 2,), QT.F32)
    for i in range(n_layers):
        p = f"blk.{i}."
        e[p + "attn_norm.weight"] = ((dim,), QT.F32)
        e[p + "ffn_norm.weight"] = ((dim,), QT.F32)
        e[p + "attn_q.weight"] = ((n_heads * hd, dim), WT)
        e[p + "attn_k.weight"] = ((n_kv * hd, dim), WT)
        e[p + "attn_v.weight"] = ((n_kv * hd, dim), WT)
        e[p + "attn_output.weight"] = ((dim, n_heads * hd), WT)
        e[p + "ffn_gate.weight"] = ((ffn, dim), WT)
        e[p + "ffn_up.weight"] = ((ffn, dim), WT)
        e[p + "ffn_down.weight"] = ((dim, ffn), WT)
        if arch == "qwen2":
            e[p + "attn_q.bias"] = ((n_heads * hd,), QT.F32)
            e[p + "attn_k.bias"] = ((n_kv * hd,), QT.F32)
            e[p + "attn_v.bias"] = ((n_kv * hd,), QT.F32)
        if arch == "qwen3":
            e[p + "attn_q_norm.weight"] = ((hd,), QT.F32)
            e[p + "attn_k_norm.weight"] = ((hd,), QT.F32)
    return e


@pytest.mark.parametrize("wtype", TYPES)
@pytest.mark.parametrize("arch", ARCHES)
def test_metadata_and_tensors(arch, wtype, work_dir):
    path = work_dir / "m.gguf"
    dim, n_layers, n_heads, n_kv, hd, ffn, vocab = 256, 2, 4, 2, 128, 384, 300
    write_model(path, arch=arch, dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv, head_dim=hd,
                ffn=ffn, vocab=vocab, ctx=512, rope_base=500000.0, rms_eps=1e-6, type=wtype, seed=3)
    r = gguf.GGUFReader(path)
    assert r.fields["GGUF.version"].contents() == 3
    f = _fields(r)
    a = arch
    assert f["general.architecture"] == arch
    assert f["general.name"]
    assert f[f"{a}.context_length"] == 512
    assert f[f"{a}.embedding_length"] == dim
    assert f[f"{a}.block_count"] == n_layers
    assert f[f"{a}.feed_forward_length"] == ffn
    assert f[f"{a}.attention.head_count"] == n_heads
    assert f[f"{a}.attention.head_count_kv"] == n_kv
    assert f[f"{a}.attention.key_length"] == hd
    assert f[f"{a}.attention.value_length"] == hd
    assert f[f"{a}.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-6, rel=1e-6)
    assert f[f"{a}.rope.freq_base"] == 500000.0
    assert f[f"{a}.rope.dimension_count"] == hd
    assert f"{a}.rope.scaling.type" not in f
    assert f["general.file_type"] == int(wtm.WEIGHT_TYPES[wtype][1])

    assert _tensors(r) == expected_tensors(arch, dim, n_layers, n_heads, n_kv, hd, ffn, vocab, wtype)
    # GGUF ne order: token_embd is ne = [dim, vocab]
    t = next(t for t in r.tensors if t.name == "token_embd.weight")
    assert [int(n) for n in t.shape] == [dim, vocab]


def test_vocabulary(work_dir):
    path = work_dir / "m.gguf"
    write_model(path, vocab=300)
    f = _fields(gguf.GGUFReader(path))
    assert f["tokenizer.ggml.model"] == "llama"
    toks, scores, types = f["tokenizer.ggml.tokens"], f["tokenizer.ggml.scores"], f["tokenizer.ggml.token_type"]
    assert len(toks) == len(scores) == len(types) == 300
    assert toks[:3] == ["<unk>", "<s>", "</s>"]
    assert types[:3] == [2, 3, 3]
    assert toks[3:259] == [f"<0x{b:02X}>" for b in range(256)]
    assert set(types[3:259]) == {6}
    assert all(t.startswith("\u2581") and len(t) > 1 for t in toks[259:])
    assert set(types[259:]) == {1}
    assert len(set(toks)) == 300
    assert scores[259] > scores[299]
    assert f["tokenizer.ggml.bos_token_id"] == 1
    assert f["tokenizer.ggml.eos_token_id"] == 2
    assert f["tokenizer.ggml.unknown_token_id"] == 0
    assert f["tokenizer.ggml.add_bos_token"] is True
    assert f["general.architecture"] + ".vocab_size" in f


def test_large_vocab_is_unique():
    toks, _, _ = wtm.make_vocab(32000)
    assert len(toks) == 32000 and len(set(toks)) == 32000


def test_small_vocab_rejected(work_dir):
    with pytest.raises(ValueError):
        write_model(work_dir / "m.gguf", vocab=200)


def test_default_head_dim_and_tied(work_dir):
    path = work_dir / "m.gguf"
    write_model(path, arch="llama", dim=128, n_heads=2, tied=True, type="Q8_0")
    r = gguf.GGUFReader(path)
    f = _fields(r)
    assert f["llama.attention.key_length"] == 64
    assert f["llama.rope.dimension_count"] == 64
    assert f["llama.attention.head_count_kv"] == 2
    names = {t.name for t in r.tensors}
    assert "output.weight" not in names and "token_embd.weight" in names


def test_linear_rope_scaling(work_dir):
    path = work_dir / "m.gguf"
    write_model(path, arch="qwen2", rope_scaling="linear", rope_factor=4.0)
    f = _fields(gguf.GGUFReader(path))
    assert f["qwen2.rope.scaling.type"] == "linear"
    assert f["qwen2.rope.scaling.factor"] == 4.0


def test_llama3_rope_freqs(work_dir):
    path = work_dir / "m.gguf"
    hd, base, factor = 128, 500000.0, 8.0
    write_model(path, arch="llama", dim=256, n_heads=2, rope_base=base, rope_scaling="llama3", rope_factor=factor)
    r = gguf.GGUFReader(path)
    f = _fields(r)
    assert "llama.rope.scaling.type" not in f  # llama.cpp's converter stores only the tensor
    t = next(t for t in r.tensors if t.name == "rope_freqs.weight")
    assert t.tensor_type == QT.F32 and [int(n) for n in t.shape] == [hd // 2]
    got = np.asarray(t.data, dtype=np.float64)
    # Llama 3.1: wavelength < 8192/4 -> 1; > 8192/1 -> factor; in between smooth.
    inv = base ** (-np.arange(0, hd, 2) / hd)
    wl = 2 * np.pi / inv
    assert np.all(got[wl < 2048] == 1.0)
    assert np.all(got[wl > 8192] == factor)
    mid = (wl >= 2048) & (wl <= 8192)
    assert mid.any()
    smooth = (8192 / wl[mid] - 1.0) / (4.0 - 1.0)
    np.testing.assert_allclose(got[mid], 1.0 / ((1 - smooth) / factor + smooth), rtol=1e-6)
    assert np.all(np.diff(got) >= 0)


@pytest.mark.parametrize("wtype,tol", [("F32", 0), ("F16", 1e-3), ("BF16", 8e-3), ("Q8_0", 1e-2), ("Q4_0", 0.2)])
def test_stored_values_and_scales(wtype, tol, work_dir):
    """Stored weights decode to the generated values (up to the type's rounding),
    projections have std ~ 1/sqrt(fan_in), norms ~ 1 +- 0.1."""
    path = work_dir / "m.gguf"
    o = dict(arch="qwen2", dim=256, n_heads=4, n_kv_heads=2, ffn=512, type=wtype, seed=9)
    write_model(path, **o)
    r = gguf.GGUFReader(path)
    resolved = wtm._resolve(o)
    plan = {name: (shape, kind, scale) for name, shape, kind, scale in wtm.tensor_plan(resolved)}
    for t in r.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type).reshape(plan[t.name][0])
        shape, kind, scale = plan[t.name]
        src = wtm._gen(resolved, t.name, shape, kind, scale)
        err = np.max(np.abs(w - src)) / np.max(np.abs(src))
        assert err <= (tol if kind == "matrix" else 0), (t.name, err)
        if kind == "matrix":
            assert np.std(src) == pytest.approx(scale, rel=0.1)
        elif kind == "norm":
            assert np.mean(src) == pytest.approx(1.0, abs=0.03) and np.std(src) == pytest.approx(0.1, rel=0.3)
    # fan-in scaling as promised
    assert plan["blk.0.attn_q.weight"][2] == pytest.approx(256 ** -0.5)
    assert plan["blk.0.ffn_down.weight"][2] == pytest.approx(512 ** -0.5)


def test_deterministic(work_dir):
    a, b, c = work_dir / "a.gguf", work_dir / "b.gguf", work_dir / "c.gguf"
    write_model(a, arch="qwen3", type="Q4_0", seed=5)
    write_model(b, arch="qwen3", type="Q4_0", seed=5)
    write_model(c, arch="qwen3", type="Q4_0", seed=6)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


def test_tensor_values_do_not_depend_on_other_tensors(work_dir):
    """Per-tensor random streams: tying the output does not change other weights."""
    write_model(work_dir / "a.gguf", seed=1)
    write_model(work_dir / "b.gguf", seed=1, tied=True)
    ta = {t.name: np.array(t.data) for t in gguf.GGUFReader(work_dir / "a.gguf").tensors}
    tb = {t.name: np.array(t.data) for t in gguf.GGUFReader(work_dir / "b.gguf").tensors}
    for name in ("blk.0.attn_q.weight", "blk.1.ffn_down.weight", "output_norm.weight"):
        assert np.array_equal(ta[name], tb[name])


def test_quantized_shape_validation(work_dir):
    with pytest.raises(ValueError):
        write_model(work_dir / "m.gguf", dim=48, n_heads=1, type="Q8_0")


def test_cli(repo_root, work_dir):
    out = work_dir / "cli.gguf"
    cmd = [sys.executable, str(repo_root / "tools" / "write_test_model.py"), "--arch", "qwen3", "--dim", "128",
           "--n-layers", "1", "--n-heads", "2", "--n-kv-heads", "1", "--head-dim", "128", "--ffn", "256",
           "--vocab", "320", "--ctx", "128", "--rope-base", "1000000", "--rope-scaling", "linear",
           "--rope-factor", "2", "--rms-eps", "1e-6", "--tied", "--type", "BF16", "--seed", "4", "--out", str(out)]
    subprocess.run(cmd, check=True, timeout=60)
    r = gguf.GGUFReader(out)
    f = _fields(r)
    assert f["general.architecture"] == "qwen3"
    assert f["qwen3.block_count"] == 1
    assert f["qwen3.rope.scaling.factor"] == 2.0
    assert f["general.file_type"] == int(gguf.LlamaFileType.MOSTLY_BF16)
    assert _tensors(r) == expected_tensors("qwen3", 128, 1, 2, 1, 128, 256, 320, "BF16", tied=True)


@pytest.mark.skipif(not os.environ.get("INFERD_SLOW_TESTS"), reason="set INFERD_SLOW_TESTS=1 (~40 s, 0.6 GB)")
def test_1b_model_q4_0(work_dir):
    path = work_dir / "big.gguf"
    write_model(path, arch="llama", dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, ffn=8192, vocab=32000,
                ctx=2048, type="Q4_0")
    r = gguf.GGUFReader(path)
    n = sum(int(np.prod([int(x) for x in t.shape])) for t in r.tensors)
    assert 1.0e9 < n < 1.2e9

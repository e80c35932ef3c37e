"""inferd's reference quant kernels (src/model/quant.c) against gguf's numpy ones.

For every type that inferd computes with by its reference kernels only (the newer
ones: Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q5_K, IQ4_XS) random block bytes with sane
finite f16 scales are written to a file, the quant_tool test binary (built next to
inferd) dequantizes them with inferd's reference, and gguf.quants.dequantize does the
same in numpy. Both compute each value as the same float32 expression (d * q [+/- m]),
so the comparison is BIT-EXACT (0 ulp). The reference dot is checked against
float64 sum(dequantized * x) (f32 accumulation: relative 1e-5 of sum|w*x|), and the
reference quantizers (Q4_1, Q5_0, Q5_1, IQ4_NL) by their round trip; the K-quant
quantizers' blocks (Q2_K .. Q6_K) are decoded by gguf and must equal inferd's decode.

Run: pytest tests/python/test_quant_types.py   (INFERD_BIN overrides build/inferd;
quant_tool is taken from the same directory)
"""
from __future__ import annotations

import os
import zlib
import subprocess
from pathlib import Path

import numpy as np
import pytest

from requires import require_module

gguf = require_module("gguf", "pip install -r requirements-dev.txt (gguf)")
from gguf import GGMLQuantizationType as QT  # noqa: E402
from gguf.quants import dequantize  # noqa: E402

N_BLOCKS = 64

# name -> byte offsets of the f16 scale fields inside one block (random bytes elsewhere:
# every bit pattern of quants and packed sub-scales is valid)
F16_FIELDS = {
    "Q4_1": (0, 2),
    "Q5_0": (0,),
    "Q5_1": (0, 2),
    "IQ4_NL": (0,),
    "Q2_K": (80, 82),
    "Q3_K": (108,),
    "Q5_K": (0, 2),
    "IQ4_XS": (0,),
}
TYPES = tuple(F16_FIELDS)


@pytest.fixture(scope="session")
def quant_tool(inferd_bin) -> Path:
    p = Path(inferd_bin).parent / "quant_tool"
    if not p.is_file() or not os.access(p, os.X_OK):
        pytest.fail(f"quant_tool not found next to the inferd binary ({p}); build the tree with CMake")
    return p


def random_blocks(name: str, rng: np.random.Generator) -> np.ndarray:
    qt = QT[name]
    bs, bb = gguf.GGML_QUANT_SIZES[qt]
    raw = rng.integers(0, 256, size=(N_BLOCKS, bb), dtype=np.uint8)
    for off in F16_FIELDS[name]:
        # sane scales: finite, both signs, magnitudes 1e-4 .. 1e-1
        v = (rng.uniform(1e-4, 1e-1, N_BLOCKS) * rng.choice([-1.0, 1.0], N_BLOCKS)).astype(np.float16)
        raw[:, off:off + 2] = v.view(np.uint8).reshape(N_BLOCKS, 2)
    return raw


def run_tool(tool: Path, *args) -> None:
    p = subprocess.run([str(tool), *map(str, args)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"quant_tool {' '.join(map(str, args))} failed ({p.returncode}): {p.stderr}"


@pytest.mark.parametrize("name", TYPES)
def test_dequantize_bit_exact_vs_gguf(name, quant_tool, tmp_path):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    raw = random_blocks(name, rng)
    src, dst = tmp_path / "blocks.bin", tmp_path / "out.f32"
    raw.tofile(src)
    run_tool(quant_tool, "dequant", name, src, dst)
    got = np.fromfile(dst, dtype=np.float32)
    want = dequantize(raw.reshape(-1), QT[name]).astype(np.float32).reshape(-1)
    assert got.shape == want.shape
    assert np.all(np.isfinite(want))
    # sanity that the data is not degenerate (a decoder returning zeros must fail)
    assert np.count_nonzero(want) > want.size // 2
    bad = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    assert bad.size == 0, (f"{name}: {bad.size} of {want.size} values differ, first at {bad[0]}: "
                           f"inferd {got[bad[0]]!r} gguf {want[bad[0]]!r}")


@pytest.mark.parametrize("name", TYPES)
def test_dot_matches_dequantized(name, quant_tool, tmp_path):
    rng = np.random.default_rng(7 + zlib.crc32(name.encode()))
    raw = random_blocks(name, rng)
    w = dequantize(raw.reshape(-1), QT[name]).astype(np.float64).reshape(-1)
    x = rng.standard_normal(w.size).astype(np.float32)
    (tmp_path / "w.bin").write_bytes(raw.tobytes())
    x.tofile(tmp_path / "x.f32")
    run_tool(quant_tool, "dot", name, tmp_path / "w.bin", tmp_path / "x.f32", tmp_path / "r.f32")
    got = float(np.fromfile(tmp_path / "r.f32", dtype=np.float32)[0])
    want = float(np.dot(w, x.astype(np.float64)))
    scale = float(np.sum(np.abs(w * x)))
    assert abs(got - want) <= 1e-5 * scale, f"{name}: dot {got} vs {want} (scale {scale})"


# Round-trip bound of the round-to-nearest quantizers, as a fraction of each block's
# range (max - min) or magnitude (max |x|), plus 2e-3 for the f16 rounding of d, m:
#  Q4_1/Q5_1: half a step of (max - min) / (2^b - 1);
#  Q5_0: d = max / -16 puts +-amax at -16 and +16, clamped to 15: one step (1/16) there;
#  IQ4_NL: d = max / -127, the other end's 127 lands on the table's 113: 14/127 (the
#  widest interior half-gap is 12/127).
QUANT_BOUND = {"Q4_1": 0.5 / 15 + 2e-3, "Q5_1": 0.5 / 31 + 2e-3, "Q5_0": 1.0 / 16 + 2e-3,
               "IQ4_NL": 14.0 / 127 + 2e-3}


@pytest.mark.parametrize("name", tuple(QUANT_BOUND))
def test_quantize_round_trip(name, quant_tool, tmp_path):
    rng = np.random.default_rng(11)
    x = (rng.standard_normal(32 * N_BLOCKS) * rng.uniform(0.01, 2.0, 32 * N_BLOCKS)).astype(np.float32)
    x.tofile(tmp_path / "x.f32")
    run_tool(quant_tool, "quant", name, tmp_path / "x.f32", tmp_path / "q.bin")
    q = np.fromfile(tmp_path / "q.bin", dtype=np.uint8)
    y = dequantize(q, QT[name]).astype(np.float32).reshape(-1)  # gguf decodes inferd's blocks
    xb, yb = x.reshape(-1, 32), y.reshape(-1, 32)
    if name in ("Q4_1", "Q5_1"):
        ref = xb.max(axis=1) - xb.min(axis=1)
    else:
        ref = np.abs(xb).max(axis=1)
    err = np.abs(xb - yb).max(axis=1) / ref
    assert err.max() <= QUANT_BOUND[name], f"{name}: worst block error {err.max():.4g} of its range"
    if name in ("Q4_1", "Q5_1", "Q5_0"):
        # gguf's numpy quantizer follows ggml's reference: the same rounding, nearly
        # the same bytes (the f32 arithmetic differs only in d = (max-min)/n's ulp)
        theirs = gguf.quants.quantize(x.reshape(1, -1), QT[name]).reshape(-1)
        same = np.mean(theirs == q)
        assert same > 0.99, f"{name}: only {same:.3f} of the bytes equal gguf's quantizer"


# The K-quant quantizers (src/model/quant_kq.c): rows at several magnitudes with an
# outlier, quantized by inferd, decoded by gguf.quants: the blocks are the standard
# layout when gguf's decode equals inferd's own dequantizer bit for bit; the error is
# that of a real grid (RMS relative to the row's, bounds per format, never zero).
KQUANT_REL = {"Q2_K": (0.05, 0.5), "Q3_K": (0.03, 0.3), "Q4_K": (0.01, 0.12), "Q5_K": (0.005, 0.06),
              "Q6_K": (0.002, 0.03)}


@pytest.mark.parametrize("name", tuple(KQUANT_REL))
def test_kquant_quantize_layout_vs_gguf(name, quant_tool, tmp_path):
    rng = np.random.default_rng(zlib.crc32(b"kq" + name.encode()))
    n = 256 * N_BLOCKS
    mag = np.repeat(np.array([1e-3, 0.05, 1.0, 30.0]), n // 4)
    x = (rng.standard_normal(n) * mag).astype(np.float32)
    x[17] = 6e-3  # an outlier (6x the first quarter's magnitude)
    x.tofile(tmp_path / "x.f32")
    run_tool(quant_tool, "quant", name, tmp_path / "x.f32", tmp_path / "q.bin")
    q = np.fromfile(tmp_path / "q.bin", dtype=np.uint8)
    bs, bb = gguf.GGML_QUANT_SIZES[QT[name]]
    assert q.size == n // bs * bb
    run_tool(quant_tool, "dequant", name, tmp_path / "q.bin", tmp_path / "y.f32")
    ours = np.fromfile(tmp_path / "y.f32", dtype=np.float32)
    theirs = dequantize(q, QT[name]).astype(np.float32).reshape(-1)
    assert np.all(np.isfinite(theirs))
    bad = np.flatnonzero(ours.view(np.uint32) != theirs.view(np.uint32))
    assert bad.size == 0, f"{name}: gguf decodes {bad.size} of {n} values differently, first at {bad[0]}"
    lo, hi = KQUANT_REL[name]
    for k in range(4):  # per magnitude
        sl = slice(k * n // 4, (k + 1) * n // 4)
        rel = float(np.sqrt(np.mean((theirs[sl].astype(np.float64) - x[sl]) ** 2) / np.mean(x[sl].astype(np.float64) ** 2)))
        assert lo < rel < hi, f"{name}: relative RMS error {rel:.4g} at magnitude {mag[sl][0]}"


# ---- loading: the new types run on the CPU; where they cannot run, a clear error ----

def _tiny(path, wtype):
    from write_test_model import write_model
    write_model(path, arch="llama", type=wtype, n_layers=2, dim=128, n_heads=2, n_kv_heads=2, ffn=256,
                vocab=300, seed=3)


def _with_type(src, dst, tensor, qtype, rng):
    """Copy GGUF src to dst with `tensor` replaced by random bytes of type qtype."""
    r = gguf.GGUFReader(str(src))
    w = gguf.GGUFWriter(str(dst), arch="llama")
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        vt = f.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            w.add_key_value(f.name, f.contents(), vt, sub_type=f.types[-1])
        else:
            w.add_key_value(f.name, f.contents(), vt)
    for t in r.tensors:
        shape = tuple(int(x) for x in reversed(t.shape))  # numpy order (rows, cols)
        if t.name == tensor:
            bs, bb = gguf.GGML_QUANT_SIZES[qtype]
            data = rng.integers(0, 256, size=(shape[0], shape[1] // bs * bb), dtype=np.uint8)
            w.add_tensor(t.name, data, raw_dtype=qtype)
        else:
            w.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _generate(inferd_bin, model, *extra):
    cmd = [str(inferd_bin), "generate", "-m", str(model), "-p", "To be", "-n", "3", "-t", "2", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def _all_of_type(src, dst, qtype, rng):
    """Copy GGUF src to dst with every weight matrix (token_embd included) replaced by
    random blocks of qtype with sane f16 scale fields (random_blocks' recipe, smaller)."""
    r = gguf.GGUFReader(str(src))
    w = gguf.GGUFWriter(str(dst), arch="llama")
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        vt = f.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            w.add_key_value(f.name, f.contents(), vt, sub_type=f.types[-1])
        else:
            w.add_key_value(f.name, f.contents(), vt)
    bs, bb = gguf.GGML_QUANT_SIZES[qtype]
    for t in r.tensors:
        shape = tuple(int(x) for x in reversed(t.shape))  # numpy order (rows, cols)
        if len(shape) == 2 and t.name.endswith(".weight"):
            n = shape[0] * shape[1] // bs
            data = rng.integers(0, 256, size=(n, bb), dtype=np.uint8)
            for off in F16_FIELDS[qtype.name]:
                v = (rng.uniform(1e-3, 2e-2, n) * rng.choice([-1.0, 1.0], n)).astype(np.float16)
                data[:, off:off + 2] = v.view(np.uint8).reshape(n, 2)
            w.add_tensor(t.name, data.reshape(shape[0], -1), raw_dtype=qtype)
        else:
            w.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _emu_or_skip(p):
    if "not built" in p.stderr:
        from requires import skip_unless_ci
        skip_unless_ci(f"this build has no SIMT emulation backend: {p.stderr.strip()}")


def _tiny256(path, wtype):
    from write_test_model import write_model
    write_model(path, arch="llama", type=wtype, n_layers=2, dim=256, n_heads=2, n_kv_heads=2, ffn=512,
                vocab=300, seed=3)


@pytest.mark.parametrize("name", TYPES)
def test_new_type_runs_on_emu_as_on_cpu(name, inferd_bin, work_dir):
    """Every matrix (token embedding and output included) of a newer type: the CUDA
    backend's kernels under the emulation generate the CPU reference kernels' greedy
    tokens (INFERD_CPU=scalar: f32 activations, both sides accurate to fp32 rounding,
    so a 6-token greedy continuation of this small model agrees)."""
    m = work_dir / f"{name}.gguf"
    if name in ("Q4_1", "Q5_1"):
        _tiny256(m, name)  # gguf's quantizer of the model's own weights
    else:
        src = work_dir / "f32.gguf"
        _tiny256(src, "F32")
        _all_of_type(src, m, QT[name], np.random.default_rng(zlib.crc32(name.encode())))
    # an f32 KV cache on both sides (the backends' defaults differ: f16 / bf16): weights alone
    cmd = [str(inferd_bin), "generate", "-m", str(m), "-p", "To be", "-n", "6", "-t", "2", "--temp", "0",
           "--kv-cache-dtype", "f32"]
    cpu = subprocess.run(cmd + ["--device", "cpu"], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "INFERD_CPU": "scalar"})
    assert cpu.returncode == 0, cpu.stderr
    emu = subprocess.run(cmd + ["--device", "emu"], capture_output=True, text=True, timeout=600)
    _emu_or_skip(emu)
    assert emu.returncode == 0, emu.stderr
    assert emu.stdout.strip(), "no output"
    assert emu.stdout == cpu.stdout, (name, cpu.stdout, emu.stdout)


@pytest.mark.parametrize("qtype", [QT.IQ2_XXS, QT.IQ3_S, QT.IQ1_S, QT.TQ2_0, QT.Q8_K])
def test_unsupported_type_fails_the_load_by_name(qtype, inferd_bin, work_dir):
    rng = np.random.default_rng(int(qtype))
    src, dst = work_dir / "q8.gguf", work_dir / "bad.gguf"
    _tiny(src, "Q8_0")
    _with_type(src, dst, "blk.0.ffn_down.weight", qtype, rng)  # 256 columns: one 256-block
    p = _generate(inferd_bin, dst, "--device", "cpu")
    assert p.returncode != 0 and p.returncode < 128, (p.returncode, p.stderr)
    assert f"tensor 'blk.0.ffn_down.weight' has unsupported type {qtype.name}" in p.stderr, p.stderr

"""inferd's reference quant kernels (src/model/quant.c) against gguf's numpy ones.

For every type that inferd computes with by its reference kernels only (the newer
ones: Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q5_K, IQ4_XS) random block bytes with sane
finite f16 scales are written to a file, the quant_tool test binary (built next to
inferd) dequantizes them with inferd's reference, and gguf.quants.dequantize does the
same in numpy. Both compute each value as the same float32 expression (d * q [+/- m]),
so the comparison is BIT-EXACT (0 ulp). The reference dot is checked against
float64 sum(dequantized * x) (f32 accumulation: relative 1e-5 of sum|w*x|), and the
reference quantizers (Q4_1, Q5_0, Q5_1, IQ4_NL) by their round trip.

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

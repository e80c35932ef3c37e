"""inferd's K-quant quantizers (src/model/quant_kq.c) against llama.cpp's on real weights.

../shared/models/shakespeare-target-Q4_K_M.gguf is llama.cpp's llama-quantize output of
the F32 shakespeare-target.gguf: its tensors of type Q4_K and Q6_K are llama.cpp's
reference quantizer applied to the same weights (no importance matrix). For each of
those tensors the F32 original is quantized by inferd (quant_tool quant, through the
traits' quantize_row), both results are dequantized by gguf.quants (the independent
decoder), and the plain (unweighted) RMS error against the F32 weights is compared:
inferd's may be at most 1.05 x llama.cpp's, per tensor and summed over each type.
The gguf decode of inferd's blocks must also equal inferd's own dequantizer bit for bit.

Run: pytest tests/python/test_kquant_quality.py   (INFERD_BIN overrides build/inferd;
quant_tool is taken from the same directory)
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from requires import require_module

gguf = require_module("gguf", "pip install -r requirements-dev.txt (gguf)")
from gguf import GGMLQuantizationType as QT  # noqa: E402
from gguf.quants import dequantize  # noqa: E402

RATIO_MAX = 1.05
TYPES = ("Q4_K", "Q6_K")


@pytest.fixture(scope="module")
def quant_tool(inferd_bin) -> Path:
    p = Path(inferd_bin).parent / "quant_tool"
    if not p.is_file() or not os.access(p, os.X_OK):
        pytest.fail(f"quant_tool not found next to the inferd binary ({p}); build the tree with CMake")
    return p


@pytest.fixture(scope="module")
def pairs(shared_models):
    """[(name, type name, f32 weights (flat), llama.cpp's raw blocks)] of every Q4_K / Q6_K tensor."""
    f32 = {t.name: t for t in gguf.GGUFReader(str(shared_models / "shakespeare-target.gguf")).tensors}
    out = []
    for t in gguf.GGUFReader(str(shared_models / "shakespeare-target-Q4_K_M.gguf")).tensors:
        if t.tensor_type.name not in TYPES:
            continue
        src = f32[t.name]
        assert src.tensor_type == QT.F32, f"{t.name} is {src.tensor_type.name} in the F32 file"
        w = np.asarray(src.data, dtype=np.float32).reshape(-1)
        assert w.size == int(np.prod(t.shape)), t.name
        out.append((t.name, t.tensor_type.name, w, np.asarray(t.data, dtype=np.uint8).reshape(-1)))
    assert {p[1] for p in out} == set(TYPES), "the Q4_K_M file should hold both Q4_K and Q6_K tensors"
    return out


def run_tool(tool: Path, *args) -> None:
    p = subprocess.run([str(tool), *map(str, args)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"quant_tool {' '.join(map(str, args))} failed ({p.returncode}): {p.stderr}"


@pytest.fixture(scope="module")
def errors(pairs, quant_tool, tmp_path_factory):
    """{tensor: (type, n, sum sq err ours, sum sq err llama.cpp)}"""
    d = tmp_path_factory.mktemp("kq")
    res = {}
    for name, tname, w, theirs_raw in pairs:
        w.tofile(d / "w.f32")
        run_tool(quant_tool, "quant", tname, d / "w.f32", d / "q.bin")
        run_tool(quant_tool, "dequant", tname, d / "q.bin", d / "y.f32")
        q = np.fromfile(d / "q.bin", dtype=np.uint8)
        assert q.size == theirs_raw.size, f"{name}: {q.size} bytes vs llama.cpp's {theirs_raw.size}"
        ours = dequantize(q, QT[tname]).astype(np.float32).reshape(-1)
        own = np.fromfile(d / "y.f32", dtype=np.float32)
        assert np.array_equal(ours.view(np.uint32), own.view(np.uint32)), f"{name}: gguf decodes our blocks differently"
        theirs = dequantize(theirs_raw, QT[tname]).astype(np.float32).reshape(-1)
        e_ours = float(np.sum((ours.astype(np.float64) - w) ** 2))
        e_theirs = float(np.sum((theirs.astype(np.float64) - w) ** 2))
        assert e_theirs > 0 and e_ours > 0, f"{name}: a zero quantization error cannot be real"
        res[name] = (tname, w.size, e_ours, e_theirs)
    return res


@pytest.mark.parametrize("tname", TYPES)
def test_rms_error_within_llamacpp(tname, errors):
    rows = {k: v for k, v in errors.items() if v[0] == tname}
    assert rows, tname
    lines, worst = [], 0.0
    for name, (_, n, eo, et) in sorted(rows.items()):
        r = np.sqrt(eo / et)
        worst = max(worst, r)
        lines.append(f"{name}: rms ours {np.sqrt(eo / n):.4g} llama.cpp {np.sqrt(et / n):.4g} ratio {r:.4f}")
    total = np.sqrt(sum(v[2] for v in rows.values()) / sum(v[3] for v in rows.values()))
    report = "\n".join(lines) + f"\n{tname}: {len(rows)} tensors, total ratio {total:.4f}, worst {worst:.4f}"
    print(report)
    assert total <= RATIO_MAX and worst <= RATIO_MAX, report

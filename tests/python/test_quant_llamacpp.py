"""The newer weight types end to end against llama.cpp.

llama-cpp-python's llama_model_quantize turns ../shared/models/shakespeare-target.gguf
(F32) into Q4_1, Q5_0, Q5_1, Q2_K, Q3_K_M, Q5_K_M, IQ4_NL and IQ4_XS files (none of
these ftypes needs an importance matrix: llama.cpp asks for one only for the IQ1/IQ2
types and Q2_K_S). The files mix types as llama.cpp's recipes do (output.weight Q6_K;
Q2_K also Q3_K; Q3_K_M also Q4_K and Q5_K; Q5_K_M also Q6_K), so every new type runs
through inferd's reference kernels: the embedding rows, every matmul. The logits of
inferd (`inferd logits`, f32 activations) and of llama.cpp (CPU, F32 KV cache) on the
same file and prompt are compared.

Why they are not equal: llama.cpp's CPU matmuls quantize the activations to 8 bits
(Q8_0 / Q8_1 / Q8_K blocks) before the integer dot products; inferd's reference dot
keeps them f32. Measured on this model and prompt (max |diff| over all positions and
the whole vocabulary, logits of magnitude ~10-20): see BOUND. Against a wrong decoder
(a swapped nibble order, a wrong scale bit) the logits move by whole units and the
argmax changes (test_wrong_type_is_detected shows the scale of such an error).

Missing shared files or llama_cpp: skip outside CI, fail under CI=true.
"""
from __future__ import annotations

import ctypes
import os
import subprocess

import numpy as np
import pytest

import numpy_ref
from conftest import SHARED_MODELS
from requires import require_module, skip_unless_ci

FTYPES = ("Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q5_K_M", "IQ4_NL", "IQ4_XS")

# max |inferd - llama.cpp| over all logits (magnitude ~15). Measured here: Q4_1 0.113,
# Q5_0 0.110, Q5_1 0.100, Q2_K 0.173, Q3_K_M 0.187, Q5_K_M 0.200, IQ4_NL 0.100, IQ4_XS
# 0.154 -- the same size as for the types inferd had before (shakespeare-target-Q4_K_M
# 0.169, -Q4_0 0.085), and each is llama.cpp's own distance from the float64 reference
# (llama.cpp vs numpy_ref: 0.10..0.18), i.e. llama.cpp's 8-bit activations. Bound 0.3.
BOUND = 0.3
# The tighter check: inferd vs tools/numpy_ref.py (float64 over gguf's dequantized
# weights; the same stored weights, no activation rounding). Measured 0.028..0.047,
# Q3_K_M 0.085: what remains is inferd's own int8 activations for the Q4_K/Q6_K
# tensors the recipes mix in (output.weight is Q6_K in every file).
# With Q2_K / Q3_K / Q5_K / IQ4_XS on int8 activations too (their SIMD kernels, as
# llama.cpp computes them): Q2_K 0.084, Q3_K_M 0.090, Q5_K_M 0.122, IQ4_XS 0.074, and
# their distance from llama.cpp fell (Q5_K_M 0.200 -> 0.158, Q2_K 0.173 -> 0.156).
# Bound 0.18: no farther from the float64 reference than llama.cpp itself is (0.10..0.18).
NUMPY_BOUND = 0.18
# The 32-element block family (Q4_1, Q5_0, Q5_1, IQ4_NL) now runs int8-activation
# kernels on every tensor of its type, as llama.cpp does (Q8_0 / Q8_1 activations): inferd
# moved towards llama.cpp (measured 0.085..0.090, bound 0.15 instead of 0.3) and away
# from the float-activation numpy_ref by llama.cpp's own distance (measured 0.085..0.129;
# llama.cpp vs numpy_ref 0.10..0.18): bound 0.2 there.
INT8_FAMILY = {"Q4_1", "Q5_0", "Q5_1", "IQ4_NL"}
FAMILY_BOUND, FAMILY_NUMPY_BOUND = 0.15, 0.2
# Positions where llama.cpp's top-2 margin is under 2 * BOUND are near-ties whose
# argmax that activation rounding may flip; every other position must agree.
TIE = 2 * BOUND

PROMPT = b"ROMEO:\nBut soft, what light through yonder window breaks? It is the east, and Juliet is the sun."


def _llama_cpp():
    return require_module("llama_cpp", "pip install -r requirements-dev.txt (llama-cpp-python)")


@pytest.fixture(scope="module")
def source_model():
    p = SHARED_MODELS / "shakespeare-target.gguf"
    if not p.is_file():
        skip_unless_ci(f"{p} not found (the shared test models)")
    return p


@pytest.fixture(scope="module")
def quantized(source_model, tmp_path_factory):
    lc = _llama_cpp()
    d = tmp_path_factory.mktemp("quant")
    out = {}
    for name in FTYPES:
        p = lc.llama_model_quantize_default_params()
        p.ftype = getattr(lc, "LLAMA_FTYPE_MOSTLY_" + name)
        p.nthread = 2
        dst = d / f"target-{name}.gguf"
        rc = lc.llama_model_quantize(str(source_model).encode(), str(dst).encode(), ctypes.byref(p))
        assert rc == 0 and dst.is_file(), f"llama_model_quantize {name} failed ({rc})"
        out[name] = dst
    return out


def llama_logits(lc, path, ids):
    llm = lc.Llama(model_path=str(path), logits_all=True, n_ctx=256, n_batch=256, n_ubatch=256,
                   type_k=0, type_v=0, flash_attn=False, n_threads=2, verbose=False)  # 0: GGML_TYPE_F32
    try:
        llm.eval(list(ids))
        return np.array(llm.scores[:len(ids)], dtype=np.float64)
    finally:
        llm.close()


def prompt_ids(lc, path):
    llm = lc.Llama(model_path=str(path), vocab_only=True, verbose=False)
    try:
        return llm.tokenize(PROMPT, add_bos=True)
    finally:
        llm.close()


def inferd_logits(inferd_bin, path, ids, vocab):
    cmd = [str(inferd_bin), "logits", "-m", str(path), "--ids", " ".join(map(str, ids))]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"inferd logits failed ({p.returncode}): {p.stderr[-2000:]}"
    rows = [list(map(float, line.split())) for line in p.stdout.strip().splitlines()]
    out = np.array(rows, dtype=np.float64)
    assert out.shape == (len(ids), vocab), out.shape
    assert np.all(np.isfinite(out))
    return out


@pytest.mark.parametrize("name", FTYPES)
def test_logits_match_llamacpp(name, quantized, inferd_bin):
    lc = _llama_cpp()
    path = quantized[name]
    ids = prompt_ids(lc, path)
    assert len(ids) > 20
    want = llama_logits(lc, path, ids)
    got = inferd_logits(inferd_bin, path, ids, want.shape[1])
    diff = float(np.max(np.abs(got - want)))
    print(f"{name}: {len(ids)} positions, max |diff| {diff:.4g}, max |logit| {np.max(np.abs(want)):.3g}")
    bound = FAMILY_BOUND if name in INT8_FAMILY else BOUND
    assert diff <= bound, f"{name}: max |inferd - llama.cpp| = {diff:.4g} > {bound}"
    ref = numpy_ref.logits(path, ids)
    ndiff = float(np.max(np.abs(got - ref)))
    print(f"{name}: max |inferd - numpy_ref| {ndiff:.4g}")
    nbound = FAMILY_NUMPY_BOUND if name in INT8_FAMILY else NUMPY_BOUND
    assert ndiff <= nbound, f"{name}: max |inferd - numpy_ref| = {ndiff:.4g} > {nbound}"
    top2 = np.sort(want, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) >= TIE
    # this small model has many close calls (the measured flips sit at margins < 0.1);
    # at least 15 of the ~42 positions must be clear ones
    assert clear.sum() >= 15, f"{name}: only {clear.sum()} positions with a clear argmax"
    a, b = got.argmax(axis=1), want.argmax(axis=1)
    print(f"{name}: argmax equal at {(a == b).sum()} of {len(ids)} positions, checked at {clear.sum()}")
    bad = np.flatnonzero(clear & (a != b))
    assert bad.size == 0, f"{name}: argmax differs at positions {bad.tolist()} (inferd {a[bad]}, llama.cpp {b[bad]})"
    # everywhere: inferd's choice is one of llama.cpp's near-best tokens
    pick = want[np.arange(len(ids)), a]
    assert np.all(pick >= want.max(axis=1) - TIE), f"{name}: inferd picks a token llama.cpp ranks far lower"


def test_wrong_type_is_detected(quantized, inferd_bin):
    """The bounds are meaningful: two different quantizations of the same model (Q4_1
    vs Q5_1, i.e. a decoder that lost one bit of every weight) differ by far more."""
    lc = _llama_cpp()
    ids = prompt_ids(lc, quantized["Q5_1"])
    a = inferd_logits(inferd_bin, quantized["Q4_1"], ids, 1024)
    b = inferd_logits(inferd_bin, quantized["Q5_1"], ids, 1024)
    assert float(np.max(np.abs(a - b))) > 3 * BOUND

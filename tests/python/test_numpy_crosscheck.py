"""Cross-check inferd's forward pass against the independent NumPy reference.

For every case a tiny random model is written with tools/write_test_model.py,
`inferd logits -m FILE --ids "..."` prints the logits of every position (one
line per input id, the whole vocabulary as space-separated %.9g floats, ids used
verbatim, no BOS added), and tools/numpy_ref.py computes the same logits in
float64 from the same stored (dequantized) weights.

Error measure: max|inferd - numpy| / max|numpy| over all positions and vocab.

Run: pytest tests/python            (INFERD_BIN overrides build/inferd)
"""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

import numpy_ref
from conftest import SHARED_MODELS
from write_test_model import write_model

N_IDS = 10

# Bounds on max|inferd - numpy| / max|numpy|.
#
# Both sides use exactly the same weight values: numpy_ref dequantizes the
# stored F16/BF16/Q8_0/Q4_0 blocks (gguf.quants.dequantize, which matches
# ggml bit for bit), so weight quantization error is NOT part of the
# difference. What remains is arithmetic:
#
# * F32: inferd computes in float32 with float32 accumulation, numpy in
#   float64. llama.cpp vs numpy_ref on these models: <= 4e-7. Bound 1e-4.
# * F16/BF16/Q8_0/Q4_0: an engine that keeps activations in float32 lands at
#   the F32 level (~1e-6). But an engine may legitimately round the
#   *activations* to the weight's dot-product format before each matmul, as
#   ggml's CPU backend does (F16 x F16, BF16 x BF16, Q8_0/Q4_0 x Q8_0-quantized
#   activations); with these random models (flat activations, 2 layers) that
#   moves the logits measurably. llama.cpp vs numpy_ref, worst over 70 cases
#   (tools/check_numpy_ref_vs_llamacpp.py): F16 5.2e-4, BF16 4.1e-3,
#   Q8_0 1.6e-2, Q4_0 1.5e-2 (Shakespeare Q8_0/Q4_0: 6e-3). The bounds are
#   2-3x that. Real bugs in what these cases exercise (RoPE layout/scaling,
#   biases, q/k norms, GQA mapping, block decoding, tied output) give 0.1..1,
#   see the *_is_significant tests below; fine arithmetic is held to 1e-4 by
#   the F32 cases.
TOL = {
    "F32": 1e-4,
    "F16": 2e-3,
    "BF16": 1e-2,
    "Q8_0": 3e-2,
    "Q4_0": 3e-2,
}

TYPES = tuple(TOL)

# The 32-element block family (one shape per architecture, cases below): inferd's SIMD
# kernels round the activations to int8 blocks of 32 as for Q4_0 (ggml: Q8_0 / Q8_1),
# numpy_ref rounds them the same way: Q4_0's bound.
REF_ONLY_TYPES = ("Q4_1", "Q5_0", "Q5_1")
TOL.update({t: 3e-2 for t in REF_ONLY_TYPES})
ARCHES = ("llama", "qwen2", "qwen3")

# head_dim = dim / n_heads unless given. "gqa4-hd128" has n_heads*head_dim =
# 512 != dim, like Qwen3's attention; it is not used for qwen2, whose attn_q
# llama.cpp requires to be (dim, dim) (Qwen2 models always have head_dim =
# dim / n_heads).
SHAPES = {
    "gqa1-hd64": dict(dim=128, n_heads=2, n_kv_heads=2, ffn=256),
    "gqa2-hd64": dict(dim=256, n_heads=4, n_kv_heads=2, ffn=512),
    "gqa2-hd128": dict(dim=256, n_heads=2, n_kv_heads=1, ffn=384),
    "gqa4-hd64": dict(dim=256, n_heads=4, n_kv_heads=1, ffn=512),
    "gqa4-hd128": dict(dim=256, n_heads=4, n_kv_heads=1, head_dim=128, ffn=512),
}



def shapes_for(arch):
    return [s for s in SHAPES if not (arch == "qwen2" and s == "gqa4-hd128")]


# Per-architecture hyperparameters close to the real model families.
ARCH_DEFAULTS = {
    "llama": dict(rope_base=10000.0, rms_eps=1e-5),
    "qwen2": dict(rope_base=1000000.0, rms_eps=1e-6),
    "qwen3": dict(rope_base=1000000.0, rms_eps=1e-6),
}


def _opts(arch, wtype, shape, seed, **extra):
    o = dict(arch=arch, type=wtype, n_layers=2, vocab=300, ctx=256, seed=seed)
    o.update(ARCH_DEFAULTS[arch])
    o.update(SHAPES[shape])
    o.update(extra)
    return o


def _case_id(arch, wtype, shape, tag=""):
    return f"{arch}-{wtype}-{shape}" + (f"-{tag}" if tag else "")


CASES = []
for _a in ARCHES:
    for _t in TYPES:
        for _s in shapes_for(_a):
            CASES.append(pytest.param(_opts(_a, _t, _s, seed=len(CASES)), id=_case_id(_a, _t, _s)))
# RoPE scaling. Linear: theta / factor. llama3: theta_i / rope_freqs[i]; a
# small original context (32 instead of 8192) makes the scaled frequencies the
# ones that actually turn within 10 positions, so the case is sensitive.
for _a in ARCHES:
    CASES.append(pytest.param(_opts(_a, "F32", "gqa2-hd64", seed=100 + len(CASES), rope_scaling="linear",
                                    rope_factor=4.0), id=_case_id(_a, "F32", "gqa2-hd64", "linear4")))
for _t in ("F32", "Q8_0"):
    CASES.append(pytest.param(_opts("llama", _t, "gqa2-hd64", seed=100 + len(CASES), rope_scaling="llama3",
                                    rope_factor=8.0, rope_orig_ctx=32),
                              id=_case_id("llama", _t, "gqa2-hd64", "llama3")))
CASES.append(pytest.param(_opts("llama", "F32", "gqa2-hd128", seed=100 + len(CASES), rope_scaling="llama3",
                                rope_factor=8.0, rope_orig_ctx=8192, rope_base=10000.0),
                          id=_case_id("llama", "F32", "gqa2-hd128", "llama3-8k")))
# Tied embeddings: no output.weight, logits = token_embd.
for _a in ARCHES:
    for _t in ("F32", "Q8_0"):
        CASES.append(pytest.param(_opts(_a, _t, "gqa2-hd64", seed=100 + len(CASES), tied=True),
                                  id=_case_id(_a, _t, "gqa2-hd64", "tied")))
for _a in ARCHES:
    for _t in REF_ONLY_TYPES:
        CASES.append(pytest.param(_opts(_a, _t, "gqa2-hd64", seed=100 + len(CASES)),
                                  id=_case_id(_a, _t, "gqa2-hd64")))


def _ids(seed, vocab=300, n=N_IDS):
    rng = np.random.default_rng(seed)
    # BOS, then a mix of byte tokens and filler pieces (ids 3..vocab-1).
    return [1] + [int(t) for t in rng.integers(3, vocab, size=n - 1)]


def run_inferd_logits(inferd_bin, model_path, ids, vocab, timeout=120) -> np.ndarray:
    """Run `inferd logits`, check the output's layout, return (len(ids), vocab) floats."""
    cmd = [str(inferd_bin), "logits", "-m", str(model_path), "--ids", " ".join(str(t) for t in ids)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {p.returncode}\nstderr:\n{p.stderr[-4000:]}")
    rows = [ln.split() for ln in p.stdout.splitlines() if ln.strip()]
    assert len(rows) == len(ids), f"expected {len(ids)} lines (one per id), got {len(rows)}"
    for i, r in enumerate(rows):
        assert len(r) == vocab, f"line {i}: expected {vocab} logits, got {len(r)}"
    try:
        out = np.array([[float(v) for v in r] for r in rows], dtype=np.float64)
    except ValueError as e:
        pytest.fail(f"unparsable inferd logits output ({e}); first line: {p.stdout[:200]!r}")
    assert np.all(np.isfinite(out)), "inferd printed non-finite logits"
    return out


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@pytest.mark.parametrize("opts", CASES)
def test_logits_match_numpy(opts, inferd_bin, work_dir):
    path = work_dir / "model.gguf"
    write_model(path, **opts)
    ids = _ids(opts["seed"], opts["vocab"])

    ref = numpy_ref.Model(path).forward(ids)
    got = run_inferd_logits(inferd_bin, path, ids, opts["vocab"])

    err = rel_err(got, ref)
    per_pos = [rel_err(got[i], ref[i]) for i in range(len(ids))]
    tol = TOL[opts["type"]]
    if err > tol:
        emu = numpy_ref.Model(path, emulate_ggml_activations=True).forward(ids)
        pytest.fail(f"max rel err {err:.3g} > {tol:g} (vs numpy with ggml-style activation rounding: "
                    f"{rel_err(got, emu):.3g}); per position: " + " ".join(f"{e:.2g}" for e in per_pos))


# --------------------------------------------------------------------------
# The cases above only catch bugs if the features they exercise change the
# logits by much more than the tolerances. These checks (numpy only) make sure
# they do.


# A feature is "significant" when getting it wrong moves the logits by more
# than 100x the F32 bound; every feature has an F32 case. (Most also exceed the
# quantized bounds: measured 0.07..1.)
SIGNIFICANT = 100 * TOL["F32"]


def _numpy_logits(path, ids, **override):
    m = numpy_ref.Model(path)
    for k, v in override.items():
        setattr(m, k, v)
    return m.forward(ids)


@pytest.mark.parametrize("arch", ARCHES)
def test_rope_layout_is_significant(arch, work_dir):
    path = work_dir / "m.gguf"
    o = _opts(arch, "F32", "gqa2-hd64", seed=7)
    write_model(path, **o)
    ids = _ids(7)
    a = _numpy_logits(path, ids)
    b = _numpy_logits(path, ids, neox=not numpy_ref.Model(path).neox)
    assert rel_err(b, a) > SIGNIFICANT


@pytest.mark.parametrize("scaling,extra", [
    ("linear", dict(rope_factor=4.0)),
    ("llama3", dict(rope_factor=8.0, rope_orig_ctx=32)),
])
def test_rope_scaling_is_significant(scaling, extra, work_dir):
    o = _opts("llama", "F32", "gqa2-hd64", seed=11)
    write_model(work_dir / "plain.gguf", **o)
    write_model(work_dir / "scaled.gguf", **dict(o, rope_scaling=scaling, **extra))
    ids = _ids(11)
    a = _numpy_logits(work_dir / "plain.gguf", ids)
    b = _numpy_logits(work_dir / "scaled.gguf", ids)
    assert rel_err(b, a) > SIGNIFICANT


def test_arch_specific_tensors_are_significant(work_dir):
    ids = _ids(3)
    # qwen2 biases
    write_model(work_dir / "q2.gguf", **_opts("qwen2", "F32", "gqa2-hd64", seed=3))
    m = numpy_ref.Model(work_dir / "q2.gguf")
    a = m.forward(ids)
    for i in range(m.n_layers):
        for t in ("q", "k", "v"):
            m.w[f"blk.{i}.attn_{t}.bias"] = np.zeros_like(m.w[f"blk.{i}.attn_{t}.bias"])
    assert rel_err(m.forward(ids), a) > SIGNIFICANT
    # qwen3 q/k norms
    write_model(work_dir / "q3.gguf", **_opts("qwen3", "F32", "gqa4-hd128", seed=3))
    m = numpy_ref.Model(work_dir / "q3.gguf")
    a = m.forward(ids)
    for i in range(m.n_layers):
        for t in ("q", "k"):
            del m.w[f"blk.{i}.attn_{t}_norm.weight"]
    assert rel_err(m.forward(ids), a) > SIGNIFICANT


def test_gqa_mapping_is_significant(work_dir):
    """Head h must use KV head h // (n_heads / n_kv_heads), not h % n_kv_heads."""
    write_model(work_dir / "m.gguf", **_opts("llama", "F32", "gqa4-hd128", seed=5, n_kv_heads=2))
    m = numpy_ref.Model(work_dir / "m.gguf")
    ids = _ids(5)
    a = m.forward(ids)
    m.expand_kv = lambda x, g: np.concatenate([x] * g, axis=1)  # the wrong h % n_kv mapping
    b = m.forward(ids)
    assert rel_err(b, a) > SIGNIFICANT


# --------------------------------------------------------------------------
# The trained Shakespeare fixtures (../shared/models). reference-greedy.tsv holds
# llama.cpp's greedy continuations (every step a clear argmax). numpy_ref must
# reproduce them, which checks numpy_ref itself against llama.cpp on real
# weights; then inferd is checked against numpy_ref on the same sequences.

# BOS + SentencePiece ids of each prompt in shakespeare1k.spm.model (the
# dummy-prefix "\u2581" included), as sentencepiece and llama.cpp tokenize it.
# Keys are the prompts as written in the TSV (C escapes).
PROMPT_IDS = {
    "ROMEO:": [1, 870, 983],
    "First Citizen:\\nBefore we proceed": [1, 679, 339, 946, 983, 13, 1002, 961, 558, 340, 589, 315, 321],
    "To be, or not to be": [1, 418, 309, 975, 536, 328, 291, 309],
    "KING RICHARD III:\\nNow is the winter": [1, 525, 644, 959, 983, 13, 992, 302, 332, 269, 265, 266, 426],
    "The quality of mercy is not": [1, 367, 561, 378, 594, 304, 264, 276, 978, 974, 332, 328],
    "O": [1, 352],
}


def _reference_rows():
    path = SHARED_MODELS / "reference-greedy.tsv"
    if not path.is_file():
        return [pytest.param(None, None, None, id="missing-reference-greedy.tsv")]
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f):
            if not line.strip():
                continue
            model, prompt, ids = line.rstrip("\n").split("\t")
            rows.append(pytest.param(model, prompt, [int(t) for t in ids.split()],
                                     id=f"{model.removesuffix('.gguf')}-{n}"))
    return rows


@pytest.mark.parametrize("model,prompt,expected", _reference_rows())
def test_numpy_ref_reproduces_llamacpp_greedy(model, prompt, expected, shared_models):
    if model is None:
        pytest.fail(f"{shared_models / 'reference-greedy.tsv'} not found")
    assert prompt in PROMPT_IDS, f"no prompt ids for {prompt!r}; add them to PROMPT_IDS"
    m = _shakespeare_model(shared_models / model)
    prompt_ids = PROMPT_IDS[prompt]
    seq = prompt_ids + expected
    # Teacher forcing: if the argmax after every prefix is the next reference
    # id, greedy decoding from the prompt yields exactly the reference ids.
    got = m.forward(seq[:-1])[len(prompt_ids) - 1:].argmax(axis=1)
    first_bad = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), None)
    assert first_bad is None, (f"greedy diverges at step {first_bad}: numpy {int(got[first_bad])}, "
                               f"llama.cpp {expected[first_bad]}")


_models: dict = {}


def _shakespeare_model(path):
    if path not in _models:
        _models[path] = numpy_ref.Model(path)
    return _models[path]


@pytest.mark.parametrize("model,wtype", [
    ("shakespeare-target.gguf", "F32"),
    ("shakespeare-target-Q8_0.gguf", "Q8_0"),
    ("shakespeare-target-Q4_0.gguf", "Q4_0"),
    ("shakespeare-draft.gguf", "F32"),
])
def test_shakespeare_logits_match_numpy(model, wtype, inferd_bin, shared_models):
    """Trained weights (llama.cpp-quantized for Q8_0/Q4_0), 50 positions."""
    path = shared_models / model
    seq = PROMPT_IDS["ROMEO:"] + [13, 988, 260, 968, 975, 275, 399, 328, 309, 261, 271, 366, 299, 261, 271,
                                  963, 300, 975, 13, 988, 963, 574, 261, 271, 366, 299, 1007, 966, 260, 288,
                                  303, 975, 301, 275, 989, 277, 328, 13, 988, 260, 267, 989, 966, 269, 271,
                                  963, 966]
    ref = _shakespeare_model(path).forward(seq)
    got = run_inferd_logits(inferd_bin, path, seq, ref.shape[1])
    err = rel_err(got, ref)
    assert err <= TOL[wtype], f"max rel err {err:.3g} > {TOL[wtype]:g}"

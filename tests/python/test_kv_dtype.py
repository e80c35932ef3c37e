"""KV cache dtypes (--kv-cache-dtype) on the CPU backend (and the CUDA one under emulation): their perplexity cost and their
capacity gain.

- perplexity of ../shared/models/shakespeare-valid.txt (`inferd perplexity --ctx 256`) at
  f32, f16, bf16, int8 and fp8: int8 and fp8 within +1% of f16 (the issue's bound), f16
  within 0.1% of f32 (f16 rounding is 2^-11 relative: it should be invisible here);
- the startup log's KV line: bytes per token of each dtype from the model's shape
  (4 layers x K and V x 2 KV heads x head_dim 64: f32 4 bytes an element, f16 / bf16 2,
  fp8 1, int8 1 plus an f32 scale per 64) and the tokens that fit in 1 GiB;
- greedy ids of every reference prompt (../shared/models/reference-greedy.tsv, llama.cpp's
  ids with an f32 cache) unchanged for the first 16 tokens at int8 and fp8 (and all of
  them at the default, f16, which test_reference_greedy checks in full);
- logits against the NumPy float64 reference within one rounding step of each format;
- the CUDA backend's kernels under the SIMT emulation (where this build has it): the same
  logits bound for every dtype, auto = bf16 there;
- the error of an unknown dtype.

Run: pytest -s tests/python/test_kv_dtype.py   (-s prints the dtype table)
"""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

DTYPES = ["f32", "f16", "bf16", "int8", "fp8"]
PPL_RE = re.compile(r"^ppl ([0-9.]+) \+/- ([0-9.]+)$", re.M)
# shakespeare-target: 4 layers, 2 KV heads, head_dim 64
ROW_BYTES = {"f32": 256, "f16": 128, "bf16": 128, "int8": 64 + 4, "fp8": 64}
TOKEN_BYTES = {d: 2 * 4 * 2 * r for d, r in ROW_BYTES.items()}


def kv_line(stderr: str) -> dict:
    for line in stderr.splitlines():
        if line.startswith("{") and '"kv cache"' in line:
            return json.loads(line)
    raise AssertionError(f"no 'kv cache' log line in:\n{stderr[-2000:]}")


@pytest.fixture(scope="module")
def ppl_runs(inferd_bin: Path, shared_models: Path) -> dict[str, tuple[float, float, dict]]:
    out = {}
    for d in DTYPES:
        p = subprocess.run([str(inferd_bin), "perplexity", "-m", str(shared_models / "shakespeare-target.gguf"),
                            "-f", str(shared_models / "shakespeare-valid.txt"), "--ctx", "256",
                            "--kv-cache-dtype", d], capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-2000:]
        m = PPL_RE.findall(p.stdout)
        assert m, p.stdout
        out[d] = (float(m[-1][0]), float(m[-1][1]), kv_line(p.stderr))
    print("\n| KV dtype | PPL | bytes / token | tokens in 1 GiB |")
    print("|---|---|---|---|")
    for d in DTYPES:
        ppl, err, kv = out[d]
        print(f"| {d} | {ppl:.4f} ± {err:.4f} | {kv['kv_bytes_per_token']} | {kv['kv_tokens_per_gib']} |")
    return out


def test_perplexity_cost(ppl_runs) -> None:
    f16 = ppl_runs["f16"][0]
    f32 = ppl_runs["f32"][0]
    assert abs(f16 - f32) <= 1e-3 * f32, (f16, f32)
    assert abs(ppl_runs["bf16"][0] - f32) <= 5e-3 * f32, ppl_runs["bf16"][0]
    for d in ("int8", "fp8"):
        assert ppl_runs[d][0] <= 1.01 * f16, (d, ppl_runs[d][0], f16)
        assert ppl_runs[d][0] >= 0.99 * f16, (d, ppl_runs[d][0], f16)  # a broken cache is not "better"


def test_capacity(ppl_runs) -> None:
    for d in DTYPES:
        kv = ppl_runs[d][2]
        assert kv["kv_cache_dtype"] == d
        assert kv["kv_bytes_per_token"] == TOKEN_BYTES[d], (d, kv)
        assert kv["kv_tokens_per_gib"] == (1 << 30) // TOKEN_BYTES[d], (d, kv)
        assert kv["kv_tokens"] == kv["kv_blocks"] * kv["kv_block_size"]
    per_gib = {d: ppl_runs[d][2]["kv_tokens_per_gib"] for d in DTYPES}
    assert per_gib["f16"] == 2 * per_gib["f32"] and per_gib["bf16"] == per_gib["f16"]
    assert per_gib["fp8"] == 4 * per_gib["f32"]
    assert per_gib["int8"] >= 3.7 * per_gib["f32"]


def test_capacity_of_a_budget(inferd_bin: Path, shared_models: Path) -> None:
    """A fixed --kv-cache-memory holds 2x (f16) / ~4x (int8, fp8) the blocks of f32."""
    blocks = {}
    for d in DTYPES:
        p = subprocess.run([str(inferd_bin), "generate", "-m", str(shared_models / "shakespeare-target.gguf"),
                            "-p", "ROMEO:", "-n", "1", "--temp", "0", "--ids", "--kv-cache-memory", "1M",
                            "--kv-cache-dtype", d], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        kv = kv_line(p.stderr)
        assert kv["kv_budget_bytes"] == 1 << 20
        blocks[d] = kv["kv_blocks"]
        assert blocks[d] == (1 << 20) // (16 * TOKEN_BYTES[d]), (d, kv)
    assert blocks["f16"] == 2 * blocks["f32"] and blocks["fp8"] == 4 * blocks["f32"]
    assert blocks["int8"] >= 3.7 * blocks["f32"]


def reference_rows(shared_models: Path) -> list[tuple[str, str, list[str]]]:
    tsv = shared_models / "reference-greedy.tsv"
    assert tsv.is_file(), tsv
    rows = []
    for line in tsv.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        file, prompt, ids = line.split("\t")
        prompt = re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), prompt)
        rows.append((file, prompt, ids.split()))
    assert len(rows) >= 10
    return rows


@pytest.mark.parametrize("dtype", ["int8", "fp8"])
def test_greedy_first_16(inferd_bin: Path, shared_models: Path, dtype: str) -> None:
    bad = []
    for file, prompt, ids in reference_rows(shared_models):
        n = min(16, len(ids))
        p = subprocess.run([str(inferd_bin), "generate", "-m", str(shared_models / file), "-p", prompt,
                            "-n", str(n), "--temp", "0", "--ids", "--kv-cache-dtype", dtype,
                            "--device", "cpu"], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        got = p.stdout.split()
        if got != ids[:n]:
            bad.append(f"{file} {prompt!r}: want {' '.join(ids[:n])} got {' '.join(got)}")
    assert not bad, "\n".join(bad)


# Logits against the float64 NumPy reference (tools/numpy_ref.py, which keeps K and V
# exact) with the cache in each dtype: max|inferd - numpy| / max|numpy| is bounded by one
# rounding step of the format, relative (f16 2^-11, bf16 2^-8, int8 1/127 of the row's
# amax, fp8 E4M3 2^-4): attention averages the elements' errors, it does not add them up.
# (Measured on this model: f16 2.5e-4, bf16 1.4e-3, int8 3.8e-3, fp8 2.0e-2; f32 8e-7,
# held to test_numpy_crosscheck's 1e-4.) Bugs in the conversions or the kernels'
# reading of a dtype move the logits by 0.1 .. 1 (test_numpy_crosscheck's *_is_significant).
KV_LOGITS_TOL = {"f32": 1e-4, "f16": 2.0 ** -11, "bf16": 2.0 ** -8, "int8": 1 / 127, "fp8": 2.0 ** -4}
SEQ = [1, 870, 983, 13, 988, 260, 968, 975, 275, 399, 328, 309, 261, 271, 366, 299, 261, 271, 963, 300,
       975, 13, 988, 963, 574, 261, 271, 366, 299, 1007, 966, 260, 288, 303, 975, 301, 275, 989, 277,
       328, 13, 988, 260, 267, 989, 966, 269, 271, 963, 966]


@pytest.fixture(scope="module")
def numpy_logits(shared_models: Path):
    np = pytest.importorskip("numpy")
    import numpy_ref  # tools/, on sys.path through conftest.py

    return np, numpy_ref.Model(shared_models / "shakespeare-target.gguf").forward(SEQ)


@pytest.mark.parametrize("dtype", DTYPES)
def test_logits_vs_numpy(inferd_bin: Path, shared_models: Path, numpy_logits, dtype: str) -> None:
    np, ref = numpy_logits
    p = subprocess.run([str(inferd_bin), "logits", "-m", str(shared_models / "shakespeare-target.gguf"),
                        "--ids", " ".join(map(str, SEQ)), "--kv-cache-dtype", dtype],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    got = np.array([[float(v) for v in ln.split()] for ln in p.stdout.splitlines() if ln.strip()])
    assert got.shape == ref.shape
    err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
    assert err <= KV_LOGITS_TOL[dtype], f"kv {dtype}: max rel err {err:.3g} > {KV_LOGITS_TOL[dtype]:g}"
    if dtype != "f32":  # the cache really is rounded: not the f32 figures
        assert err > 1e-6, f"kv {dtype}: logits as exact as f32's ({err:.3g})"


def test_errors(inferd_bin: Path, shared_models: Path) -> None:
    model = str(shared_models / "shakespeare-target.gguf")
    p = subprocess.run([str(inferd_bin), "generate", "-m", model, "-p", "x", "-n", "1",
                        "--kv-cache-dtype", "f64"], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "kv-cache-dtype" in p.stderr, p.stderr


def _emu_or_skip(p) -> None:
    if "not built" in p.stderr or "no CUDA backend" in p.stderr:
        from requires import skip_unless_ci
        skip_unless_ci(f"this build has no SIMT emulation backend: {p.stderr.strip()[-300:]}")


# The CUDA backend's kernels (k_rope_store_kv, k_attention_kv) under the SIMT emulation:
# the same logits bound against the float64 reference as the CPU's, per dtype; auto is
# bf16 there (the startup log says so), and each dtype's pool has the CPU's bytes per token.
@pytest.mark.parametrize("dtype", ["auto"] + DTYPES)
def test_emu_logits_vs_numpy(inferd_bin: Path, shared_models: Path, numpy_logits, dtype: str) -> None:
    np, ref = numpy_logits
    p = subprocess.run([str(inferd_bin), "logits", "-m", str(shared_models / "shakespeare-target.gguf"),
                        "--ids", " ".join(map(str, SEQ)), "--kv-cache-dtype", dtype, "--device", "emu"],
                       capture_output=True, text=True, timeout=600)
    _emu_or_skip(p)
    assert p.returncode == 0, p.stderr[-2000:]
    kv = kv_line(p.stderr)
    d = "bf16" if dtype == "auto" else dtype
    assert kv["kv_cache_dtype"] == d and kv["kv_bytes_per_token"] == TOKEN_BYTES[d], kv
    got = np.array([[float(v) for v in ln.split()] for ln in p.stdout.splitlines() if ln.strip()])
    assert got.shape == ref.shape
    err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
    assert err <= KV_LOGITS_TOL[d], f"emu kv {d}: max rel err {err:.3g} > {KV_LOGITS_TOL[d]:g}"
    if d != "f32":
        assert err > 1e-6, f"emu kv {d}: logits as exact as f32's ({err:.3g})"

"""Calibrated INT4 (AWQ, --calibration) and the per-layer sensitivity report (--report).

On ../shared/models/shakespeare-target.gguf (F32). The calibration text is the first
half of shakespeare-valid.txt (there is no other held-out text). Perplexity is measured
here on the second half alone, which the calibration never saw (the whole file, as the
issue's table has it, is bench/quant_ppl.sh's).
- calibrated INT4-g128 has a lower perplexity than plain round-to-nearest INT4-g128 on
  the unseen half;
- a file quantized offline with --calibration gives the perplexity of --calibration on
  load to the last digit (the same code makes the same bytes);
- --report prints every linear matrix once with its error, sorted, ranks the layers and
  ends with a suggestion that meets the budget it states;
- bad uses: clear errors and exit codes.
"""
from __future__ import annotations

import re
import subprocess

import pytest

from conftest import SHARED_MODELS
from requires import skip_unless_ci

MODEL = SHARED_MODELS / "shakespeare-target.gguf"
VALID = SHARED_MODELS / "shakespeare-valid.txt"
N_LAYERS = 4
LINEAR = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


@pytest.fixture(scope="module", autouse=True)
def shared_files():
    for p in (MODEL, VALID):
        if not p.is_file():
            skip_unless_ci(f"{p} not found (the shared test models)")


@pytest.fixture(scope="module")
def halves(tmp_path_factory):
    d = tmp_path_factory.mktemp("awq")
    text = VALID.read_bytes()
    cut = text.index(b"\n\n", len(text) // 2) + 2  # at a speech boundary
    calib, unseen = d / "calib.txt", d / "unseen.txt"
    calib.write_bytes(text[:cut])
    unseen.write_bytes(text[cut:])
    return calib, unseen


def run(inferd_bin, *args, timeout=900):
    return subprocess.run([str(inferd_bin), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def perplexity(inferd_bin, model, text, *extra):
    p = run(inferd_bin, "perplexity", "-m", model, "-f", text, "--ctx", 256, *extra, timeout=1800)
    assert p.returncode == 0, p.stderr[-2000:]
    m = re.search(r"^ppl ([0-9.]+) \+/- ([0-9.]+)$", p.stdout, re.M)
    assert m, p.stdout
    return m.group(1)


def test_calibrated_int4_beats_plain(inferd_bin, halves):
    """On the half the calibration never saw (the whole file: bench/quant_ppl.sh)."""
    calib, text = halves
    which = "unseen"
    f32 = float(perplexity(inferd_bin, MODEL, text))
    plain = float(perplexity(inferd_bin, MODEL, text, "--quantize", "int4"))
    awq = float(perplexity(inferd_bin, MODEL, text, "--quantize", "int4", "--calibration", calib))
    print(f"{which}: F32 {f32:.4f}, INT4-g128 {plain:.4f} ({100 * (plain / f32 - 1):+.2f}%), "
          f"calibrated {awq:.4f} ({100 * (awq / f32 - 1):+.2f}%)")
    assert awq < plain
    assert f32 < awq < f32 * 1.02


def test_offline_equals_on_load(inferd_bin, halves, tmp_path):
    calib, _ = halves
    out = tmp_path / "awq.gguf"
    p = run(inferd_bin, "quantize", MODEL, out, "--type", "int4", "--calibration", calib)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "calibration:" in p.stderr and "layer inputs scaled (AWQ)" in p.stderr
    assert b"inferd.quantization.awq_calibration" in out.read_bytes()[:1 << 20]
    on_load = perplexity(inferd_bin, MODEL, calib, "--quantize", "int4", "--calibration", calib)
    offline = perplexity(inferd_bin, out, calib)
    assert offline == on_load


def test_report(inferd_bin, halves, tmp_path):
    calib, _ = halves
    out = tmp_path / "r.gguf"
    p = run(inferd_bin, "quantize", MODEL, out, "--type", "int4", "--calibration", calib, "--report",
            "--ppl-budget", "0.3")
    assert p.returncode == 0, p.stderr[-2000:]
    assert out.is_file()  # the file is still written
    rows = re.findall(r"^(\d+)\s+(\d+)\s+(\w+)\s+([0-9.]+)\s+([0-9.]+)$", p.stdout, re.M)
    assert len(rows) == N_LAYERS * len(LINEAR), p.stdout
    assert sorted((int(r[1]), r[2]) for r in rows) == sorted((l, m) for l in range(N_LAYERS) for m in LINEAR)
    errs = [float(r[3]) for r in rows]
    assert errs == sorted(errs, reverse=True) and 0.005 < errs[-1] <= errs[0] < 0.5
    assert [int(r[0]) for r in rows] == list(range(1, len(rows) + 1))
    rank = re.search(r"^# layers by their worst matrix: ([\d ]+)$", p.stdout, re.M)
    assert rank and sorted(map(int, rank.group(1).split())) == list(range(N_LAYERS))
    # the worst matrix's layer ranks first
    assert int(rank.group(1).split()[0]) == int(rows[0][1])
    base = re.search(r"original ([0-9.]+), budget \+0\.30% = ([0-9.]+)", p.stdout)
    assert base and abs(float(base.group(2)) - float(base.group(1)) * 1.003) < 1e-3
    sugg = re.search(r"^suggested: (?:--quantize-keep-layers ([\d,]+)|no --quantize-keep-layers needed) "
                     r"\(ppl \+?(-?[0-9.]+)% <= \+0\.30%\)$", p.stdout, re.M)
    assert sugg, p.stdout
    assert float(sugg.group(2)) <= 0.30
    # every perplexity it tried is printed; the suggestion is one of them
    tried = re.findall(r"^keep (\d+) layers(?: \(([\d,]+)\))?: ppl ([0-9.]+) \(([+-][0-9.]+)%\)$", p.stdout, re.M)
    assert tried and tried[0][0] == "0"
    kept = sugg.group(1) or ""
    assert any(t[1] == kept for t in tried) or (not kept and float(tried[0][3]) <= 0.30)


def test_bad_uses(inferd_bin, halves, tmp_path):
    calib, _ = halves
    p = run(inferd_bin, "quantize", MODEL, tmp_path / "x.gguf", "--type", "int4", "--report")
    assert p.returncode == 2 and "--report needs --calibration" in p.stderr
    p = run(inferd_bin, "quantize", MODEL, tmp_path / "x.gguf", "--type", "int4", "--calibration",
            tmp_path / "missing.txt")
    assert p.returncode == 1 and "--calibration" in p.stderr and "missing.txt" in p.stderr
    assert not (tmp_path / "x.gguf").exists()
    p = run(inferd_bin, "perplexity", "-m", MODEL, "-f", VALID, "--calibration", calib)
    assert p.returncode != 0 and "--calibration needs --quantize" in p.stderr
    short = tmp_path / "short.txt"
    short.write_text("ROMEO:")
    p = run(inferd_bin, "perplexity", "-m", MODEL, "-f", VALID, "--quantize", "int4", "--calibration", short)
    assert p.returncode != 0 and "too short" in p.stderr
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    p = run(inferd_bin, "perplexity", "-m", MODEL, "-f", VALID, "--quantize", "int4", "--calibration", empty)
    assert p.returncode != 0 and "calibration" in p.stderr
    # invalid UTF-8 and control bytes are text like any other: it calibrates
    junk = tmp_path / "junk.txt"
    junk.write_bytes(bytes(range(256)) * 40)
    p = run(inferd_bin, "perplexity", "-m", MODEL, "-f", VALID, "--quantize", "int4", "--calibration", junk)
    assert p.returncode == 0, p.stderr[-2000:]

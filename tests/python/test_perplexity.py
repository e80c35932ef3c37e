"""`inferd perplexity` against llama.cpp's llama-perplexity.

The reference figures are parsed from the table in ../shared/models/README.md (made by
llama.cpp's `llama-perplexity -c 256`, F32 KV cache): a missing file or table fails the
test. inferd runs the same method (windows of --ctx tokens, BOS first, second half
scored) through the engine's prompt logprobs; PPL must agree within 0.5% relative and
the error term within 5%. Also: the error cases llama.cpp refuses, the running
per-window figures, batch invariance (one window at a time gives the same figure),
and --kl-base (KL divergence and top-1 agreement against a base model).

Run: pytest tests/python/test_perplexity.py   (INFERD_BIN overrides build/inferd)
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

FILES = ["shakespeare-target.gguf", "shakespeare-target-Q8_0.gguf", "shakespeare-target-Q4_0.gguf",
         "shakespeare-target-Q4_K_M.gguf"]
PPL_RE = re.compile(r"^ppl ([0-9.]+) \+/- ([0-9.]+)$", re.M)


def llamacpp_table(shared_models: Path) -> dict[str, tuple[float, float]]:
    readme = shared_models / "README.md"
    assert readme.is_file(), f"{readme} missing"
    rows = {}
    for line in readme.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\|\s*`?([\w.-]+\.gguf)`?[^|]*\|\s*([0-9.]+)\s*±\s*([0-9.]+)\s*\|\s*$", line)
        if m:
            rows[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    assert rows, f"no perplexity table in {readme}"
    return rows


def run(inferd_bin: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(inferd_bin), "perplexity", *args], capture_output=True, text=True,
                          timeout=timeout)


def ppl_of(p: subprocess.CompletedProcess) -> tuple[float, float]:
    assert p.returncode == 0, p.stderr
    m = PPL_RE.findall(p.stdout)
    assert m, p.stdout
    return float(m[-1][0]), float(m[-1][1])


@pytest.fixture(scope="module")
def table(shared_models: Path) -> dict[str, tuple[float, float]]:
    t = llamacpp_table(shared_models)
    for f in FILES:
        assert f in t, f"{f} missing from the README's perplexity table"
    return t


@pytest.mark.parametrize("name", FILES)
def test_matches_llamacpp(inferd_bin: Path, shared_models: Path, table, name: str) -> None:
    model = shared_models / name
    text = shared_models / "shakespeare-valid.txt"
    assert model.is_file() and text.is_file()
    p = run(inferd_bin, "-m", str(model), "-f", str(text), "--ctx", "256")
    ppl, err = ppl_of(p)
    ref_ppl, ref_err = table[name]
    assert abs(ppl - ref_ppl) / ref_ppl < 0.005, (name, ppl, ref_ppl)
    assert abs(err - ref_err) / ref_err < 0.05, (name, err, ref_err)
    # the running figure per window ("[1]x,[2]y,..."): one per window, the last is the final PPL
    prog = re.findall(r"\[(\d+)\]([0-9.]+),", p.stderr)
    assert prog and [int(i) for i, _ in prog] == list(range(1, len(prog) + 1))
    assert abs(float(prog[-1][1]) - ppl) < 1e-3
    head = re.search(r"(\d+) tokens, (\d+) windows of 256", p.stderr)
    assert head, p.stderr
    assert len(prog) == int(head.group(2)) == int(head.group(1)) // 256  # every window reported


def test_one_window_at_a_time_gives_the_same_figure(inferd_bin: Path, shared_models: Path) -> None:
    model, text = shared_models / "shakespeare-target-Q4_0.gguf", shared_models / "shakespeare-valid.txt"
    batched = run(inferd_bin, "-m", str(model), "-f", str(text), "--ctx", "256")
    single = run(inferd_bin, "-m", str(model), "-f", str(text), "--ctx", "256", "--max-num-seqs", "1",
                 "--max-num-batched-tokens", "100")
    assert PPL_RE.findall(batched.stdout) == PPL_RE.findall(single.stdout) != []


def test_kl_base(inferd_bin: Path, shared_models: Path, table) -> None:
    text = shared_models / "shakespeare-valid.txt"
    f32, q4 = shared_models / "shakespeare-target.gguf", shared_models / "shakespeare-target-Q4_0.gguf"
    draft = shared_models / "shakespeare-draft.gguf"

    def kl(model: Path, base: Path) -> tuple[float, float, float]:
        p = run(inferd_bin, "-m", str(model), "--kl-base", str(base), "-f", str(text), "--ctx", "256")
        assert p.returncode == 0, p.stderr
        k = re.search(r"^kl (-?[0-9.]+)$", p.stdout, re.M)
        t = re.search(r"^top1 ([0-9.]+)$", p.stdout, re.M)
        assert k and t, p.stdout
        return float(k.group(1)), float(t.group(1)), ppl_of(p)[0]

    k_self, t_self, ppl_self = kl(f32, f32)
    assert abs(k_self) < 1e-5 and t_self == 1.0
    k_q4, t_q4, ppl_q4 = kl(q4, f32)
    k_draft, t_draft, _ = kl(draft, f32)
    # a 4-bit copy is close to its base, another model is far from it
    assert 1e-4 < k_q4 < 0.05 and 0.8 < t_q4 < 1.0
    assert k_draft > 10 * k_q4 and t_draft < t_q4
    # the base run leaves this model's perplexity alone
    assert abs(ppl_self - table["shakespeare-target.gguf"][0]) / ppl_self < 0.005
    assert abs(ppl_q4 - table["shakespeare-target-Q4_0.gguf"][0]) / ppl_q4 < 0.005


@pytest.mark.parametrize("case", ["missing", "empty", "short", "ctx_too_big", "ctx_too_small"])
def test_errors(inferd_bin: Path, shared_models: Path, tmp_path: Path, case: str) -> None:
    model = shared_models / "shakespeare-target.gguf"
    text = shared_models / "shakespeare-valid.txt"
    args = ["-m", str(model), "--ctx", "256"]
    if case == "missing":
        args += ["-f", str(tmp_path / "nonexistent.txt")]
        want = "cannot read"
    elif case == "empty":
        (tmp_path / "e.txt").write_bytes(b"")
        args += ["-f", str(tmp_path / "e.txt")]
        want = "empty"
    elif case == "short":
        # about 230 tokens: fewer than 2 * 256
        (tmp_path / "s.txt").write_bytes(text.read_bytes()[:500])
        args += ["-f", str(tmp_path / "s.txt")]
        want = "needs at least 512"
    elif case == "ctx_too_big":
        args += ["-f", str(text), "--ctx", "257"]
        want = "larger than the model's context (256)"
    else:
        args += ["-f", str(text), "--ctx", "3"]
        want = "at least 4"
    p = run(inferd_bin, *args)
    assert p.returncode != 0
    assert want in p.stderr, p.stderr
    assert not PPL_RE.search(p.stdout)


def test_default_ctx_is_capped_at_the_model_context(inferd_bin: Path, shared_models: Path, table) -> None:
    # no --ctx: 512 capped at the model's 256, so the same figure as --ctx 256
    p = run(inferd_bin, "-m", str(shared_models / "shakespeare-target.gguf"), "-f",
            str(shared_models / "shakespeare-valid.txt"))
    ppl, _ = ppl_of(p)
    assert "windows of 256" in p.stderr
    assert abs(ppl - table["shakespeare-target.gguf"][0]) / ppl < 0.005


def test_method_and_kl_against_numpy(inferd_bin: Path, shared_models: Path, tmp_path: Path) -> None:
    """The whole method recomputed here from `inferd tokenize` and `inferd logits` rows
    (independent of the prompt-logprob path and the logits tap): windows of 16 tokens,
    BOS first, positions 8..14 scored, llama.cpp's error formula, KL(base || this)."""
    import numpy as np
    ctx = 16
    text = tmp_path / "t.txt"
    text.write_bytes((shared_models / "shakespeare-valid.txt").read_bytes()[1000:1300])
    # a different model as "this": KL(base || this) and KL(this || base) then differ clearly
    this, base = shared_models / "shakespeare-draft.gguf", shared_models / "shakespeare-target.gguf"
    tok = subprocess.run([str(inferd_bin), "tokenize", "-m", str(this), "--bos", "-f", str(text)],
                         capture_output=True, text=True, timeout=60)
    assert tok.returncode == 0, tok.stderr
    ids = [int(t) for t in tok.stdout.split()]
    assert ids[0] == 1 and len(ids) >= 2 * ctx

    def logits(model: Path, window: list[int]):
        p = subprocess.run([str(inferd_bin), "logits", "-m", str(model), "--ids", " ".join(map(str, window))],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        rows = np.array([[float(x) for x in line.split()] for line in p.stdout.splitlines()], dtype=np.float64)
        assert rows.shape[0] == len(window)
        return rows - rows.max(axis=1, keepdims=True) - np.log(
            np.exp(rows - rows.max(axis=1, keepdims=True)).sum(axis=1, keepdims=True))

    first = ctx // 2
    nlls, kls, same = [], [], []
    for w in range(len(ids) // ctx):
        window = ids[w * ctx:(w + 1) * ctx]
        window[0] = 1  # BOS replaces the window's first token
        lt, lb = logits(this, window), logits(base, window)
        for j in range(first, ctx - 1):
            nlls.append(-lt[j, ids[w * ctx + j + 1]])
            pb = np.exp(lb[j])
            kls.append(float((pb * (lb[j] - lt[j])).sum()))
            same.append(int(lb[j].argmax() == lt[j].argmax()))
    nll = np.array(nlls)
    ppl = float(np.exp(nll.mean()))
    err = float(np.sqrt((np.mean(nll * nll) - nll.mean() ** 2) / (len(nll) - 1)) * ppl)

    p = run(inferd_bin, "-m", str(this), "--kl-base", str(base), "-f", str(text), "--ctx", str(ctx))
    got_ppl, got_err = ppl_of(p)
    assert f"{len(ids) // ctx} windows of {ctx}" in p.stderr
    assert abs(got_ppl - ppl) / ppl < 1e-3, (got_ppl, ppl)
    assert abs(got_err - err) / err < 1e-2, (got_err, err)
    kl = float(re.search(r"^kl (-?[0-9.]+)$", p.stdout, re.M).group(1))
    top1 = float(re.search(r"^top1 ([0-9.]+)$", p.stdout, re.M).group(1))
    assert abs(kl - float(np.mean(kls))) < 1e-5 + 1e-3 * float(np.mean(kls)), (kl, np.mean(kls))
    assert abs(top1 - float(np.mean(same))) < 1e-3, (top1, np.mean(same))

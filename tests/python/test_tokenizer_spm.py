"""The SPM tokenizer against SentencePiece itself.

shared/models/shakespeare-target.gguf carries the vocabulary of
shared/models/shakespeare1k.spm.model (SentencePiece BPE, 1,024 pieces, byte fallback,
identity normalization). `inferd tokenize -m GGUF -f FILE...` must give exactly the ids of
sentencepiece's encode() on random strings: slices of Shakespeare, random words, runs of
whitespace, digits, punctuation, and characters from many scripts (which exercise the
byte fallback). llama.cpp's SPM algorithm agrees with SentencePiece on this vocabulary;
where the two could differ, llama.cpp is the reference (tests/unit/test_tokenizer.c).

Needs the PyPI package `sentencepiece` (CI installs it); a missing package fails the
test rather than skipping it.

Run: pytest tests/python/test_tokenizer_spm.py     (INFERD_BIN overrides build/inferd)
"""
from __future__ import annotations

import random
import subprocess

import pytest

N_STRINGS = 400
SEED = 20261129

PIECES = [" ", "  ", "\t", "\n", "\n\n", " \n", "\r\n", ",", ".", "!", "?", "'", "'s", ":", ";", "-", "--",
          "0", "7", "42", "1999", "O", "I", "thou", "thee", "ROMEO", "JULIET", "lord", "the", "and", "to",
          "é", "ß", "Ä", "ñ", "ø", "ω", "Ж", "я", "中", "文", "日本", "한", "🦙", "😀", "✅", "€", "½",
          "\u0301", "\u00a0", "\u3000", "\u200d", "ﬁ", "Ⅻ", "\x00", "\x07", "▁", "<s>", "</s>", "<unk>"]


def random_text(rng: random.Random, corpus: str) -> str:
    kind = rng.random()
    if kind < 0.35:  # a slice of Shakespeare
        a = rng.randrange(0, len(corpus) - 200)
        return corpus[a:a + rng.randrange(1, 200)]
    if kind < 0.55:  # random code points from assorted blocks
        blocks = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x4E00, 0x4E80),
                  (0x3040, 0x30FF), (0xAC00, 0xAC80), (0x1F300, 0x1F64F), (0x2000, 0x206F)]
        out = []
        for _ in range(rng.randrange(1, 40)):
            lo, hi = rng.choice(blocks)
            out.append(chr(rng.randint(lo, hi)))
        return "".join(out)
    # pieces glued together
    return "".join(rng.choice(PIECES) for _ in range(rng.randrange(1, 30)))


@pytest.fixture(scope="module")
def sp_model(shared_models):
    try:
        import sentencepiece
    except ImportError:
        pytest.fail("the PyPI package 'sentencepiece' is required: pip install sentencepiece")
    return sentencepiece.SentencePieceProcessor(model_file=str(shared_models / "shakespeare1k.spm.model"))


def inferd_tokenize(inferd_bin, gguf, text: str, tmp_path, *extra) -> list[int]:
    p = tmp_path / "text.txt"
    p.write_bytes(text.encode("utf-8"))
    r = subprocess.run([str(inferd_bin), "tokenize", "-m", str(gguf), *extra, "-f", str(p)],
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return [int(x) for x in r.stdout.split()]


def test_spm_matches_sentencepiece(inferd_bin, shared_models, sp_model, tmp_path):
    gguf = shared_models / "shakespeare-target.gguf"
    corpus = (shared_models / "shakespeare-valid.txt").read_text(encoding="utf-8")
    rng = random.Random(SEED)
    texts = ["", "ROMEO:", " leading", "trailing ", "a  b", "\n", "First Citizen:\nBefore we proceed."]
    texts += [random_text(rng, corpus) for _ in range(N_STRINGS)]
    paths = []
    for i, text in enumerate(texts):
        paths.append(tmp_path / f"text{i:04d}.txt")
        paths[-1].write_bytes(text.encode("utf-8"))
    args = [str(inferd_bin), "tokenize", "-m", str(gguf)] + [a for p in paths for a in ("-f", str(p))]
    r = subprocess.run(args, capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    lines = r.stdout.decode().split("\n")
    assert len(lines) == len(texts) + 1 and lines[-1] == ""
    mismatches = []
    for text, line in zip(texts, lines):
        want = sp_model.encode(text)
        got = [int(x) for x in line.split()]
        if got != want:
            mismatches.append((text, want, got))
    for text, want, got in mismatches[:10]:
        print(f"input {text!r}\n  sentencepiece {want}\n  inferd        {got}")
    assert not mismatches, f"{len(mismatches)} of {len(texts)} strings differ"


def test_bos_flag(inferd_bin, shared_models, sp_model, tmp_path):
    gguf = shared_models / "shakespeare-target.gguf"
    text = "ROMEO:\nIs the day so young?"
    assert inferd_tokenize(inferd_bin, gguf, text, tmp_path, "--bos") == [1] + sp_model.encode(text)
    # control tokens are text unless --special
    plain = inferd_tokenize(inferd_bin, gguf, "<s>x", tmp_path)
    assert 1 not in plain
    assert inferd_tokenize(inferd_bin, gguf, "<s>x", tmp_path, "--special")[0] == 1


def test_cli_errors(inferd_bin, shared_models, tmp_path):
    gguf = shared_models / "shakespeare-target.gguf"
    for args in (["-m", str(tmp_path / "missing.gguf"), "x"], ["-m", str(gguf)], ["x"],
                 ["-m", str(gguf), "-f", str(tmp_path / "missing.txt")], ["-m", str(gguf), "--nope", "x"]):
        r = subprocess.run([str(inferd_bin), "tokenize", *args], capture_output=True, timeout=60)
        assert r.returncode == 1, args
        assert r.stdout == b""
        assert len(r.stderr.decode().strip().splitlines()) == 1, r.stderr


def test_cli_several_files(inferd_bin, shared_models, sp_model, tmp_path):
    gguf = shared_models / "shakespeare-target.gguf"
    texts = ["ROMEO:\n", "", "  two  spaces", "last line without newline"]
    args = [str(inferd_bin), "tokenize", "-m", str(gguf)]
    for i, text in enumerate(texts):
        p = tmp_path / f"t{i}.txt"
        p.write_bytes(text.encode())
        args += ["-f", str(p)]
    r = subprocess.run(args, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().split("\n")
    assert lines[-1] == "" and len(lines) == len(texts) + 1
    for text, line in zip(texts, lines):
        assert [int(x) for x in line.split()] == sp_model.encode(text)
    # TEXT and -f do not mix
    r = subprocess.run(args + ["extra"], capture_output=True, timeout=60)
    assert r.returncode == 1 and r.stdout == b""

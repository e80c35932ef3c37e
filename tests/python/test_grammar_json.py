"""JSON Schema constrained decoding without a model: `inferd grammar --sample` draws
texts from a schema's grammar over the Shakespeare vocabulary (random allowed tokens),
and every text must parse and validate with the Python `jsonschema` package (the
schema's own draft, formats checked). The corpus (tests/data/json_schema/, README.md
there): a subset of the official JSON-Schema-Test-Suite (its invalid instances must
also be rejected by the grammar) and inferd's own schemas (nesting, $ref, anyOf,
enums, string bounds, pydantic-style). At least 10,000 generations in all. Schemas in
unsupported.json must be refused with an error naming the keyword.
"""
from __future__ import annotations

import json
import subprocess
import zlib
from pathlib import Path

import pytest

jsonschema = pytest.importorskip("jsonschema")
from jsonschema.validators import validator_for  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "json_schema"
SUITE_SAMPLES = 80  # per accepted test-suite case (133 of them)
OWN_SAMPLES = 250   # per own schema (32)
MIN_TOTAL = 10_000


def suite_cases() -> list[tuple[str, dict]]:
    out = []
    for f in sorted((DATA / "suite").glob("*.json")):
        for i, case in enumerate(json.loads(f.read_text())):
            out.append((f"{f.stem}/{i}", case))
    return out


SUITE = suite_cases()
REFUSED = json.loads((DATA / "suite_refused.json").read_text())
OWN = sorted((DATA / "own").glob("*.json"))
UNSUPPORTED = json.loads((DATA / "unsupported.json").read_text())


@pytest.fixture(scope="module")
def vocab(shared_models) -> Path:
    p = shared_models / "shakespeare-target.gguf"
    if not p.is_file():
        pytest.fail(f"{p} not found")
    return p


def run(inferd_bin: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(inferd_bin), "grammar", *args], capture_output=True, text=True, timeout=120)


def compact(v) -> str:
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def sample_and_validate(inferd_bin: Path, vocab: Path, schema_file: Path, schema, n: int, name: str,
                        max_tokens: int = 512) -> int:
    """n generations, each parsed and validated; returns how many."""
    seed = zlib.crc32(name.encode())
    r = run(inferd_bin, "--json-schema", str(schema_file), "-m", str(vocab), "--sample", str(n),
            "--seed", str(seed), "--max-tokens", str(max_tokens))
    assert r.returncode == 0, f"{name}: {r.stderr}"
    cls = validator_for(schema)
    cls.check_schema(schema)
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    lines = r.stdout.split("\n")[:-1]  # not splitlines(): a JSON string may hold U+2028 or U+0085
    assert len(lines) == n, f"{name}: {len(lines)} of {n} samples ({r.stderr})"
    for line in lines:
        text = json.loads(line)
        value = json.loads(text)  # a generated text is always JSON
        errors = list(validator.iter_errors(value))
        assert not errors, f"{name}: {text!r} is invalid: {errors[0].message}"
    return len(lines)


def test_corpus_size():
    accepted = sum(1 for name, _ in SUITE if name not in REFUSED)
    total = accepted * SUITE_SAMPLES + len(OWN) * OWN_SAMPLES
    assert total >= MIN_TOTAL, f"only {total} generations planned"
    assert len(OWN) >= 30 and accepted >= 100


@pytest.mark.parametrize("name,case", SUITE, ids=[n for n, _ in SUITE])
def test_suite_case(name, case, inferd_bin, vocab, tmp_path):
    f = tmp_path / "schema.json"
    f.write_text(json.dumps(case["schema"]))
    if name in REFUSED:
        r = run(inferd_bin, "--json-schema", str(f), "--check")
        assert r.returncode == 1 and REFUSED[name] in r.stderr, f"{name}: {r.stdout} {r.stderr}"
        return
    # the suite's instances, compactly written: an invalid one is never a sentence
    tests = case["tests"]
    lines = tmp_path / "instances.txt"
    lines.write_text("".join(json.dumps(compact(t["data"])) + "\n" for t in tests))
    r = run(inferd_bin, "--json-schema", str(f), "--check", "--match", str(lines))
    assert r.returncode == 0, f"{name}: {r.stderr}"
    verdicts = r.stdout.split()
    assert verdicts[0] == "ok" and len(verdicts) == len(tests) + 1
    for t, v in zip(tests, verdicts[1:]):
        assert not (v == "true" and not t["valid"]), f"{name}: accepts invalid {compact(t['data'])} ({t['description']})"
    sample_and_validate(inferd_bin, vocab, f, case["schema"], SUITE_SAMPLES, name, max_tokens=256)


@pytest.mark.parametrize("path", OWN, ids=[p.stem for p in OWN])
def test_own_schema(path, inferd_bin, vocab):
    schema = json.loads(path.read_text())
    sample_and_validate(inferd_bin, vocab, path, schema, OWN_SAMPLES, path.stem)


@pytest.mark.parametrize("i", range(len(UNSUPPORTED)))
def test_unsupported(i, inferd_bin, tmp_path):
    case = UNSUPPORTED[i]
    f = tmp_path / "schema.json"
    f.write_text(case["schema_text"] if "schema_text" in case else json.dumps(case["schema"]))
    r = run(inferd_bin, "--json-schema", str(f), "--check")
    assert r.returncode == 1 and r.stdout == "", r.stdout
    for want in case["error"]:
        assert want in r.stderr, f"{f.read_text()}: '{r.stderr.strip()}' lacks {want!r}"


def test_json_object(inferd_bin, vocab):
    """--json-object: any JSON object, bounded whitespace."""
    r = run(inferd_bin, "--json-object", "-m", str(vocab), "--sample", "200", "--seed", "5", "--max-tokens", "256")
    assert r.returncode == 0, r.stderr
    texts = [json.loads(line) for line in r.stdout.split("\n")[:-1]]
    assert len(texts) == 200
    for t in texts:
        assert isinstance(json.loads(t), dict), t
        assert t == t.strip()

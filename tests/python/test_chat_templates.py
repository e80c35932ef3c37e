"""Render every shared chat template with every manifest conversation through
`inferd chat-template` and compare with the Python jinja2 renderings byte for byte.

Layout: the repository root is two levels above this file; the shared data lives in
../shared relative to it. The binary is build/inferd unless INFERD_BIN names another.
A missing template, expected file or binary fails the test (never skips).
"""
import json
import os
import pathlib
import subprocess

import pytest
from requires import require_module

REPO = pathlib.Path(__file__).resolve().parents[2]
SHARED = (REPO / ".." / "shared").resolve()
TEMPLATES = SHARED / "templates"
EXPECTED = TEMPLATES / "expected"
MANIFEST = EXPECTED / "manifest.json"
# The expected files were rendered with strftime_now fixed at this local time.
FIXED_NOW = "2026-11-29 12:00:00"


def _binary():
    b = os.environ.get("INFERD_BIN")
    return pathlib.Path(b) if b else REPO / "build" / "inferd"


def _load_manifest():
    if not MANIFEST.is_file():
        raise FileNotFoundError(f"missing manifest: {MANIFEST}")
    with open(MANIFEST, encoding="utf-8") as f:
        return json.load(f)


def _params():
    m = _load_manifest()
    out = []
    for tname, tinfo in m["templates"].items():
        for cname, cinfo in tinfo["cases"].items():
            out.append(pytest.param(tname, cname, id=f"{tname}:{cname}"))
    return out


def test_every_template_is_in_manifest():
    m = _load_manifest()
    on_disk = sorted(p.stem for p in TEMPLATES.glob("*.jinja"))
    assert on_disk, f"no templates in {TEMPLATES}"
    assert sorted(m["templates"]) == on_disk


@pytest.mark.parametrize("tname,cname", _params())
def test_render(tname, cname, tmp_path):
    m = _load_manifest()
    tinfo = m["templates"][tname]
    case = dict(m["cases"][cname])
    case["bos_token"] = tinfo["bos_token"]
    case["eos_token"] = tinfo["eos_token"]
    template = TEMPLATES / f"{tname}.jinja"
    assert template.is_file(), f"missing template {template}"
    binary = _binary()
    assert binary.is_file(), f"missing binary {binary} (build it, or set INFERD_BIN)"

    case_file = tmp_path / "case.json"
    case_file.write_text(json.dumps(case, ensure_ascii=False), encoding="utf-8")
    proc = subprocess.run(
        [str(binary), "chat-template", "-t", str(template), "-i", str(case_file), "--now", FIXED_NOW],
        capture_output=True,
        timeout=60,
    )
    want = tinfo["cases"][cname]
    if "expected" in want:
        exp_file = EXPECTED / want["expected"]
        assert exp_file.is_file(), f"missing expected file {exp_file}"
        expected = exp_file.read_bytes()
        assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr.decode(errors='replace')}"
        assert proc.stdout == expected
    else:
        assert "error" in want, f"manifest entry for {tname}:{cname} has neither expected nor error"
        assert proc.returncode == 1, (
            f"expected failure, got exit {proc.returncode}; stdout={proc.stdout[:200]!r} "
            f"stderr={proc.stderr.decode(errors='replace')}"
        )
        assert want["error"] in proc.stderr.decode("utf-8", errors="replace")


# ---- cross-check: the C unit test's expectations are what jinja2 renders ----------------

C_TEST = REPO / "tests" / "unit" / "test_chat_template.c"


def _c_literal(text, i):
    """Decode adjacent C string literals starting at text[i]; returns (bytes, end)."""
    out = bytearray()
    while True:
        while text[i] in " \t\n":
            i += 1
        if text[i] != '"':
            return bytes(out), i
        i += 1
        while text[i] != '"':
            c = text[i]
            if c == "\\":
                e = text[i + 1]
                if e == "x":
                    out.append(int(text[i + 2 : i + 4], 16))
                    i += 4
                    continue
                out += {"n": b"\n", "t": b"\t", "r": b"\r", '"': b'"', "\\": b"\\"}[e]
                i += 2
                continue
            out += c.encode("utf-8")
            i += 1
        i += 1


def _c_table_cases():
    if not C_TEST.is_file():
        raise FileNotFoundError(f"missing {C_TEST}")
    text = C_TEST.read_text(encoding="utf-8")
    cases = []
    pos = 0
    while True:
        m = text.find("    CASE(", pos), text.find("    ERR(", pos)
        starts = [p for p in m if p >= 0]
        if not starts:
            break
        p = min(starts)
        kind = "ERR" if text.startswith("    ERR(", p) else "CASE"
        i = text.index("(", p) + 1
        args = []
        for k in range(4):
            while text[i] in " \t\n":
                i += 1
            if text.startswith("NULL", i):
                args.append(None)
                i += 4
            else:
                val, i = _c_literal(text, i)
                args.append(val.decode("utf-8"))
            while text[i] in " \t\n":
                i += 1
            assert text[i] == ("," if k < 3 else ")"), f"unexpected {text[i:i + 20]!r}"
            i += 1
        cases.append((kind, *args))
        pos = i
    return cases


def _jinja_env():
    import datetime

    jinja2 = require_module("jinja2", "pip install -r requirements-dev.txt (jinja2)")
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime(2026, 11, 29, 12, 0, 0).strftime(fmt)
    return env


def test_c_table_has_cases():
    assert len(_c_table_cases()) >= 60


@pytest.mark.parametrize("kind,name,tmpl,ctx,want", [pytest.param(*c, id=c[1]) for c in _c_table_cases()])
def test_c_table_matches_jinja2(kind, name, tmpl, ctx, want):
    env = _jinja_env()
    variables = json.loads(ctx) if ctx else {}
    if kind == "CASE":
        assert env.from_string(tmpl).render(**variables) == want
    else:
        with pytest.raises(Exception) as info:
            env.from_string(tmpl).render(**variables)
        assert str(info.value) == want

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

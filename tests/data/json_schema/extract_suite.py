#!/usr/bin/env python3
"""extract_suite.py SUITE_DIR OUT_DIR — take the JSON-Schema-Test-Suite cases this
corpus uses (see README.md): from the Draft 2020-12 files of the keywords inferd's
JSON Schema front end supports, every case whose schema uses only supported keywords
(checked recursively through subschemas). Writes OUT_DIR/<file>.json in the suite's own
format (a list of {description, schema, tests}), unchanged apart from the cases left out.
Run once by hand; the output is committed.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

FILES = [
    "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
    "enum", "const", "anyOf", "oneOf", "allOf", "ref", "minLength", "maxLength", "pattern", "minimum",
    "maximum", "exclusiveMinimum", "exclusiveMaximum", "boolean_schema", "default",
    "optional/format/date", "optional/format/time", "optional/format/date-time", "optional/format/uuid",
    "optional/format/email", "optional/format/ipv4",
]
SUPPORTED = {
    "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
    "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions", "minLength", "maxLength",
    "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "title", "description",
    "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly", "writeOnly",
}


def supported(s, root=True) -> bool:
    if isinstance(s, bool):
        return True
    if not isinstance(s, dict):
        return False
    for k, v in s.items():
        if k not in SUPPORTED:
            return False
        if k == "$id" and not root:
            return False
        if k == "$ref" and not (isinstance(v, str) and v.startswith("#")):
            return False
        if k in ("properties", "$defs", "definitions") and isinstance(v, dict):
            if not all(supported(x, False) for x in v.values()):
                return False
        if k in ("items", "additionalProperties") and not supported(v, False):
            return False
        if k in ("prefixItems", "anyOf", "oneOf", "allOf") and isinstance(v, list):
            if not all(supported(x, False) for x in v):
                return False
    return True


def main() -> int:
    suite, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    for f in FILES:
        cases = json.loads((suite / "tests" / "draft2020-12" / f"{f}.json").read_text())
        keep = [c for c in cases if supported(c["schema"])]
        name = f.replace("optional/format/", "format-")
        (out / f"{name}.json").write_text(json.dumps(keep, indent=2, ensure_ascii=False) + "\n")
        print(f"{name}: {len(keep)} of {len(cases)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())

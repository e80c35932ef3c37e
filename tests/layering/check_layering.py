#!/usr/bin/env python3
"""check_layering.py SOURCE_DIR — the good tree follows DESIGN.md's arrows.

The arrows are read from src/util/layering.h (the IFD_MAY_USE_* table the compile-time
guard uses), so there is one table. Checks, for the tree as it is:
  1. every `#include "..."` in src/ that resolves to a file of another room is allowed
     for the including file's room (util and include/inferd.h are open to all);
  2. every header of a room (src/<room>/**.h) includes util/layer/<room>.h, so the
     compile-time guard covers it;
  3. each room library in CMakeLists.txt links only ifd_<room> targets its arrows allow
     (the server also links the engine, which it reaches through include/inferd.h).
Prints each violation and exits 1 when there is one.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOMS = ["UTIL", "MODEL", "TOKENIZER", "TEMPLATE", "GRAMMAR", "BACKEND", "ENGINE", "KVX", "SERVER", "CLI"]
# backend/cpu/ and backend/cuda/ headers: a room of their own for includes (layering.h)
KERNEL_DIRS = {("backend", "cpu"), ("backend", "cuda")}


def arrows(layering_h: str) -> dict[str, set[str]]:
    """{room: rooms whose headers it may include}, from layering.h's #if chain."""
    allowed: dict[str, set[str]] = {}
    room = None
    for line in layering_h.splitlines():
        m = re.match(r"#(?:el)?if defined\(IFD_ROOM_([A-Z]+)\)", line)
        if m:
            room = m.group(1)
            allowed[room] = {room, "UTIL"}
            continue
        if line.startswith("#else"):
            room = None
            continue
        m = re.match(r"#define IFD_MAY_USE_([A-Z_]+) ([01])", line)
        if m and room and m.group(2) == "1":
            allowed[room].add(m.group(1))
    allowed["CLI"] = set(ROOMS) | {"KERNELS", "ENGINE_MODEL"}  # the #else branch: cli and main.c use everything
    return allowed


def header_room(path: Path, src: Path) -> str | None:
    """The room a header belongs to for includes: KERNELS under backend/cpu|cuda/."""
    rel = path.relative_to(src)
    if tuple(rel.parts[:2]) in KERNEL_DIRS:
        return "KERNELS"
    if rel.parts == ("engine", "engine_model.h"):
        return "ENGINE_MODEL"  # the engine's one door to its model (layering.h)
    return room_of(path, src)


def room_of(path: Path, src: Path) -> str | None:
    rel = path.relative_to(src)
    if len(rel.parts) == 1:
        return "CLI" if rel.name == "main.c" else None
    r = rel.parts[0].upper()
    return r if r in ROOMS else None


def main() -> int:
    root = Path(sys.argv[1]).resolve()
    src = root / "src"
    allowed = arrows((src / "util" / "layering.h").read_text())
    missing = [r for r in ROOMS if r not in allowed]
    if missing:
        print(f"layering.h has no arrows for {missing}")
        return 1
    bad: list[str] = []
    n_includes = 0
    for f in sorted(src.rglob("*.[ch]")):
        room = room_of(f, src)
        if room is None:
            bad.append(f"{f.relative_to(root)}: not in any room")
            continue
        text = f.read_text(errors="replace")
        for m in re.finditer(r'^\s*#\s*include\s+"([^"]+)"', text, re.M):
            inc = m.group(1)
            cands = [f.parent / inc, src / inc, root / "include" / inc]
            target = next((c.resolve() for c in cands if c.is_file()), None)
            if target is None:
                bad.append(f"{f.relative_to(root)}: #include \"{inc}\" not found in the tree")
                continue
            n_includes += 1
            if not target.is_relative_to(src):
                continue  # include/inferd.h: the public API, open to every room
            troom = header_room(target, src)
            if troom is None or troom == "UTIL" or troom == room:
                continue
            if troom not in allowed[room]:
                bad.append(f"{f.relative_to(root)}: the {room.lower()} room includes "
                           f"{target.relative_to(root)} ({troom.lower()}), which its arrows forbid")
        if f.suffix == ".h" and room not in ("UTIL",) and f.name != "main.c":
            guard = f"util/layer/{header_room(f, src).lower()}.h"
            if not re.search(r'#\s*include\s+"(\.\./)*' + re.escape(guard) + '"', text):
                bad.append(f"{f.relative_to(root)}: a {header_room(f, src).lower()} header without #include \"{guard}\"")

    cml = (root / "CMakeLists.txt").read_text()
    n_links = 0
    for m in re.finditer(r"target_link_libraries\(ifd_([a-z]+)\s+PUBLIC([^)]*)\)", cml):
        room = m.group(1).upper()
        if room not in allowed:
            continue
        link_ok = set(allowed[room]) | ({"ENGINE"} if room == "SERVER" else set())
        for dep in re.findall(r"\bifd_([a-z]+)\b", m.group(2)):
            d = dep.upper()
            if d not in ROOMS:
                continue  # ifd_cjson, ifd_uv: third-party
            n_links += 1
            if d not in link_ok:
                bad.append(f"CMakeLists.txt: ifd_{m.group(1)} links ifd_{dep}, which its arrows forbid")
    if n_includes < 100 or n_links < 10:
        bad.append(f"checked only {n_includes} includes and {n_links} room links: the scan is broken")
    for b in bad:
        print(b)
    print(f"layering: {n_includes} includes, {n_links} room links checked, {len(bad)} violations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""check_ptxas.py SOURCE_DIR [ARCH ...] — every CUDA source compiles warning-free for each
architecture (default sm_80, sm_86, sm_89, sm_90), and every kernel stays within its
register and spill budget (tests/cuda/ptxas_budgets.txt), read from `nvcc -Xptxas -v`.

Budget lines: `REGEX MAX_REGISTERS MAX_SPILL_BYTES` matched (re.search) against the
demangled kernel name; the first matching line wins; `*` is the default. Prints one line
per kernel and architecture, and exits 1 on a warning, an error or a budget overrun."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def budgets(path: Path) -> list[tuple[re.Pattern[str] | None, int, int]]:
    out = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        rx, regs, spill = line.rsplit(None, 2)  # the regex may hold spaces ("k_mm<2, 4, 8>")
        out.append((None if rx == "*" else re.compile(rx), int(regs), int(spill)))
    return out


def demangle(names: list[str]) -> list[str]:
    cf = shutil.which("c++filt")
    if not cf or not names:
        return names
    r = subprocess.run([cf], input="\n".join(names), capture_output=True, text=True)
    got = r.stdout.splitlines()
    return got if len(got) == len(names) else names


def short_name(name: str) -> str:
    """The demangled name without its parameter list (the last balanced "(...)") and
    without "(anonymous namespace)::"."""
    name = name.replace("(anonymous namespace)::", "")
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                return name[:i]
    return name


def compile_one(nvcc: str, src: Path, root: Path, arch: str) -> tuple[int, str]:
    cmd = [nvcc, "-std=c++17", f"-arch=sm_{arch}", "-Xptxas", "-v", "-Werror", "all-warnings",
           "-Xcompiler", "-Wall,-Wextra,-Werror", "-I", str(root / "src"), "-I", str(root / "kernels"),
           "-DIFD_ROOM_BACKEND=1", "-c", str(src), "-o", os.devnull]
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def main() -> int:
    root = Path(sys.argv[1]).resolve()
    archs = sys.argv[2:] or ["80", "86", "89", "90"]
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        print("check_ptxas: nvcc not found")
        return 77
    table = budgets(root / "tests/cuda/ptxas_budgets.txt")
    srcs = sorted((root / "kernels").glob("*.cu")) + sorted((root / "src/backend/cuda").glob("*.cu"))
    jobs = [(s, a) for s in srcs for a in archs]
    bad = 0
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        results = list(ex.map(lambda j: (j, compile_one(nvcc, j[0], root, j[1])), jobs))
    for (src, arch), (rc, text) in results:
        rel = src.relative_to(root)
        warn = [l for l in text.splitlines() if re.search(r"warning|error", l, re.I)]
        if rc != 0 or warn:
            bad += 1
            print(f"FAIL {rel} sm_{arch}: nvcc exit {rc}")
            for l in (warn or text.splitlines())[:20]:
                print("    " + l)
            continue
        # ptxas reports per entry: "Compiling entry function 'X' for 'sm_NN'", then the
        # spill line, then "Used N registers"
        entries, cur = [], None
        for l in text.splitlines():
            m = re.search(r"Compiling entry function '([^']+)'", l)
            if m:
                cur = {"name": m.group(1), "regs": 0, "spill": 0}
                entries.append(cur)
                continue
            if cur is None:
                continue
            m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", l)
            if m:
                cur["spill"] = max(int(m.group(1)), int(m.group(2)))
            m = re.search(r"Used (\d+) registers", l)
            if m:
                cur["regs"] = int(m.group(1))
        names = demangle([e["name"] for e in entries])
        for e, name in zip(entries, names):
            lim = next(((r, s) for rx, r, s in table if rx is None or rx.search(name)), (255, 0))
            ok = e["regs"] <= lim[0] and e["spill"] <= lim[1]
            bad += not ok
            short = short_name(name)
            print(f"{'ok  ' if ok else 'FAIL'} sm_{arch} {short}: {e['regs']} registers (<= {lim[0]}), "
                  f"{e['spill']} bytes spilled (<= {lim[1]})")
    print(f"check_ptxas: {len(jobs)} compilations, {bad} failures")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""spec_model.py - speculative decoding at batch 1, judged two ways: the measured tok/s
and TPOT of `inferd bench`, and a *modeled* decode speed-up that a noisy machine cannot
move much: the run's own choices (bench's k histogram) priced under one fixed table of
target forward costs, against plain decoding priced the same way.

  modeled = decoded tokens * cost(1) / (plain_steps * cost(1) + sum_k hist[k] * cost(1 + k))

where decoded tokens = output tokens - requests (each request's first token comes from
its prefill), plain_steps = engine steps - verifications - requests (at batch 1 each
prompt below the step budget is one prefill step), and cost(n) is linear between the
table's sizes. The table is --costs, or else the one the run measured at start (its log
line "target forward ms 1:.. 2:.."); pass one table to compare runs. The draft model's
rounds are not priced: for the n-gram proposer this is the whole cost; with a draft
model the figure is an upper bound, and a second one, with_draft, adds the draft's
measured time (bench's "draft time (ms)": its rounds and catch-ups) to the modeled
target time: part model, part measurement, so noisier. Where the scheduler runs a
prefill in the same step as the previous answer's last decode (the steps of 4 answers of 16 tokens on the
Shakespeare pair: 63, not 64), plain decoding itself scores a little over 1 (1.017x
there, ~1.004x at 4 answers of 128): the same bias in every mode of one prompt set.

usage: bench/spec_model.py BUILD TARGET.gguf PROMPT_FILE [--runs N] [--requests N]
           [--tokens N] [--costs "1:39.77,2:40.91,5:57.29,10:79.40"] [-- BENCH ARGS...]
Prints one line per run; BENCH ARGS go to `inferd bench` (e.g. --speculative-ngram).
"""
import argparse
import json
import re
import subprocess
import sys


def cost_fn(table):
    ks = sorted(table)

    def c(n):
        if n <= ks[0]:
            return table[ks[0]] * n / ks[0]
        for a, b in zip(ks, ks[1:]):
            if n <= b:
                return table[a] + (table[b] - table[a]) * (n - a) / (b - a)
        a, b = ks[-2], ks[-1]
        return table[b] + max(0.0, (table[b] - table[a]) / (b - a)) * (n - b)
    return c


def parse_costs(s):
    t = {}
    for item in s.replace(",", " ").split():
        n, ms = item.split(":")
        t[float(n)] = float(ms)
    if len(t) < 2 or 1.0 not in t:
        raise ValueError("a cost table needs size 1 and at least one more size")
    return t


def one_run(a, extra):
    cmd = [f"{a.build}/inferd", "bench", "-m", a.target, "-t", str(a.threads), "--prompt-file", a.prompt_file,
           "--num-requests", str(a.requests), "--max-num-seqs", "1", "--output-len-range", str(a.tokens), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"spec_model: inferd bench failed ({r.returncode}): {r.stderr[-2000:]}")
    lines = r.stdout.splitlines()
    js = json.loads([l for l in lines if l.startswith("{")][-1])
    rows = {l[:28].strip(): l[28:].split() for l in lines if len(l) > 28 and not l.startswith("{")}
    steps = int(rows["engine steps"][0])
    hist = [int(x) for x in rows.get("k histogram (0..K)", ["0"])]
    table = parse_costs(a.costs) if a.costs else None
    if table is None:
        m = re.search(r"target forward ms ([0-9.: ]+)", r.stderr)
        table = parse_costs(m.group(1)) if m else None
    if table is None:  # no speculation: nothing but plain steps
        table = {1.0: 1.0, 2.0: 1.0}
    c = cost_fn(table)
    ver = sum(hist[1:])
    plain = steps - ver - a.requests
    decoded = js["output_tokens"] - a.requests
    if plain < 0 or decoded <= 0:
        sys.exit(f"spec_model: the steps do not add up ({steps} steps, {ver} verifications, "
                 f"{js['output_tokens']} tokens of {a.requests} requests)")
    spent = plain * c(1) + sum(hist[k] * c(1 + k) for k in range(1, len(hist)))
    modeled = decoded * c(1) / spent if spent > 0 else 0.0
    draft_ms = float(rows["draft time (ms)"][0]) if "draft time (ms)" in rows else None
    with_draft = decoded * c(1) / (spent + draft_ms) if draft_ms is not None and spent + draft_ms > 0 else None
    return js, ver, hist, modeled, draft_ms, with_draft


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("build")
    p.add_argument("target")
    p.add_argument("prompt_file")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--requests", type=int, default=4)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--costs", default="")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    a = p.parse_args(argv[:cut])
    extra = argv[cut + 1:]
    for _ in range(a.runs):
        js, ver, hist, modeled, draft_ms, with_draft = one_run(a, extra)
        tail = "" if draft_ms is None else f" draft_ms {draft_ms:.1f} with_draft {with_draft:.3f}x"
        print(f"tok/s {js['output_tok_per_s']:.2f} tpot_p50 {js['tpot_ms_p50']:.2f} "
              f"acceptance {js.get('spec_acceptance', 0)} verifications {ver} "
              f"k_hist {' '.join(map(str, hist))} modeled {modeled:.3f}x{tail}", flush=True)


if __name__ == "__main__":
    main()

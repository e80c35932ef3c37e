#!/usr/bin/env python3
"""Serving benchmark for any OpenAI-compatible server (inferd, llama.cpp's server,
vLLM): N streaming requests, C at a time; reports output tokens/s, time to first token
and inter-token latency (p50/p99), as a table and a final JSON line.

  python3 bench/serving_bench.py --base-url http://127.0.0.1:8000/v1 --model NAME \
      --num-requests 64 --concurrency 16 --max-tokens 128 --prompt-len 64

Standard library only. Tokens are counted from the server's usage (stream_options.
include_usage) when it sends one, else one per content chunk. TTFT is measured to the
first chunk carrying text; inter-token latency is the gap between text chunks divided
by the tokens they carry when that is known (one per chunk otherwise)."""
from __future__ import annotations

import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

WORDS = ("the king of love and death shall rise upon the morrow with a heavy heart "
         "and all the lords of france attend him in his chamber of the night").split()


def make_prompt(n_words: int, rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(max(1, n_words)))


def pct(v: list[float], p: float) -> float:
    if not v:
        return float("nan")
    v = sorted(v)
    k = (len(v) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


class Result:
    def __init__(self):
        self.ok = False
        self.error = ""
        self.ttft = None
        self.itl: list[float] = []
        self.tokens = 0
        self.latency = 0.0


def one_request(args, prompt: str, headers: dict) -> Result:
    res = Result()
    u = urlparse(args.base_url)
    conn_cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    path = u.path.rstrip("/") + ("/chat/completions" if args.endpoint == "chat" else "/completions")
    body = {"model": args.model, "max_tokens": args.max_tokens, "stream": True,
            "stream_options": {"include_usage": True}, "temperature": args.temperature}
    if args.ignore_eos:
        body["ignore_eos"] = True
    if args.ban_token:
        # servers that ignore ignore_eos (llama-cpp-python) still honour logit_bias
        body["logit_bias"] = {str(t): -100 for t in args.ban_token}
    if args.extra_body:
        body.update(args.extra_body)
    if args.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    t0 = time.perf_counter()
    c = conn_cls(u.hostname, u.port or (443 if u.scheme == "https" else 80), timeout=args.timeout)
    try:
        c.request("POST", path, body=json.dumps(body), headers=headers)
        r = c.getresponse()
        if r.status != 200:
            res.error = f"HTTP {r.status}: {r.read()[:200]!r}"
            return res
        buf = b""
        last = None
        chunks = 0
        usage = None
        done = False
        while not done:
            data = r.read1(65536)
            if not data:
                break
            buf += data
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                for line in ev.split(b"\n"):
                    if not line.startswith(b"data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        done = True
                        break
                    obj = json.loads(payload)
                    if "error" in obj:
                        res.error = str(obj["error"])[:200]
                        return res
                    if obj.get("usage"):
                        usage = obj["usage"]
                    for ch in obj.get("choices") or []:
                        text = ch.get("text")
                        if text is None:
                            text = (ch.get("delta") or {}).get("content")
                        if not text:
                            continue
                        now = time.perf_counter()
                        if res.ttft is None:
                            res.ttft = now - t0
                        elif last is not None:
                            res.itl.append(now - last)
                        last = now
                        chunks += 1
        res.latency = time.perf_counter() - t0
        res.tokens = usage.get("completion_tokens", chunks) if usage else chunks
        if usage and chunks > 1 and res.tokens > chunks:  # several tokens per chunk
            per = (res.tokens - 1) / (chunks - 1)
            res.itl = [g / per for g in res.itl for _ in range(round(per))]
        res.ok = res.ttft is not None
        if not res.ok:
            res.error = "no content received"
    except Exception as e:  # noqa: BLE001 - report any client-side failure per request
        res.error = f"{type(e).__name__}: {e}"
    finally:
        c.close()
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    ap.add_argument("--model", default="default")
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    ap.add_argument("--num-requests", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prompt-len", type=int, default=64, help="prompt length in words (~tokens)")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--ignore-eos", action=argparse.BooleanOptionalAction, default=True,
                    help="ask for exactly --max-tokens tokens (servers that know ignore_eos)")
    ap.add_argument("--ban-token", type=int, action="append", default=[],
                    help="token id to ban with logit_bias -100 (repeatable; e.g. the EOS id, so "
                         "every server generates exactly --max-tokens)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--label", default="")
    ap.add_argument("--extra-body", type=json.loads, default=None,
                    help="a JSON object merged into every request (e.g. a response_format)")
    ap.add_argument("--extra-body-file", default=None, help="the same, read from a file")
    args = ap.parse_args()
    if args.extra_body_file:
        with open(args.extra_body_file) as f:
            args.extra_body = {**(args.extra_body or {}), **json.load(f)}

    rng = random.Random(args.seed)
    prompts = [make_prompt(args.prompt_len, rng) for _ in range(args.num_requests)]
    headers = {"Content-Type": "application/json"}
    if args.api_key:
        headers["Authorization"] = f"Bearer {args.api_key}"
    lock = threading.Lock()
    done = [0]

    def run(p):
        r = one_request(args, p, headers)
        with lock:
            done[0] += 1
            if not r.ok:
                print(f"request failed: {r.error}", file=sys.stderr)
        return r

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.concurrency) as ex:
        results = list(ex.map(run, prompts))
    wall = time.perf_counter() - t0

    ok = [r for r in results if r.ok]
    ttft = [r.ttft for r in ok]
    itl = [g for r in ok for g in r.itl]
    out_tokens = sum(r.tokens for r in ok)
    summary = {
        "label": args.label, "base_url": args.base_url, "model": args.model, "endpoint": args.endpoint,
        "num_requests": args.num_requests, "concurrency": args.concurrency, "max_tokens": args.max_tokens,
        "prompt_len": args.prompt_len, "completed": len(ok), "failed": len(results) - len(ok),
        "wall_s": round(wall, 3), "output_tokens": out_tokens,
        "output_tokens_per_s": round(out_tokens / wall, 2) if wall > 0 else 0.0,
        "requests_per_s": round(len(ok) / wall, 3) if wall > 0 else 0.0,
        "ttft_p50_s": round(pct(ttft, 50), 4), "ttft_p99_s": round(pct(ttft, 99), 4),
        "ttft_mean_s": round(statistics.fmean(ttft), 4) if ttft else float("nan"),
        "itl_p50_ms": round(pct(itl, 50) * 1000, 2), "itl_p99_ms": round(pct(itl, 99) * 1000, 2),
        "e2e_p50_s": round(pct([r.latency for r in ok], 50), 3),
    }
    rows = [("requests completed / failed", f"{summary['completed']} / {summary['failed']}"),
            ("wall time (s)", summary["wall_s"]), ("output tokens", out_tokens),
            ("output tokens/s", summary["output_tokens_per_s"]), ("requests/s", summary["requests_per_s"]),
            ("TTFT p50 / p99 (s)", f"{summary['ttft_p50_s']} / {summary['ttft_p99_s']}"),
            ("inter-token p50 / p99 (ms)", f"{summary['itl_p50_ms']} / {summary['itl_p99_ms']}"),
            ("end-to-end p50 (s)", summary["e2e_p50_s"])]
    print(f"serving benchmark: {args.num_requests} requests, {args.concurrency} at a time, "
          f"{args.max_tokens} output tokens, ~{args.prompt_len}-word prompts -> {args.base_url}")
    w = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"  {k:<{w}}  {v}")
    print(json.dumps(summary))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

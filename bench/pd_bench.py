#!/usr/bin/env python3
"""pd_bench.py — prefill/decode disaggregation against colocation, side by side in one run.

A mixed workload: STREAMS clients decode continuously (short prompts, --decode-tokens
each, streaming) while long prompts (--long-len tokens, a few output tokens) arrive one
every --long-every seconds. Reported per configuration: the decode streams' inter-token
latency p50 / p99 (goal with disaggregation: p99 <= 1.5 x p50, no prefill stalls) and
the long prompts' TTFT p50 / p99, plus the KV transfer rate for the disaggregated runs.

Configurations (the same cores in all):
  colocated   one instance on cores A,B (chunked prefill at its default)
  pd-tcp      a prefill instance on core A, a decode instance on core B, over loopback
  pd-netns    the same with the prefill instance in a network namespace behind a veth
              pair shaped to --link-mbit (tbf) and --link-delay-ms each way (a relay);
              root and iproute2 only, else skipped
  pd-ucx, pd-netns-ucx
              the same two with --pd-transport ucx: one-sided reads of the prefill
              instance's registered KV pool (UCX's own transport choice on loopback;
              UCX_TLS=tcp across the namespace, whose relay then delays only the control
              connection)

  python3 bench/pd_bench.py --build build --model models-cache/qwen0.5b.gguf \
      --long-len 1000 --duration 60
  python3 bench/pd_bench.py --build build --random-weights tiny --duration 5   # smoke
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import queue
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serving_bench import pct  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Inst:
    def __init__(self, args, extra, cores, host="127.0.0.1", prefix=(), env=None):
        self.host, self.port = host, free_port()
        model = ["--random-weights", args.random_weights] if args.random_weights else ["-m", args.model]
        cmd = [*prefix, "taskset", "-c", cores, os.path.join(args.build, "inferd"), "serve", *model,
               "--host", host, "--port", str(self.port), "--threads", str(len(cores.split(","))),
               "--max-num-seqs", "32", *extra]
        self.log = tempfile.NamedTemporaryFile(prefix="pd-bench-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        deadline = time.time() + 300
        while True:
            if self.proc.poll() is not None:
                sys.exit(f"server exited: {open(self.log.name).read()[-2000:]}")
            try:
                c = http.client.HTTPConnection(host, self.port, timeout=2)
                c.request("GET", "/health/ready")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                sys.exit("server not ready")
            time.sleep(0.1)

    def metrics(self):
        c = http.client.HTTPConnection(self.host, self.port, timeout=10)
        c.request("GET", "/metrics")
        out = {}
        for line in c.getresponse().read().decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def stream(inst, prompt, max_tokens, seed):
    """One streamed completion: (ttft, [gaps between tokens])."""
    c = http.client.HTTPConnection(inst.host, inst.port, timeout=600)
    body = {"prompt": prompt, "max_tokens": max_tokens, "stream": True, "temperature": 0.8, "seed": seed,
            "ignore_eos": True}
    t0 = time.time()
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(r.read()[:300])
    ttft, last, gaps, buf = None, None, [], b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if not ev.startswith(b"data: ") or ev == b"data: [DONE]":
                continue
            d = json.loads(ev[6:])
            if not d.get("choices") or not d["choices"][0].get("text"):
                continue
            now = time.time()
            if ttft is None:
                ttft = now - t0
            elif last is not None:
                gaps.append(now - last)
            last = now
    c.close()
    return ttft, gaps


def workload(inst, args, vocab):
    rng = random.Random(5)
    stop = threading.Event()
    itl, ttft_long, errors = [], [], []
    lock = threading.Lock()

    def decoder(k):
        n = 0
        while not stop.is_set():
            p = [1] + [3 + rng.randrange(vocab - 3) for _ in range(31)]
            try:
                _, gaps = stream(inst, p, args.decode_tokens, 1000 * k + n)
            except Exception as e:  # noqa: BLE001
                errors.append(str(e))
                return
            with lock:
                itl.extend(gaps)
            n += 1

    def long_prompts():
        k = 0
        while not stop.is_set():
            t_next = time.time() + args.long_every
            p = [1] + [3 + rng.randrange(vocab - 3) for _ in range(args.long_len - 1)]
            try:
                t, _ = stream(inst, p, 4, 77 + k)
                with lock:
                    ttft_long.append(t)
            except Exception as e:  # noqa: BLE001
                errors.append(str(e))
                return
            k += 1
            stop.wait(max(0.0, t_next - time.time()))

    ths = [threading.Thread(target=decoder, args=(k,)) for k in range(args.streams)]
    for t in ths:
        t.start()
    time.sleep(args.warmup)
    with lock:
        itl.clear()
    lt = threading.Thread(target=long_prompts)
    lt.start()
    time.sleep(args.duration)
    stop.set()
    for t in ths + [lt]:
        t.join()
    return itl, ttft_long, errors


class Relay:
    """Holds each chunk `delay` s in each direction (link latency without sch_netem)."""

    def __init__(self, target, delay):
        self.target, self.delay = target, delay
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                a, _ = self.sock.accept()
            except OSError:
                return
            b = socket.create_connection(self.target)
            for s in (a, b):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for src, dst in ((a, b), (b, a)):
                q = queue.Queue()
                threading.Thread(target=self.rd, args=(src, q), daemon=True).start()
                threading.Thread(target=self.wr, args=(dst, q), daemon=True).start()

    def rd(self, src, q):
        while True:
            try:
                d = src.recv(1 << 16)
            except OSError:
                d = b""
            q.put((time.time() + self.delay, d))
            if not d:
                return

    def wr(self, dst, q):
        while True:
            due, d = q.get()
            time.sleep(max(0.0, due - time.time()))
            try:
                if not d:
                    dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(d)
            except OSError:
                return


def netns_up(mbit):
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"):
        return None
    ns, va, vb = f"pdb{os.getpid() % 10000}", f"pdbA{os.getpid() % 10000}", f"pdbB{os.getpid() % 10000}"
    cmds = [["ip", "netns", "add", ns], ["ip", "link", "add", va, "type", "veth", "peer", "name", vb],
            ["ip", "link", "set", vb, "netns", ns], ["ip", "addr", "add", "10.79.0.1/24", "dev", va],
            ["ip", "-n", ns, "addr", "add", "10.79.0.2/24", "dev", vb], ["ip", "link", "set", va, "up"],
            ["ip", "-n", ns, "link", "set", vb, "up"], ["ip", "-n", ns, "link", "set", "lo", "up"],
            ["tc", "qdisc", "add", "dev", va, "root", "tbf", "rate", f"{mbit}mbit", "burst", "64kb", "latency",
             "200ms"],
            ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", vb, "root", "tbf", "rate", f"{mbit}mbit",
             "burst", "64kb", "latency", "200ms"]]
    for c in cmds:
        if subprocess.run(c, capture_output=True).returncode:
            netns_down((ns, va))
            return None
    return ns, va


def netns_down(h):
    ns, va = h
    subprocess.run(["ip", "link", "del", va], capture_output=True)
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def link_rate(ns, mbit):
    """Measured bytes/s through the shaped veth (a bulk TCP send into the namespace)."""
    port = free_port()
    srv = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c",
                            "import socket;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
                            f"s.bind(('10.79.0.2',{port}));s.listen(1);c,_=s.accept()\n"
                            "while c.recv(1<<20): pass"])
    time.sleep(0.5)
    s = socket.create_connection(("10.79.0.2", port))
    data, n, t0 = b"x" * (1 << 20), 0, time.time()
    while time.time() - t0 < 2:
        s.sendall(data)
        n += len(data)
    s.close()
    rate = n / (time.time() - t0)
    srv.wait(10)
    return rate


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--model")
    ap.add_argument("--random-weights")
    ap.add_argument("--cores", default="0,1", help="two cores: colocated on both, prefill on the first, decode on the second")
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--long-len", type=int, default=2000)
    ap.add_argument("--long-every", type=float, default=4.0)
    ap.add_argument("--duration", type=float, default=30)
    ap.add_argument("--warmup", type=float, default=3)
    ap.add_argument("--link-mbit", type=int, default=1000)
    ap.add_argument("--link-delay-ms", type=float, default=1.0)
    ap.add_argument("--configs", default="colocated,pd-tcp,pd-netns")
    args = ap.parse_args()
    if not args.model and not args.random_weights:
        sys.exit("--model or --random-weights")
    a, b = args.cores.split(",")
    rows = []
    for cfg in args.configs.split(","):
        insts, relay, ns = [], None, None
        if cfg == "colocated":
            dec = Inst(args, [], f"{a},{b}")
            insts = [dec]
        elif cfg in ("pd-tcp", "pd-netns", "pd-ucx", "pd-netns-ucx"):
            kvp = free_port()
            ucx = cfg.endswith("-ucx")
            tr = ["--pd-transport", "ucx" if ucx else "tcp"]
            env = {"UCX_TLS": "tcp"} if cfg == "pd-netns-ucx" else None
            if cfg.startswith("pd-netns"):
                ns = netns_up(args.link_mbit)
                if not ns:
                    print(f"{cfg}: skipped (needs root and iproute2)")
                    continue
                pre = Inst(args, ["--role", "prefill", "--pd-kv-port", str(kvp), "--pd-kv-host", "10.79.0.2", *tr], a,
                           host="10.79.0.2", prefix=["ip", "netns", "exec", ns[0]], env=env)
                relay = Relay(("10.79.0.2", kvp), args.link_delay_ms / 1e3)
                target = f"127.0.0.1:{relay.port}"
            else:
                pre = Inst(args, ["--role", "prefill", "--pd-kv-port", str(kvp), *tr], a, env=env)
                target = f"127.0.0.1:{kvp}"
            dec = Inst(args, ["--role", "decode", "--pd-prefill", target, "--pd-local-threshold", "0", *tr], b, env=env)
            insts = [pre, dec]
        else:
            sys.exit(f"unknown config {cfg}")
        vocab = 500 if args.random_weights else 20000
        itl, ttft, errors = workload(dec, args, vocab)
        m = dec.metrics()
        extra = ""
        if cfg != "colocated":
            gbps = m.get("inferd_pd_kv_transfer_bytes_total", 0) / max(m.get("inferd_pd_kv_transfer_seconds_total", 0), 1e-9)
            extra = f"kv {gbps / 1e9:.3f} GB/s"
            if ns:
                extra += f" (link measured {link_rate(ns[0], args.link_mbit) / 1e9:.3f} GB/s, {args.link_mbit} Mbit tbf, {args.link_delay_ms} ms each way)"
        for i in insts:
            i.stop()
        if ns:
            netns_down(ns)
        p50, p99 = pct(itl, 50) * 1e3, pct(itl, 99) * 1e3
        row = {"config": cfg, "itl_p50_ms": round(p50, 2), "itl_p99_ms": round(p99, 2),
               "itl_p99_over_p50": round(p99 / p50, 2) if p50 else None, "itl_n": len(itl),
               "ttft_p50_s": round(pct(ttft, 50), 3), "ttft_p99_s": round(pct(ttft, 99), 3), "long_n": len(ttft),
               "errors": len(errors), "note": extra}
        rows.append(row)
        print(f"{cfg:10s} ITL p50 {p50:8.2f} ms p99 {p99:8.2f} ms (x{row['itl_p99_over_p50']}, {len(itl)} gaps)  "
              f"TTFT long p50 {row['ttft_p50_s']:.3f} s p99 {row['ttft_p99_s']:.3f} s ({len(ttft)})  {extra}"
              + (f"  ERRORS {errors[:2]}" if errors else ""), flush=True)
    print(json.dumps(rows))
    if any(r["errors"] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()

"""A soak of `inferd serve`: 200 streaming clients (chat and completions, n up to 8
against a small --max-num-seqs, so forks must wait for seats), a third of them
vanishing mid-stream (abrupt close or reset). Afterwards nothing is left: no request
running or waiting, no KV block used, file descriptors back to the baseline, and the
server still answers. scripts/test.sh also runs it against the ASan+UBSan build."""
from __future__ import annotations

import json
import os
import random
import socket
import struct
import threading
import time

from server_util import Server

N_CLIENTS = int(os.environ.get("INFERD_SOAK_CLIENTS", "200"))
CONCURRENCY = 24


def fd_count(srv: Server) -> int:
    return len(os.listdir(f"/proc/{srv.proc.pid}/fd"))


def one_client(srv: Server, rng: random.Random, out: list, i: int):
    chat = rng.random() < 0.5
    n = rng.choice([1, 1, 2, 3, 4, 8])
    body = {"max_tokens": rng.randint(4, 40), "n": n, "stream": True, "temperature": rng.choice([0, 0.8]),
            "seed": rng.randint(0, 2**63 - 1)}
    if chat:
        body["messages"] = [{"role": "user", "content": "Speak, friend %d" % i}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = rng.choice(["ROMEO:", "JULIET:", "To be, or not"])
        path = "/v1/completions"
    vanish = rng.random() < 0.35
    data = json.dumps(body).encode()
    req = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(data)}\r\n\r\n").encode() + data
    k = socket.create_connection((srv.host, srv.port), timeout=120)
    try:
        k.sendall(req)
        got = b""
        limit = rng.randint(1, 3000) if vanish else None
        while True:
            b = k.recv(65536)
            if not b:
                break
            got += b
            if limit is not None and len(got) >= limit:
                if rng.random() < 0.5:  # a reset instead of a close
                    k.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                out[i] = "vanished"
                return
            if got.endswith(b"0\r\n\r\n"):
                break
        assert got.startswith(b"HTTP/1.1 200"), got[:200]
        assert b"data: [DONE]" in got, got[-300:]
        payloads = [l[6:] for l in got.split(b"\n") if l.startswith(b"data: {")]
        idx = {c["index"] for p in payloads for c in json.loads(p)["choices"]}
        assert idx == set(range(n)), (idx, n)
        out[i] = "ok"
    finally:
        k.close()


def test_soak_streams_with_forks_and_disconnects():
    s = Server("--max-num-seqs", "6", "--max-n", "8", "--max-waiting-requests", "0")
    try:
        assert s.request("GET", "/health")[0] == 200
        base = fd_count(s)
        rng = random.Random(7)
        out = [None] * N_CLIENTS
        errors = []
        sem = threading.Semaphore(CONCURRENCY)

        def run(i, seed):
            with sem:
                try:
                    one_client(s, random.Random(seed), out, i)
                except Exception as e:  # noqa: BLE001 - reported below
                    errors.append((i, repr(e)))
        th = [threading.Thread(target=run, args=(i, rng.randrange(1 << 30))) for i in range(N_CLIENTS)]
        for t in th:
            t.start()
        for t in th:
            t.join(600)
        assert not errors, errors[:5]
        assert out.count("ok") + out.count("vanished") == N_CLIENTS
        assert out.count("vanished") > N_CLIENTS // 5
        deadline = time.time() + 30
        while True:
            m = s.metrics()
            left = (m["inferd_num_requests_running"], m["inferd_num_requests_waiting"], m["inferd_kv_blocks_used"])
            if left == (0, 0, 0) or time.time() > deadline:
                break
            time.sleep(0.1)
        assert left == (0, 0, 0), left
        assert m['inferd_aborted_total{reason="client_disconnect"}'] > 0
        deadline = time.time() + 10
        while fd_count(s) > base and time.time() < deadline:
            time.sleep(0.1)
        assert fd_count(s) <= base
        st, h, d = s.request("POST", "/v1/completions", {"prompt": "ROMEO:", "max_tokens": 4, "n": 8})
        assert st == 200 and len(json.loads(d)["choices"]) == 8
    finally:
        assert s.stop() == 0

"""`inferd serve` under load and at the edges of a request's life: 64 concurrent
streams, clients that disconnect (streaming or not), admission (503 + Retry-After),
the queue deadline, keep-alive comments during a long wait, SIGTERM with streams in
flight, and `promtool check metrics`."""
from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import threading
import time

import pytest

from requires import skip_unless_ci
from server_util import Server, sse_events

CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
LONG = {"prompt": "ROMEO:", "max_tokens": 240, "ignore_eos": True, "temperature": 0}
# The timing-dependent tests need generations that last a while even on a fast, idle
# machine: the plain C reference kernels on one thread are the slowest engine there is.
SLOW = ("--reference-kernels", "--threads", "1")


def stream_chat(s: Server, max_tokens=32, seed=None, out=None, idx=0, started=None):
    c = s.connection(timeout=120)
    body = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": max_tokens,
            "stream": True, "ignore_eos": True}
    if seed is not None:
        body["seed"] = seed
    c.request("POST", CHAT, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200
    evs, buf = [], b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if ev.startswith(b"data: "):
                evs.append(ev[6:].decode())
                if started is not None and len(evs) == 2:
                    started[idx].set()
    c.close()
    if out is not None:
        out[idx] = evs
    return evs


def check_stream(evs):
    assert evs[-1] == "[DONE]", evs[-3:]
    chunks = [json.loads(e) for e in evs[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)


@pytest.fixture(scope="module")
def srv():
    s = Server(*SLOW)
    yield s
    assert s.stop() == 0


def wait_for(pred, timeout=15.0):
    t = time.time() + timeout
    while time.time() < t:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    return pred()


def test_64_concurrent_streams(srv):
    out = [None] * 64
    th = [threading.Thread(target=stream_chat, args=(srv, 24, i % 4, out, i)) for i in range(64)]
    for t in th:
        t.start()
    for t in th:
        t.join(180)
    texts = [check_stream(e) for e in out]
    # same seed, same text: batching with 63 others does not change a sequence
    for i in range(4, 64):
        assert texts[i] == texts[i % 4]
    m = wait_for(lambda: (lambda m: m if m["inferd_num_requests_running"] == 0 else None)(srv.metrics()))
    assert m["inferd_num_requests_running"] == 0


def test_disconnect_mid_stream_aborts(srv):
    base = srv.metrics()
    key = 'inferd_aborted_total{reason="client_disconnect"}'
    sk = socket.create_connection((srv.host, srv.port))
    body = json.dumps({**LONG, "stream": True}).encode()
    sk.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body) + body)
    got = b""
    while got.count(b"data: ") < 3:
        got += sk.recv(4096)
    assert b"200" in got.split(b"\r\n")[0]
    sk.close()
    m = wait_for(lambda: (lambda m: m if m[key] == base[key] + 1 and m["inferd_num_requests_running"] == 0
                          and m["inferd_kv_blocks_used"] == base["inferd_kv_blocks_used"] else None)(srv.metrics()))
    assert m, srv.metrics()
    assert m[key] == base[key] + 1
    assert m["inferd_kv_blocks_used"] == base["inferd_kv_blocks_used"]


def test_disconnect_non_streaming_aborts(srv):
    base = srv.metrics()
    key = 'inferd_aborted_total{reason="client_disconnect"}'
    sk = socket.create_connection((srv.host, srv.port))
    body = json.dumps(LONG).encode()
    sk.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body) + body)
    time.sleep(0.15)
    sk.close()
    m = wait_for(lambda: (lambda m: m if m[key] == base[key] + 1 and m["inferd_num_requests_running"] == 0
                          else None)(srv.metrics()))
    assert m and m["inferd_kv_blocks_used"] == base["inferd_kv_blocks_used"], srv.metrics()
    gen = m["inferd_generation_tokens_total"] - base["inferd_generation_tokens_total"]
    assert gen < 240  # stopped early


def test_disconnect_aborts_every_prompt():
    # more prompts than the old 64-id abort buffer: every one must stop
    s = Server(*SLOW, "--max-prompts", "100", "--max-num-seqs", "128")
    try:
        body = json.dumps({**LONG, "prompt": ["ROMEO:"] * 100}).encode()
        sk = socket.create_connection((s.host, s.port))
        sk.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n" % len(body) + body)
        assert wait_for(lambda: s.metrics()["inferd_num_requests_running"] > 0)
        sk.close()
        m = wait_for(lambda: (lambda m: m if m["inferd_num_requests_running"] == 0 and
                              m["inferd_num_requests_waiting"] == 0 else None)(s.metrics()), timeout=5)
        assert m, s.metrics()
        assert m['inferd_aborted_total{reason="client_disconnect"}'] == 1
        assert m["inferd_kv_blocks_used"] == 0
        assert m["inferd_generation_tokens_total"] < 100 * 240  # stopped early
    finally:
        assert s.stop() == 0


def test_promtool_check_metrics(srv):
    promtool = shutil.which("promtool")
    if not promtool:
        skip_unless_ci("promtool not installed (Debian package prometheus)")
    srv.request("POST", COMP, {"prompt": "ROMEO:", "max_tokens": 4})
    st, _, data = srv.request("GET", "/metrics")
    assert st == 200
    r = subprocess.run([promtool, "check", "metrics"], input=data, capture_output=True)
    # The vLLM-named aliases (vllm:num_requests_running, ... — what vLLM's Grafana dashboards
    # and autoscalers query) carry a colon, legal in the exposition format but flagged by
    # promtool's lint, which exits 3 for lint findings. That finding, on exactly those
    # names, is the only one allowed: any other problem, or a parse error (exit 1), fails.
    problems = [l for l in (r.stdout + r.stderr).decode().splitlines() if l.strip()]
    other = [l for l in problems
             if not re.fullmatch(r"vllm:[a-z_]+ metric names should not contain ':'", l)]
    assert r.returncode in (0, 3) and not other, (r.stdout + r.stderr).decode()
    assert r.returncode == (3 if problems else 0)
    assert sum(1 for l in data.decode().splitlines() if l.startswith("vllm:")) >= 8
    text = data.decode()
    for name in ["inferd_time_to_first_token_seconds_bucket", "inferd_inter_token_latency_seconds_bucket",
                 "inferd_e2e_request_latency_seconds_bucket", "inferd_request_queue_time_seconds_bucket",
                 "inferd_request_prefill_time_seconds_bucket", 'le="3600"', "inferd_kv_blocks_capacity",
                 "inferd_kv_blocks_cached", "inferd_prefix_cache_hits_total", "inferd_preemptions_total",
                 'inferd_http_responses_total{code="200"}', "inferd_prompt_tokens_total"]:
        assert name in text, name


def _post_status(s, path, body, out, i):
    st, h, d = s.request("POST", path, body, timeout=120)
    out[i] = (st, h, d)


def _start_running(s, out, tries=5):
    """Start LONG in a thread and return it once it runs in the engine (a sleep is not
    enough on a loaded machine). With a 50 ms --queue-timeout, an ASAN build on a busy
    machine can time out even a first request: retried, and the number of those
    timeouts returned too."""
    for k in range(tries):
        out[0] = None
        t = threading.Thread(target=_post_status, args=(s, COMP, LONG, out, 0))
        t.start()
        deadline = time.time() + 30
        while time.time() < deadline:
            if s.metrics().get("inferd_num_requests_running") == 1:
                return t, k
            if out[0] is not None:
                break
            time.sleep(0.01)
        t.join(120)
        assert out[0] is not None and out[0][0] == 503, out[0]
    raise AssertionError(f"no request ran in {tries} tries")


def test_overload_503_retry_after():
    s = Server(*SLOW, "--max-num-seqs", "1", "--max-waiting-requests", "1", "--retry-after", "3")
    try:
        out = [None] * 6
        th = [threading.Thread(target=_post_status, args=(s, COMP, LONG, out, i)) for i in range(6)]
        for t in th:
            t.start()
            time.sleep(0.02)
        for t in th:
            t.join(120)
        codes = [o[0] for o in out]
        assert 200 in codes and 503 in codes, codes
        for st, h, d in out:
            if st == 503:
                assert h["retry-after"] == "3"
                assert json.loads(d)["error"]["code"] == "server_overloaded"
    finally:
        assert s.stop() == 0


def test_queue_timeout_and_keepalive():
    # the first request runs ~0.3 s here; the timeout must be well under what the second waits
    s = Server(*SLOW, "--max-num-seqs", "1", "--queue-timeout", "0.05", "--keepalive-interval", "0.05")
    try:
        # warm up first: on a loaded machine (ASAN, a noisy neighbour) the very first
        # request can wait past 50 ms behind start-up work, and the test needs it to run
        for _ in range(5):
            if s.request("POST", COMP, {**LONG, "max_tokens": 1})[0] == 200:
                break
        aborted0 = s.metrics().get('inferd_aborted_total{reason="queue_timeout"}', 0)
        out = [None] * 2
        t0, retried = _start_running(s, out)
        # a stream stuck behind it gets keep-alive comments, then the timeout as an SSE error
        c = s.connection()
        c.request("POST", COMP, body=json.dumps({**LONG, "stream": True}), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        raw = r.read()
        c.close()
        t0.join(120)
        assert out[0][0] == 200
        assert r.status == 200
        assert b": keep-alive" in raw
        evs = [line[6:] for line in raw.split(b"\n") if line.startswith(b"data: ")]
        assert evs[-1] == b"[DONE]"
        err = json.loads(evs[-2])["error"]
        assert err["code"] == "queue_timeout"
        # and a non-streaming one gets a 503
        t0, k = _start_running(s, out)
        retried += k
        st, h, d = s.request("POST", COMP, LONG)
        t0.join(120)
        assert st == 503 and "retry-after" in h and json.loads(d)["error"]["code"] == "queue_timeout"
        m = s.metrics()
        assert m['inferd_aborted_total{reason="queue_timeout"}'] - aborted0 == 2 + retried
    finally:
        assert s.stop() == 0


def test_sigterm_drains_streams():
    s = Server(*SLOW, "--max-num-seqs", "4", "--shutdown-timeout", "60")
    out = [None] * 8
    started = [threading.Event() for _ in range(8)]
    th = [threading.Thread(target=stream_chat, args=(s, 200, i, out, i, started)) for i in range(8)]
    for t in th:
        t.start()
    for e in started[:4]:
        assert e.wait(30)
    s.signal()
    time.sleep(0.2)
    st, h, d = s.request("POST", COMP, {"prompt": "ROMEO:", "max_tokens": 2})
    assert st == 503 and "retry-after" in h, d
    assert json.loads(d)["error"]["code"] == "shutting_down"
    st, _, _ = s.request("GET", "/health/ready")
    assert st == 503
    st, _, _ = s.request("GET", "/health")
    assert st == 200
    for t in th:
        t.join(120)
    for evs in out:
        check_stream(evs)
        assert json.loads(evs[-2])["choices"][0]["finish_reason"] == "length"
    assert s.wait(60) == 0
    assert s.stop() == 0


def test_sigterm_timeout_aborts():
    s = Server(*SLOW, "--max-num-seqs", "1", "--shutdown-timeout", "0.3")
    out = [None] * 2
    th = [threading.Thread(target=_post_status, args=(s, COMP, LONG, out, i)) for i in range(2)]
    for t in th:
        t.start()
    time.sleep(0.2)
    s.signal()
    for t in th:
        t.join(60)
    assert s.wait(60) == 0
    fr = [json.loads(o[2])["choices"][0]["finish_reason"] for o in out if o[0] == 200]
    assert "abort" in fr, out
    s.stop()


def test_per_client_limit_429():
    s = Server(*SLOW, "--max-requests-per-client", "1", "--retry-after", "2")
    try:
        out = [None] * 2
        t0 = threading.Thread(target=_post_status, args=(s, COMP, LONG, out, 0))
        t0.start()
        time.sleep(0.15)
        st, h, d = s.request("POST", COMP, {"prompt": "ROMEO:", "max_tokens": 2})
        t0.join(120)
        assert out[0][0] == 200
        assert st == 429 and h["retry-after"] == "2", d
        assert json.loads(d)["error"]["code"] == "rate_limit_exceeded"
        # the slot comes back once the first request's connection is done with it
        assert wait_for(lambda: s.request("POST", COMP, {"prompt": "ROMEO:", "max_tokens": 2})[0] == 200, 10)
    finally:
        assert s.stop() == 0

"""`inferd serve` against hostile HTTP clients, over raw sockets: partial requests and
half-closes, slow clients, floods past the connection limit, malformed and smuggling
heads, and the protocol details real clients rely on (chunked bodies, 100-continue,
pipelining, HEAD). Each scenario ends with /health answering and the server's file
descriptors back to their baseline. Also: CORS, 401 before 404/405, served names."""
from __future__ import annotations

import json
import os
import select
import socket
import threading
import time

import pytest

from server_util import MODEL, Server

COMP = "/v1/completions"
CHAT = "/v1/chat/completions"


def fd_count(srv: Server) -> int:
    return len(os.listdir(f"/proc/{srv.proc.pid}/fd"))


def close_wait(srv: Server) -> int:
    """Connections of the server's port the client closed but the server has not."""
    n = 0
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(path).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            port = int(f[1].rsplit(":", 1)[1], 16)
            if port == srv.port and f[3] == "08":  # TCP_CLOSE_WAIT
                n += 1
    return n


def settle(srv: Server, baseline: int, timeout: float = 10.0) -> int:
    """Wait until the fd count is back to baseline; returns the last count."""
    deadline = time.time() + timeout
    n = fd_count(srv)
    while n > baseline and time.time() < deadline:
        time.sleep(0.05)
        n = fd_count(srv)
    return n


def health_ok(srv: Server, timeout: float = 5) -> bool:
    st, _, _ = srv.request("GET", "/health", timeout=timeout)
    return st == 200


def raw(srv: Server, data: bytes, timeout: float = 5.0, shut: bool = False) -> bytes:
    """Send bytes, read until the server closes (or the timeout); returns what came."""
    with socket.create_connection((srv.host, srv.port), timeout=timeout) as sk:
        sk.sendall(data)
        if shut:
            sk.shutdown(socket.SHUT_WR)
        out = b""
        t_end = time.time() + timeout
        while time.time() < t_end:
            try:
                b = sk.recv(65536)
            except socket.timeout:
                break
            except OSError:
                break
            if not b:
                break
            out += b
        return out


def parse_response(data: bytes):
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for l in lines[1:]:
        k, _, v = l.partition(":")
        headers[k.strip().lower()] = v.strip()
    return status, headers, body


def check_json_error(data: bytes, status: int):
    st, h, body = parse_response(data)
    assert st == status, data[:300]
    assert h.get("content-type", "").startswith("application/json"), data[:300]
    n = int(h["content-length"])
    err = json.loads(body[:n])["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    return err


@pytest.fixture(scope="module")
def srv():
    s = Server("--header-timeout", "1", "--body-timeout", "1", "--keepalive-timeout", "2",
               "--max-body-bytes", "65536", "--http-threads", "2")
    health_ok(s)
    yield s
    assert s.stop() == 0


# ---- partial requests, half-closes ---------------------------------------------------

PARTIALS = [b"G", b"GET /health HTTP/1.1\r\nHost: x\r\n",
            b"POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"a\"",
            b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"]


def test_half_closed_partial_requests_are_freed_at_once(srv):
    base = fd_count(srv)
    for i in range(2000):
        s = socket.create_connection((srv.host, srv.port))
        s.send(PARTIALS[i % len(PARTIALS)])
        s.close()
    n = settle(srv, base, timeout=3)  # far less than --header-timeout x connections
    assert n <= base, (n, base)
    assert close_wait(srv) == 0
    assert health_ok(srv)


def test_half_open_requests_do_not_delay_sigterm():
    s = Server("--shutdown-timeout", "30")
    socks = []
    for i in range(50):
        k = socket.create_connection((s.host, s.port))
        k.send(PARTIALS[i % len(PARTIALS)])
        socks.append(k)
    time.sleep(0.2)
    t0 = time.time()
    s.signal()
    rc = s.wait(20)
    took = time.time() - t0
    for k in socks:
        k.close()
    assert rc == 0 and took < 5, (rc, took)
    s.stop()


# ---- slow clients and deadlines --------------------------------------------------------

def test_slow_header_clients_are_dropped(srv):
    base = fd_count(srv)
    n = 200
    socks = [socket.create_connection((srv.host, srv.port)) for _ in range(n)]
    head = b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 100
    dropped = [False] * n
    t0 = time.time()
    for i in range(6):  # one byte per second each: the 1 s head deadline must cut them
        for j, k in enumerate(socks):
            if dropped[j]:
                continue
            try:
                k.send(head[i:i + 1])
            except OSError:
                dropped[j] = True
        time.sleep(0.5)
        r, _, _ = select.select([k for j, k in enumerate(socks) if not dropped[j]], [], [], 0)
        for k in r:
            j = socks.index(k)
            try:
                data = k.recv(65536)
            except OSError:
                data = b""
            if data:
                check_json_error(data, 408)
            dropped[j] = True
        assert health_ok(srv)  # others are served meanwhile
        if all(dropped):
            break
    assert all(dropped), sum(dropped)
    assert time.time() - t0 < 5
    for k in socks:
        k.close()
    assert settle(srv, base) <= base


def test_slow_body_is_dropped_with_408(srv):
    with socket.create_connection((srv.host, srv.port), timeout=5) as k:
        k.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 50\r\n\r\n{\"prompt\":")
        t0 = time.time()
        data = k.recv(65536)
        assert time.time() - t0 < 3
    check_json_error(data, 408)


def test_idle_keepalive_connection_is_closed(srv):
    with socket.create_connection((srv.host, srv.port), timeout=10) as k:
        k.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        st, _, _ = parse_response(k.recv(65536))
        assert st == 200
        t0 = time.time()
        assert k.recv(65536) == b""  # closed by --keepalive-timeout 2
        assert 1.5 < time.time() - t0 < 5


def test_idle_connections_past_the_limit_lock_nobody_out():
    s = Server("--max-connections", "40", "--reserve-connections", "4")
    try:
        base = fd_count(s)
        idle = [socket.create_connection((s.host, s.port)) for _ in range(120)]
        time.sleep(0.8)  # silent since connecting for > 0.5 s: evictable
        # idle connections are evicted to make room: real requests get through
        for _ in range(5):
            st, body = s.json("GET", "/v1/models")
            assert st == 200 and body["data"]
        assert health_ok(s)
        for k in idle:
            k.close()
        assert settle(s, base) <= base
    finally:
        assert s.stop() == 0


def test_reserve_answers_health_when_the_limit_is_reached():
    s = Server("--max-connections", "20", "--reserve-connections", "4", "--header-timeout", "30")
    try:
        base = fd_count(s)
        # busy (not idle) connections: a request head in progress each
        busy = []
        for _ in range(20):
            k = socket.create_connection((s.host, s.port))
            k.send(b"GET /v1/models HTTP/1.1\r\n")
            busy.append(k)
        time.sleep(0.3)
        assert health_ok(s)  # over the limit: the reserve
        st, h, d = s.request("GET", "/metrics")
        assert st == 200
        st, h, d = s.request("GET", "/v1/models")
        assert st == 503 and json.loads(d)["error"]["code"] == "too_many_connections"
        assert h.get("retry-after")
        # past limit + reserve: closed at once
        time.sleep(0.5)  # the reserve connections above are closed by now
        extra = [socket.create_connection((s.host, s.port)) for _ in range(4)]
        for k in extra:  # not idle either, so nobody can be evicted for the next one
            k.send(b"GET /health HTTP/1.1\r\n")
        time.sleep(0.2)
        for k in extra:  # all four were taken into the reserve (still open)
            try:
                assert k.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) != b""
            except BlockingIOError:
                pass
        more = socket.create_connection((s.host, s.port), timeout=3)
        more.sendall(b"GET /health HTTP/1.1\r\n\r\n")
        try:
            got = more.recv(100)
        except ConnectionResetError:
            got = b""
        assert got == b""
        for k in busy + extra + [more]:
            k.close()
        assert settle(s, base) <= base
        assert health_ok(s)
    finally:
        assert s.stop() == 0


# ---- malformed heads: answered at once, in OpenAI JSON ---------------------------------

def test_nul_bytes_first_are_answered_at_once(srv):
    with socket.create_connection((srv.host, srv.port), timeout=5) as k:
        k.sendall(b"\x00\x00\x00\x00")  # no newline ever comes
        t0 = time.time()
        data = k.recv(65536)
        assert time.time() - t0 < 0.5
    check_json_error(data, 400)


@pytest.mark.parametrize("req,status", [
    # request smuggling behind a proxy: the route would answer 200 to either framing
    (b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\n12345", 400),
    (b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
    (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\n12345", 400),
    (b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n folded\r\n\r\n", 400),
    (b"GET /health HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400),
    (b"GET /health HTTP/1.1\r\nBad Name: 1\r\n\r\n", 400),
    (b"GET /health HTTP/1.1\r\nX: a\x01b\r\n\r\n", 400),
    (b"GET /health HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    (b"GET /health FOO/1.1\r\n\r\n", 400),
    (b"GET  /health HTTP/1.1\r\n\r\n", 400),
    (b"GET /health HTTP/1.1\r\nExpect: magic\r\n\r\n", 417),
    (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", 414),
    (b"GET /health HTTP/1.1\r\n" + b"X-Big: " + b"b" * 40000 + b"\r\n\r\n", 431),
    (b"GET /health HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(150)) + b"\r\n", 431),
    (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n", 413),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400),  # a TLS ClientHello
])
def test_malformed_heads(srv, req, status):
    err = check_json_error(raw(srv, req), status)
    assert "<html" not in err["message"].lower()
    assert health_ok(srv)


def test_chunked_body_too_large_and_malformed(srv):
    big = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + \
        b"".join(b"8000\r\n" + b"a" * 0x8000 + b"\r\n" for _ in range(3))
    check_json_error(raw(srv, big), 413)
    bad = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"
    check_json_error(raw(srv, bad), 400)


# ---- what real clients rely on ------------------------------------------------------------

def test_chunked_request_body(srv):
    body = json.dumps({"prompt": "ROMEO:", "max_tokens": 3}).encode()
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 7]), body[i:i + 7]) for i in range(0, len(body), 7))
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + chunks + b"0\r\nX-Trailer: 1\r\n\r\n")
    st, h, b = parse_response(raw(srv, req))
    assert st == 200, b
    assert json.loads(b)["usage"]["completion_tokens"] <= 3


def test_expect_100_continue(srv):
    body = json.dumps({"prompt": "ROMEO:", "max_tokens": 2}).encode()
    with socket.create_connection((srv.host, srv.port), timeout=5) as k:
        k.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
        assert k.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        k.sendall(body)
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < 20:
            data += k.recv(65536)
    st, _, _ = parse_response(data)
    assert st == 200


def test_pipelined_requests_and_head(srv):
    req = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" * 3 + b"HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    data = raw(srv, req)
    assert data.count(b"HTTP/1.1 200 OK") == 4
    assert data.count(b'{"status":"ok"}') == 3  # HEAD: no body
    assert data.endswith(b"Connection: close\r\n\r\n")


def test_http10_and_half_close_after_a_full_request(srv):
    data = raw(srv, b"GET /health HTTP/1.0\r\n\r\n", shut=True)
    st, h, body = parse_response(data)
    assert st == 200 and body == b'{"status":"ok"}' and h.get("connection") == "close"


def test_bodies_in_flight_are_bounded():
    s = Server("--max-body-bytes", "64K", "--max-buffered-body-bytes", "100K")
    try:
        head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n"
        a = socket.create_connection((s.host, s.port), timeout=5)
        a.sendall(head + b"x" * 1000)
        time.sleep(0.2)
        err = check_json_error(raw(s, head + b"y" * 1000), 503)  # 120000 > 100K
        assert err["code"] == "server_busy"
        a.close()
        time.sleep(0.2)
        body = json.dumps({"prompt": "ROMEO:", "max_tokens": 2, "pad": "z" * 59000})
        st, h, d = s.request("POST", COMP, body.encode(), {"Content-Type": "application/json"})
        assert st == 200, d  # the budget came back
    finally:
        assert s.stop() == 0


def test_error_after_early_answer_is_readable(srv):
    # a 413 sent before the body is read must reach a client still writing its body
    with socket.create_connection((srv.host, srv.port), timeout=5) as k:
        k.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
        try:
            k.sendall(b"x" * 200000)
        except OSError:
            pass
        data = k.recv(65536)
    check_json_error(data, 413)


# ---- API key, CORS, model names ------------------------------------------------------------

def test_routes_hidden_without_key():
    s = Server("--api-key", "k1")
    try:
        for method, path in [("GET", "/no/such/route"), ("POST", "/v1/models"), ("DELETE", "/v1/completions")]:
            st, h, d = s.request(method, path)
            assert st == 401, (method, path, st)
        auth = {"Authorization": "Bearer k1"}
        assert s.request("GET", "/no/such/route", headers=auth)[0] == 404
        assert s.request("POST", "/v1/models", headers=auth)[0] == 405
        assert s.request("GET", "/health")[0] == 200  # open
    finally:
        assert s.stop() == 0


def test_cors():
    s = Server("--api-key", "k1", "--allowed-origins", "https://app.example, https://b.example")
    try:
        pre = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
               "Access-Control-Request-Headers": "authorization, content-type"}
        st, h, d = s.request("OPTIONS", CHAT, headers=pre)  # no key needed
        assert st == 204
        assert h["access-control-allow-origin"] == "https://app.example"
        assert "POST" in h["access-control-allow-methods"]
        assert "authorization" in h["access-control-allow-headers"].lower()
        st, h, d = s.request("OPTIONS", CHAT, headers={**pre, "Origin": "https://evil.example"})
        assert st == 403 and "access-control-allow-origin" not in h
        st, h, d = s.request("GET", "/v1/models", headers={"Origin": "https://b.example", "Authorization": "Bearer k1"})
        assert st == 200 and h["access-control-allow-origin"] == "https://b.example" and "Origin" in h["vary"]
        st, h, d = s.request("GET", "/v1/models", headers={"Origin": "https://evil.example", "Authorization": "Bearer k1"})
        assert st == 200 and "access-control-allow-origin" not in h
        # OPTIONS that is not a preflight still needs the key
        assert s.request("OPTIONS", CHAT)[0] == 401
    finally:
        assert s.stop() == 0
    s = Server()  # default: no origin allowed
    try:
        st, h, d = s.request("OPTIONS", CHAT, headers={"Origin": "https://app.example",
                                                      "Access-Control-Request-Method": "POST"})
        assert st == 403 and "access-control-allow-origin" not in h
    finally:
        assert s.stop() == 0
    s = Server("--allowed-origins", "*")
    try:
        st, h, d = s.request("OPTIONS", CHAT, headers={"Origin": "https://x.example",
                                                      "Access-Control-Request-Method": "POST"})
        assert st == 204 and h["access-control-allow-origin"] == "*"
    finally:
        assert s.stop() == 0


def test_served_names_never_paths(srv):
    st, body = srv.json("GET", "/v1/models")
    ids = [m["id"] for m in body["data"]]
    assert ids == [MODEL.name, MODEL.stem]
    for m in body["data"]:
        assert "/" not in m["id"] and "/" not in m.get("root", "")
    for bad in (str(MODEL), str(MODEL.resolve()), "../shared/models/" + MODEL.name):
        st, h, d = srv.request("POST", COMP, {"model": bad, "prompt": "ROMEO:", "max_tokens": 1})
        assert st == 404, (bad, st)
    for name in ids:
        st, h, d = srv.request("POST", COMP, {"model": name, "prompt": "ROMEO:", "max_tokens": 1})
        assert st == 200 and json.loads(d)["model"] == name
        st, h, d = srv.request("POST", COMP, {"model": name, "prompt": "ROMEO:", "max_tokens": 1, "stream": True})
        evs = [l[6:] for l in d.split(b"\n") if l.startswith(b"data: {")]
        assert evs and all(json.loads(e)["model"] == name for e in evs)


def test_many_prompts_with_n_do_not_crash_the_server(srv):
    # issue 7 item 1: 9 prompts x n=8 exceeded max_num_seqs and overflowed the step plan
    st, h, d = srv.request("POST", COMP, {"prompt": list("abcdefghi"), "n": 8, "max_tokens": 20}, timeout=300)
    assert st == 200, d
    ch = json.loads(d)["choices"]
    assert len(ch) == 72 and {c["index"] for c in ch} == set(range(72))
    out = [None] * 9

    def one(i):
        out[i] = srv.request("POST", CHAT, {"messages": [{"role": "user", "content": "hi %d" % i}], "n": 8,
                                            "max_tokens": 12}, timeout=300)[0]
    th = [threading.Thread(target=one, args=(i,)) for i in range(9)]
    for t in th:
        t.start()
    for t in th:
        t.join(300)
    assert out == [200] * 9
    assert health_ok(srv)

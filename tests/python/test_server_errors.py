"""Raw-HTTP error cases of `inferd serve`: every error is {"error":{message,type,param,
code}} with the right status, never echoes the input, and never is a 422 or empty.
Plus the small endpoints (/health*, /v1/models, /tokenize, /detokenize) and the API key."""
from __future__ import annotations

import json
import socket

import pytest

from server_util import Server

SECRET = "sk-test-secret-123"
MARK = "ECHO_MARK_7f3a"  # put into bad input; must never come back


@pytest.fixture(scope="module")
def srv():
    s = Server("--max-body-bytes", "65536", "--max-n", "4", "--max-stop", "4")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def keyed():
    s = Server("--api-key", SECRET)
    yield s
    assert s.stop() == 0


def check_error(st, h, data, status, param=None, code=None):
    assert st == status, (st, data)
    assert data, "empty error body"
    assert h.get("content-type", "").startswith("application/json")
    body = json.loads(data)
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    assert MARK not in data.decode(errors="replace")
    if param is not None:
        assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err
    return err


def post(s, path, body, headers=None):
    return s.request("POST", path, body, headers)


CHAT = "/v1/chat/completions"
COMP = "/v1/completions"


def test_health_and_models(srv):
    st, body = srv.json("GET", "/health")
    assert st == 200 and body["status"] == "ok"
    st, body = srv.json("GET", "/health/ready")
    assert st == 200
    st, body = srv.json("GET", "/v1/models")
    assert st == 200 and body["object"] == "list"
    m = body["data"][0]
    assert {"id", "object", "created", "owned_by", "max_model_len"} <= set(m)
    assert m["max_model_len"] == 256
    st, one = srv.json("GET", "/v1/models/" + m["id"])
    assert st == 200 and one["id"] == m["id"]


def test_request_id_echoed(srv):
    st, h, _ = srv.request("GET", "/v1/models", headers={"X-Request-Id": "abc-123"})
    assert h["x-request-id"] == "abc-123"
    st, h, _ = srv.request("GET", "/v1/models")
    assert len(h["x-request-id"]) >= 16
    st, h, _ = srv.request("GET", "/v1/models", headers={"X-Request-Id": "bad id\"<>"})
    assert h["x-request-id"] != "bad id\"<>"


def test_tokenize_detokenize(srv):
    st, body = srv.json("POST", "/tokenize", {"prompt": "ROMEO:"})
    assert st == 200 and body["count"] == len(body["tokens"]) and body["max_model_len"] == 256
    assert body["tokens"][0] == 1  # BOS
    st, no_bos = srv.json("POST", "/tokenize", {"prompt": "ROMEO:", "add_special_tokens": False})
    assert no_bos["tokens"] == body["tokens"][1:]
    st, back = srv.json("POST", "/detokenize", {"tokens": no_bos["tokens"]})
    assert st == 200 and back["prompt"].strip() == "ROMEO:"
    st, h, d = post(srv, "/detokenize", {"tokens": [1, 99999]})
    check_error(st, h, d, 400, param="tokens")


def test_malformed_json(srv):
    for bad in [b"{", b"not json " + MARK.encode(), b"[1,2]", b"", b'{"a":1} trailing',
                b'{"messages": "\\ud800"}']:
        st, h, d = post(srv, CHAT, bad, {"Content-Type": "application/json"})
        check_error(st, h, d, 400)


def test_invalid_utf8(srv):
    body = b'{"messages":[{"role":"user","content":"\xff\xfe' + MARK.encode() + b'"}]}'
    st, h, d = post(srv, CHAT, body)
    check_error(st, h, d, 400, code="invalid_encoding")


@pytest.mark.parametrize("path,field,value", [
    (CHAT, "messages", "hi"),
    (CHAT, "messages", []),
    (CHAT, "temperature", "hot"),
    (CHAT, "temperature", 3),
    (CHAT, "top_p", 0),
    (CHAT, "top_k", 1.5),
    (CHAT, "max_tokens", -1),
    (CHAT, "max_tokens", "10"),
    (CHAT, "max_completion_tokens", 0),
    (CHAT, "n", 0),
    (CHAT, "n", 5),
    (CHAT, "stream", "yes"),
    (CHAT, "seed", 1.5),
    (CHAT, "stop", 5),
    (CHAT, "stop", ["a", "b", "c", "d", "e"]),
    (CHAT, "logit_bias", {"99999": 1}),
    (CHAT, "logit_bias", {"5": 1000}),
    (CHAT, "logit_bias", [1]),
    (CHAT, "presence_penalty", 9),
    (CHAT, "logprobs", 1),
    (CHAT, "top_logprobs", 25),
    (CHAT, "model", 5),
    (CHAT, "tools", {"a": 1}),
    (CHAT, "response_format", {"type": "json_schema"}),
    (CHAT, "chat_template", "{{ x }}"),
    (COMP, "prompt", 5),
    (COMP, "prompt", []),
    (COMP, "prompt", [1, 99999]),
    (COMP, "prompt", [[1, 2], "x"]),
    (COMP, "logprobs", 50),
    (COMP, "echo", "true"),
    (COMP, "suffix", "tail"),
    (COMP, "best_of", 3),
    (COMP, "user", 7),
])
def test_bad_field(srv, path, field, value):
    body = {"model": "shakespeare-target", "max_tokens": 4}
    body["messages" if path == CHAT else "prompt"] = [{"role": "user", "content": "hi"}] if path == CHAT else "hi"
    body[field] = value
    st, h, d = post(srv, path, body)
    err = check_error(st, h, d, 400)
    assert err["param"] == field, err


def test_bad_message_fields(srv):
    cases = [
        ([{"content": "hi"}], "messages[0].role"),
        ([{"role": 5, "content": "hi"}], "messages[0].role"),
        ([{"role": "user", "content": 5}], "messages[0].content"),
        ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
         "messages[0].content[0].type"),
        ([{"role": "user", "content": [{"type": "text"}]}], "messages[0].content[0].text"),
        (["hi"], "messages[0]"),
    ]
    for msgs, param in cases:
        st, h, d = post(srv, CHAT, {"messages": msgs})
        check_error(st, h, d, 400, param=param)


def test_unknown_fields_ignored(srv):
    st, h, d = post(srv, CHAT, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                                "frobnicate": {"x": 1}, "user": "u1", "parallel_tool_calls": True})
    assert st == 200, d


def test_context_length(srv):
    long_prompt = "ROMEO: " * 400
    st, h, d = post(srv, COMP, {"prompt": long_prompt, "max_tokens": 4})
    err = check_error(st, h, d, 400, code="context_length_exceeded")
    assert "256" in err["message"]
    # max_tokens past the context is clamped by default
    st, h, d = post(srv, COMP, {"prompt": "ROMEO:", "max_tokens": 100000, "ignore_eos": True})
    assert st == 200, d
    body = json.loads(d)
    assert body["usage"]["total_tokens"] <= 256 and body["choices"][0]["finish_reason"] == "length"


def test_context_length_reject_policy():
    s = Server("--max-tokens-policy", "reject")
    try:
        st, h, d = post(s, COMP, {"prompt": "ROMEO:", "max_tokens": 1000})
        err = check_error(st, h, d, 400, code="context_length_exceeded", param="max_tokens")
        assert "1000" in err["message"] and "256" in err["message"]
    finally:
        assert s.stop() == 0


def test_oversized_body(srv):
    big = json.dumps({"prompt": "x" * 70000, "max_tokens": 1}).encode()
    st, h, d = post(srv, COMP, big)
    check_error(st, h, d, 413)
    # chunked upload without Content-Length: refused after reading
    c = srv.connection()
    c.putrequest("POST", COMP)
    c.putheader("Transfer-Encoding", "chunked")
    c.putheader("Content-Type", "application/json")
    c.endheaders()
    for i in range(0, len(big), 8192):
        part = big[i:i + 8192]
        c.send(b"%x\r\n" % len(part) + part + b"\r\n")
    c.send(b"0\r\n\r\n")
    r = c.getresponse()
    data = r.read()
    check_error(r.status, {k.lower(): v for k, v in r.getheaders()}, data, 413)
    c.close()


def test_unknown_route_and_model(srv):
    st, h, d = srv.request("GET", "/v1/nothing-here-" + MARK)
    check_error(st, h, d, 404)
    st, h, d = post(srv, CHAT, {"model": "gpt-" + MARK, "messages": [{"role": "user", "content": "hi"}]})
    check_error(st, h, d, 404, code="model_not_found", param="model")
    st, h, d = srv.request("GET", "/v1/models/" + MARK)
    check_error(st, h, d, 404, code="model_not_found")


def test_method_not_allowed(srv):
    st, h, d = srv.request("GET", CHAT)
    check_error(st, h, d, 405)
    assert h["allow"] == "POST"
    st, h, d = srv.request("DELETE", "/v1/models")
    check_error(st, h, d, 405)


def test_api_key(keyed):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    st, h, d = post(keyed, CHAT, body)
    check_error(st, h, d, 401)
    st, h, d = post(keyed, CHAT, body, {"Authorization": "Bearer wrong-" + MARK})
    check_error(st, h, d, 401)
    st, h, d = post(keyed, CHAT, body, {"Authorization": "Bearer " + SECRET[:-1]})
    check_error(st, h, d, 401)
    st, h, d = post(keyed, CHAT, body, {"Authorization": "Bearer " + SECRET})
    assert st == 200, d
    for path in ["/v1/models", "/metrics"]:
        st, h, d = keyed.request("GET", path)
        check_error(st, h, d, 401)
    for path in ["/health", "/health/ready"]:
        st, _, _ = keyed.request("GET", path)
        assert st == 200


def test_api_key_file_and_env(tmp_path):
    kf = tmp_path / "keys"
    kf.write_text("# keys\nkey-one\n  key-two  \n")
    s = Server("--api-key-file", str(kf), env={"INFERD_MAX_N": "2"})
    try:
        for k in ["key-one", "key-two"]:
            st, _, d = s.request("GET", "/v1/models", headers={"Authorization": "Bearer " + k})
            assert st == 200, d
        st, h, d = post(s, CHAT, {"messages": [{"role": "user", "content": "hi"}], "n": 3},
                        {"Authorization": "Bearer key-one"})
        check_error(st, h, d, 400, param="n")  # INFERD_MAX_N=2 took effect
    finally:
        assert s.stop() == 0


def test_config_file(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"served_model_name": "bard,poet", "max_n": 3}))
    s = Server("--config", str(cfg))
    try:
        st, body = s.json("GET", "/v1/models")
        assert [m["id"] for m in body["data"]] == ["bard", "poet"]
        st, h, d = post(s, CHAT, {"model": "poet", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert st == 200, d
        assert json.loads(d)["model"] == "poet"  # the name the client asked for
        eff = [l for l in s.log_lines() if l.get("msg") == "effective configuration"]
        assert eff and eff[0]["config"]["max-n"] == 3
    finally:
        assert s.stop() == 0


def test_http_garbage_does_not_kill_server(srv):
    with socket.create_connection((srv.host, srv.port), timeout=5) as sk:
        sk.sendall(b"\x00\x01garbage\r\n\r\n")
        try:
            sk.recv(4096)
        except OSError:
            pass
    st, _, _ = srv.request("GET", "/health")
    assert st == 200


def test_request_log_line(srv):
    post(srv, COMP, {"prompt": "ROMEO:", "max_tokens": 3}, {"X-Request-Id": "log-check-1"})
    import time
    for _ in range(50):
        lines = [l for l in srv.log_lines() if l.get("request_id") == "log-check-1"]
        if lines:
            break
        time.sleep(0.05)
    (l,) = lines
    assert l["status"] == 200 and l["completion_tokens"] <= 3 and l["finish_reason"] in ("stop", "length")
    for k in ("ttft_s", "queue_s", "total_s", "prompt_tokens"):
        assert k in l
    assert "prompt" not in l  # prompts are not logged by default

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
    (CHAT, "response_format", "json"),
    (CHAT, "grammar", 5),
    (CHAT, "guided_choice", []),
    (CHAT, "tool_choice", "always"),
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


# ---- request hardening: exact integers, strict JSON, OpenAI's validation -------------

def sampled_text(s, seed: str) -> str:
    """A sampled completion for a seed given as its JSON literal (exact, not via float)."""
    body = ('{"prompt":"ROMEO:","max_tokens":24,"temperature":1.5,"ignore_eos":true,"seed":%s}'
            % seed).encode()
    st, h, d = post(s, COMP, body, {"Content-Type": "application/json"})
    assert st == 200, d
    return json.loads(d)["choices"][0]["text"]


@pytest.mark.parametrize("a,b", [(2**53, 2**53 + 1), (2**63 - 1, 2**63 - 2), (-2**63, -2**63 + 1)])
def test_seed_is_exact_int64(srv, a, b):
    # neighbouring seeds are the same double; as int64 they are different seeds
    ta = sampled_text(srv, str(a))
    assert sampled_text(srv, str(a)) == ta  # a seed reproduces
    assert sampled_text(srv, str(b)) != ta, (a, b)


@pytest.mark.parametrize("seed", ["9223372036854775808", "-9223372036854775809", "18446744073709551615",
                                  "1e19", "9.2233720368547759e18"])
def test_seed_out_of_int64(srv, seed):
    body = ('{"prompt":"hi","max_tokens":1,"seed":%s}' % seed).encode()
    st, h, d = post(srv, COMP, body, {"Content-Type": "application/json"})
    check_error(st, h, d, 400, param="seed", code="invalid_value")


def test_integral_numbers_accepted(srv):
    # 1.0 and 1e1 are integers (pydantic's lax mode, which vLLM uses, agrees)
    body = b'{"prompt":"ROMEO:","max_tokens":2.0,"n":1e0,"seed":1e1}'
    st, h, d = post(srv, COMP, body, {"Content-Type": "application/json"})
    assert st == 200, d
    assert json.loads(d)["usage"]["completion_tokens"] <= 2
    body = b'{"prompt":"ROMEO:","max_tokens":1.0000000000000001}'  # == 1.0 as a double
    st, h, d = post(srv, COMP, body, {"Content-Type": "application/json"})
    check_error(st, h, d, 400, param="max_tokens", code="invalid_type")


@pytest.mark.parametrize("key", ["01", "+1", " 1", "1 ", "1.0", "1e2", "-0", ""])
def test_logit_bias_keys_are_plain_ids(srv, key):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "logit_bias": {key: 1}}
    st, h, d = post(srv, CHAT, body)
    check_error(st, h, d, 400, param="logit_bias", code="invalid_value")


@pytest.mark.parametrize("path,raw,param", [
    (CHAT, b'{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"max_tokens":3}', "max_tokens"),
    (CHAT, b'{"messages":[{"role":"user","content":"hi","content":"' + MARK.encode() + b'"}]}',
     "messages[0].content"),
    (COMP, b'{"prompt":"hi","logit_bias":{"5":1,"5":-1}}', "logit_bias"),
    (COMP, b'{"prompt":"hi","' + MARK.encode() + b'":1,"' + MARK.encode() + b'":2}', None),
    ("/tokenize", b'{"prompt":"a","prompt":"b"}', "prompt"),
])
def test_duplicate_keys_rejected(srv, path, raw, param):
    st, h, d = post(srv, path, raw, {"Content-Type": "application/json"})
    err = check_error(st, h, d, 400, code="duplicate_key")  # never echoes an unknown key (MARK)
    assert err["param"] == param, err


@pytest.mark.parametrize("path,raw,param", [
    (CHAT, b'{"messages":[{"role":"user","content":"hi\\u0000' + MARK.encode() + b'"}]}', "messages[0].content"),
    (COMP, b'{"prompt":["ok","x\\u0000y"]}', "prompt[1]"),
    ("/tokenize", b'{"prompt":"a\\u0000b"}', "prompt"),
])
def test_nul_character_rejected(srv, path, raw, param):
    # cJSON strings end at a NUL: the text after it would silently vanish
    st, h, d = post(srv, path, raw, {"Content-Type": "application/json"})
    check_error(st, h, d, 400, param=param, code="invalid_value")


@pytest.mark.parametrize("raw", [
    b'{"prompt":"hi","x":' + b"[" * 200 + b"]" * 200 + b"}",  # nesting
    b'{"prompt":"hi","x":01}',  # a leading zero
    b'{"prompt":"hi\x01"}',  # a raw control character
    b'{"prompt":"hi"}\x00',  # a NUL after the value
])
def test_strict_json(srv, raw):
    st, h, d = post(srv, COMP, raw, {"Content-Type": "application/json"})
    check_error(st, h, d, 400, code="invalid_json")


def test_json_error_position(srv):
    st, h, d = post(srv, COMP, b'{"prompt":"hi",\n  "max_tokens":1,}', {"Content-Type": "application/json"})
    err = check_error(st, h, d, 400, code="invalid_json")
    assert "line 2, column 18" in err["message"], err


@pytest.mark.parametrize("msgs,param,code", [
    ([{"role": "wizard", "content": "hi"}], "messages[0].role", "invalid_value"),
    ([{"role": "user", "content": "hi"}, {"role": "tool", "content": "r"}], "messages[1].tool_call_id",
     "missing_required_parameter"),
    ([{"role": "user"}], "messages[0].content", "missing_required_parameter"),
    ([{"role": "system", "content": None}, {"role": "user", "content": "hi"}], "messages[0].content", None),
    ([{"role": "developer"}, {"role": "user", "content": "hi"}], "messages[0].content", None),
    ([{"role": "function", "content": "r"}], "messages[0].name", "missing_required_parameter"),
])
def test_openai_message_rules(srv, msgs, param, code):
    st, h, d = post(srv, CHAT, {"messages": msgs, "max_tokens": 2})
    check_error(st, h, d, 400, param=param, code=code)


def test_developer_and_tool_roles_accepted(srv):
    msgs = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    st, h, d = post(srv, CHAT, {"messages": msgs, "max_tokens": 2})
    assert st == 200, d


@pytest.mark.parametrize("path", [CHAT, COMP])
def test_stream_options_needs_stream(srv, path):
    body = {"max_tokens": 2, "stream_options": {"include_usage": True}}
    body["messages" if path == CHAT else "prompt"] = [{"role": "user", "content": "hi"}] if path == CHAT else "hi"
    st, h, d = post(srv, path, body)
    check_error(st, h, d, 400, param="stream_options", code="invalid_value")
    body["stream_options"] = None  # null is "not given"
    st, h, d = post(srv, path, body)
    assert st == 200, d


@pytest.mark.parametrize("key", ["messages", "tools", "add_generation_prompt", "bos_token", "eos_token",
                                 "raise_exception"])
def test_chat_template_kwargs_cannot_override_context(srv, key):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
            "chat_template_kwargs": {"enable_thinking": False, key: "x"}}
    st, h, d = post(srv, CHAT, body)
    err = check_error(st, h, d, 400, param="chat_template_kwargs", code="invalid_value")
    assert key in err["message"]

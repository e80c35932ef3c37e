"""Structured outputs through the real server (issue 12): response_format json_object /
json_schema (the OpenAI SDK's chat.completions.parse with a pydantic model), the
grammar / guided_* extensions, forced tool calls (tool_choice required / named, in the
template's format, arguments following the schema), their streaming deltas against the
non-streamed result, the deprecated functions / function_call, n > 1, speculative
decoding under a grammar, and the 400s: unsupported JSON Schema keywords (named), bad
grammars and regexes, a tool_choice naming no tool.

The Shakespeare model knows nothing of JSON: whatever it writes under a grammar must
still validate, which is the point. Also run against the ASan build (scripts/test.sh)."""
from __future__ import annotations

import json

import pytest

from requires import require_module

openai = require_module("openai", "pip install -r requirements-dev.txt")
jsonschema = require_module("jsonschema", "pip install -r requirements-dev.txt")
pydantic = require_module("pydantic", "pip install -r requirements-dev.txt")

from server_util import MODEL, TEMPLATES, Server, sse_events  # noqa: E402

QWEN_TMPL = TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja"
DRAFT = MODEL.parent / "shakespeare-draft.gguf"

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
        "nick": {"anyOf": [{"type": "string", "maxLength": 8}, {"type": "null"}]},
        "home": {"$ref": "#/$defs/place"},
    },
    "required": ["name", "age", "tags", "home"],
    "additionalProperties": False,
    "$defs": {"place": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                                                          "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                        "required": ["city", "zip"], "additionalProperties": False}},
}

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                                        "unit": {"enum": ["celsius", "fahrenheit"]}},
                       "required": ["city", "unit"], "additionalProperties": False},
        "strict": True}},
    {"type": "function", "function": {
        "name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
                                                                       "b": {"type": "integer"}},
                                      "required": ["a", "b"], "additionalProperties": False}}},
]


@pytest.fixture(scope="module")
def srv():
    s = Server("--chat-template-file", str(QWEN_TMPL), "--max-model-len", "2048", "--served-model-name", "m")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0)


def post(srv, path, body):
    st, _, data = srv.request("POST", path, body)
    return st, json.loads(data)


def stream(srv, path, body):
    """The JSON chunks of a streamed request (until [DONE])."""
    c = srv.connection()
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.read()
    ev = sse_events(r)
    c.close()
    assert ev and ev[-1] == "[DONE]", ev[-3:]
    return [json.loads(e) for e in ev[:-1]]


# a schema short enough for the test model's 256-token context
SMALL = {"type": "object", "properties": {"who": {"type": "string", "maxLength": 10},
                                          "act": {"type": "integer", "minimum": 1, "maximum": 5},
                                          "dead": {"type": "boolean"}},
         "required": ["who", "act", "dead"], "additionalProperties": False}


def chat(srv, **kw):
    body = {"messages": [{"role": "user", "content": "Tell me about Romeo."}], "max_tokens": 400, **kw}
    st, d = post(srv, "/v1/chat/completions", body)
    assert st == 200, d
    return d


def test_json_object(srv):
    d = chat(srv, response_format={"type": "json_object"}, n=4, temperature=1.0, seed=11)
    for c in d["choices"]:
        assert c["finish_reason"] == "stop", c
        assert isinstance(json.loads(c["message"]["content"]), dict)


def test_json_schema_validates(srv):
    for seed in range(6):
        d = chat(srv, response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA,
                                                                               "strict": True}},
                 temperature=1.0, seed=seed)
        c = d["choices"][0]
        assert c["finish_reason"] == "stop", c
        jsonschema.validate(json.loads(c["message"]["content"]), SCHEMA)


def test_sdk_parse_pydantic(client):
    """The OpenAI SDK's structured-output helper: a pydantic model in, a parsed object out."""
    from typing import Literal, Optional

    class Place(pydantic.BaseModel):
        city: str = pydantic.Field(max_length=10)
        country: Literal["it", "fr", "uk"]

    class Person(pydantic.BaseModel):
        name: str = pydantic.Field(max_length=12)
        age: int = pydantic.Field(ge=0, le=120)
        alive: bool
        home: Place
        nickname: Optional[str] = pydantic.Field(max_length=8)

    for seed in (1, 2, 3):
        r = client.chat.completions.parse(model="m", messages=[{"role": "user", "content": "Who is Juliet?"}],
                                          response_format=Person, max_tokens=400, temperature=0.7, seed=seed)
        p = r.choices[0].message.parsed
        assert isinstance(p, Person), r
        assert 0 <= p.age <= 120


def test_greedy_schema_stream_equals_nonstream(srv):
    rf = {"type": "json_schema", "json_schema": {"name": "p", "schema": SMALL}}
    d = chat(srv, response_format=rf, temperature=0)
    text = d["choices"][0]["message"]["content"]
    assert d["choices"][0]["finish_reason"] == "stop", d
    chunks = stream(srv, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Tell me about Romeo."}],
                                                  "max_tokens": 400, "response_format": rf, "temperature": 0,
                                                  "stream": True})
    streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
    assert streamed == text
    jsonschema.validate(json.loads(text), SMALL)


def test_grammar_cache_metrics(srv):
    rf = {"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "object", "properties": {
        "metric_test": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["metric_test"],
        "additionalProperties": False}}}

    def counters():
        st, _, m = srv.request("GET", "/metrics")
        vals = {}
        for line in m.decode().splitlines():
            if line.startswith("inferd_grammar_"):
                k, v = line.split()
                vals[k] = int(v)
        return vals
    before = counters()
    for _ in range(3):
        chat(srv, response_format=rf, max_tokens=40)
    after = counters()
    assert after["inferd_grammar_compiles_total"] - before["inferd_grammar_compiles_total"] == 1
    assert after["inferd_grammar_cache_hits_total"] - before["inferd_grammar_cache_hits_total"] == 2


def test_guided_choice_regex_grammar(srv):
    d = chat(srv, guided_choice=["yes", "no", "maybe so"], n=6, temperature=1.0, seed=5)
    assert {c["message"]["content"] for c in d["choices"]} <= {"yes", "no", "maybe so"}
    d = chat(srv, guided_regex="[A-Z][a-z]{2,8} (loves|hates) [A-Z][a-z]{2,8}", temperature=0.9, seed=2)
    import re
    assert re.fullmatch(r"[A-Z][a-z]{2,8} (loves|hates) [A-Z][a-z]{2,8}", d["choices"][0]["message"]["content"])
    gbnf = 'root ::= "Act " [1-5] ", scene " [1-9] ": " name\nname ::= [A-Z] [a-z]{1,10}\n'
    st, d = post(srv, "/v1/completions", {"prompt": "ROMEO:", "max_tokens": 40, "grammar": gbnf, "temperature": 1.0,
                                          "seed": 9})
    assert st == 200, d
    assert re.fullmatch(r"Act [1-5], scene [1-9]: [A-Z][a-z]{1,10}", d["choices"][0]["text"]), d


def test_unsupported_and_bad(srv):
    base = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    cases = [
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "object", "patternProperties": {"^a": {"type": "string"}}}}}}, "patternProperties"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "string", "contentEncoding": "base64"}}}}, "contentEncoding"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}}}}, "missing"),
        ({"grammar": "root ::= undefined_rule"}, "undefined_rule"),
        ({"guided_regex": "(?=look)ahead"}, "look"),
        ({"response_format": {"type": "yaml"}}, "response_format"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"grammar": "root ::= \"a\"", "guided_regex": "a"}, "at most one"),
    ]
    for extra, needle in cases:
        st, d = post(srv, "/v1/chat/completions", {**base, **extra})
        assert st == 400, (extra, d)
        assert needle in d["error"]["message"] or needle == d["error"]["param"], d
    assert srv.request("GET", "/health")[0] == 200


def check_calls(msg, names):
    assert msg["content"] is None, msg
    calls = msg["tool_calls"]
    assert calls, msg
    for c in calls:
        assert c["type"] == "function" and c["id"].startswith("call_")
        assert c["function"]["name"] in names
        args = json.loads(c["function"]["arguments"])
        schema = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == c["function"]["name"])
        jsonschema.validate(args, schema)
    return calls


def test_tool_choice_required_and_named(srv):
    for seed in range(4):
        d = chat(srv, tools=TOOLS, tool_choice="required", temperature=1.0, seed=seed, parallel_tool_calls=False)
        c = d["choices"][0]
        check_calls(c["message"], {"get_weather", "add"})
        assert c["finish_reason"] in ("tool_calls", "length")
    for name in ("get_weather", "add"):
        for seed in range(3):
            d = chat(srv, tools=TOOLS, tool_choice={"type": "function", "function": {"name": name}},
                     temperature=1.0, seed=seed)
            check_calls(d["choices"][0]["message"], {name})


def collect_stream(chunks):
    """Content and tool calls from chat chunks, checking the deltas only append."""
    content, calls, finish = "", {}, None
    for ch in chunks:
        if not ch.get("choices"):
            continue
        c = ch["choices"][0]
        dl = c["delta"]
        if dl.get("content"):
            content += dl["content"]
        for t in dl.get("tool_calls") or []:
            assert "content" in dl and dl["content"] is None, dl
            i = t["index"]
            if i not in calls:
                assert t["id"].startswith("call_") and t["type"] == "function" and t["function"]["name"], t
                calls[i] = {"id": t["id"], "name": t["function"]["name"], "arguments": t["function"]["arguments"]}
            else:
                assert "id" not in t and "name" not in t["function"], t
                calls[i]["arguments"] += t["function"]["arguments"]
        if c["finish_reason"]:
            finish = c["finish_reason"]
    return content, [calls[i] for i in sorted(calls)], finish


def test_tool_call_stream_concatenates(srv):
    for seed in range(3):
        body = {"messages": [{"role": "user", "content": "weather"}], "max_tokens": 400, "tools": TOOLS,
                "tool_choice": "required", "temperature": 1.0, "seed": seed}
        d = chat(srv, **{k: v for k, v in body.items() if k not in ("messages", "max_tokens")},
                 messages=body["messages"])
        chunks = stream(srv, "/v1/chat/completions", {**body, "stream": True})
        content, calls, finish = collect_stream(chunks)
        msg = d["choices"][0]["message"]
        assert content == ""
        assert [(c["name"], c["arguments"]) for c in calls] == \
            [(c["function"]["name"], c["function"]["arguments"]) for c in msg["tool_calls"]]
        assert finish == d["choices"][0]["finish_reason"]
        assert len(chunks) > 4  # the arguments came in fragments, not in one piece


def test_legacy_functions(srv):
    fns = [t["function"] for t in TOOLS]
    d = chat(srv, functions=fns, function_call={"name": "add"}, temperature=0.8, seed=1)
    c = d["choices"][0]
    fc = c["message"]["function_call"]
    assert fc["name"] == "add" and set(json.loads(fc["arguments"])) == {"a", "b"}
    assert c["finish_reason"] == "function_call"
    st, d = post(srv, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "functions": fns,
                                               "tools": TOOLS})
    assert st == 400


def test_sdk_tools(client):
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "weather in Rome"}],
                                       tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                       max_tokens=300, temperature=0.5, seed=4)
    tc = r.choices[0].message.tool_calls[0]
    assert tc.function.name == "get_weather"
    json.loads(tc.function.arguments)
    # streamed through the SDK's accumulating helper
    with client.chat.completions.stream(model="m", messages=[{"role": "user", "content": "add 2 and 3"}], tools=TOOLS,
                                        tool_choice="required", parallel_tool_calls=False, max_tokens=300,
                                        temperature=0.5, seed=4) as s:
        final = s.get_final_completion()
    assert final.choices[0].message.tool_calls[0].function.name in ("get_weather", "add")


def test_speculative_under_grammar():
    """Drafts cut where they break the grammar, verification constrained: greedy output under a schema is the
    same with and without speculation, and valid."""
    rf = {"type": "json_schema", "json_schema": {"name": "p", "schema": SMALL}}
    outs = []
    for args in ([], ["--draft-model", str(DRAFT), "--num-speculative-tokens", "4", "--no-speculative-adaptive"],
                 ["--speculative-ngram", "--num-speculative-tokens", "4", "--no-speculative-adaptive"]):
        s = Server("--chat-template-file", str(QWEN_TMPL), *args)
        try:
            texts = []
            for prompt in ("Tell me about Romeo.", "Who is Tybalt?"):
                st, d = post(s, "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}],
                                                         "max_tokens": 300, "temperature": 0, "response_format": rf})
                assert st == 200, d
                texts.append(d["choices"][0]["message"]["content"])
            outs.append(texts)
            if args:
                st, _, m = s.request("GET", "/metrics")
                assert b"inferd_spec_decode_num_draft_tokens_total" in m
        finally:
            assert s.stop() == 0
    assert outs[0] == outs[1] == outs[2]
    for t in outs[0]:
        jsonschema.validate(json.loads(t), SMALL)


# ---- small shapes the same clients trip on ---------------------------------------------------

def test_shapes(srv, client):
    # the sampled token is inside the legacy top_logprobs
    st, d = post(srv, "/v1/completions", {"prompt": "ROMEO:", "max_tokens": 12, "logprobs": 2, "temperature": 1.0,
                                          "seed": 3})
    assert st == 200, d
    lp = d["choices"][0]["logprobs"]
    for tok, top in zip(lp["tokens"], lp["top_logprobs"]):
        assert tok in top, (tok, top)
    assert d["system_fingerprint"].startswith("fp_")
    # the end token is not a content logprob; system_fingerprint in bodies and chunks
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=60,
                                       logprobs=True, top_logprobs=2, extra_body={"guided_choice": ["yes", "no"]})
    c = r.choices[0]
    assert c.finish_reason == "stop"
    assert "".join(t.token for t in c.logprobs.content) == c.message.content
    assert r.system_fingerprint and r.system_fingerprint.startswith("fp_")
    # a stop token id ends it: not a content logprob either
    st, tk = post(srv, "/tokenize", {"prompt": "\n", "add_special_tokens": False})
    nl = tk["tokens"][-1]
    st, d = post(srv, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100,
                                               "logprobs": True, "stop_token_ids": [nl], "seed": 1})
    c = d["choices"][0]
    assert c["finish_reason"] == "stop" and d["usage"]["completion_tokens"] == len(c["logprobs"]["content"]) + 1, d
    chunks = stream(srv, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                                                  "stream": True})
    assert all(ch["system_fingerprint"] == r.system_fingerprint for ch in chunks)
    # endpoints inferd does not serve: a 404 that says so
    st, _, body = srv.request("POST", "/v1/embeddings", {"model": "m", "input": "hi"})
    err = json.loads(body)["error"]
    assert st == 404 and err["code"] == "unsupported_endpoint" and "embeddings" in err["message"]

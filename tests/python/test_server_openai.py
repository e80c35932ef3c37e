"""`inferd serve` through the official openai package: chat and completions, sync and
async, streaming and not, n, stop, seed reproducibility, logprobs, include_usage,
tools (with a template that supports them). Real server on 127.0.0.1."""
from __future__ import annotations

import asyncio
import json

import pytest

from requires import require_module  # noqa: E402

openai = require_module("openai", "pip install -r requirements-dev.txt")

from server_util import TEMPLATES, Server  # noqa: E402

MODEL = "shakespeare-target"


@pytest.fixture(scope="module")
def srv():
    s = Server()
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def qwen_srv():
    """The same model with a chat template that knows tools (Hermes-style <tool_call>)."""
    s = Server("--chat-template-file", str(TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja"),
               "--served-model-name", "qwen-tmpl", "--max-model-len", "1024",
               "--allow-request-chat-template")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0)


MSGS = [{"role": "system", "content": "You are a poet."},
        {"role": "user", "content": "Speak of the moon."}]


def test_models(client):
    ids = [m.id for m in client.models.list().data]
    assert MODEL in ids


def test_chat_basic(client):
    r = client.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=12, temperature=0)
    c = r.choices[0]
    assert c.message.role == "assistant"
    assert isinstance(c.message.content, str) and c.message.content
    assert c.finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 12
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")


def test_chat_content_parts(client):
    parts = [{"type": "text", "text": "Speak of"}, {"type": "text", "text": "the moon."}]
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": parts}],
                                       max_completion_tokens=5, temperature=0)
    assert r.usage.completion_tokens <= 5


def test_completion_basic(client):
    r = client.completions.create(model=MODEL, prompt="ROMEO:", max_tokens=16, temperature=0)
    assert r.object == "text_completion"
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens >= 2


def test_completion_prompt_forms(client):
    a = client.completions.create(model=MODEL, prompt="ROMEO:", max_tokens=8, temperature=0)
    b = client.completions.create(model=MODEL, prompt=["ROMEO:", "JULIET:"], max_tokens=8, temperature=0)
    assert [c.index for c in b.choices] == [0, 1]
    assert b.choices[0].text == a.choices[0].text
    c = client.completions.create(model=MODEL, prompt=[1, 100, 200], max_tokens=4, temperature=0)
    assert c.usage.prompt_tokens == 3
    d = client.completions.create(model=MODEL, prompt=[[1, 100], [1, 200, 300]], max_tokens=4, temperature=0)
    assert len(d.choices) == 2 and d.usage.prompt_tokens == 5


def test_echo(client):
    r = client.completions.create(model=MODEL, prompt="ROMEO:", max_tokens=6, temperature=0, echo=True)
    assert r.choices[0].text.startswith("ROMEO:")


def test_n2_and_seed_reproducible(client):
    kw = dict(model=MODEL, messages=MSGS, max_tokens=16, temperature=1.0, n=2, seed=1234)
    a = client.chat.completions.create(**kw)
    b = client.chat.completions.create(**kw)
    assert len(a.choices) == 2
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]
    c = client.chat.completions.create(**{**kw, "seed": 99})
    assert [x.message.content for x in c.choices] != [x.message.content for x in a.choices]


def test_stop(client):
    base = client.completions.create(model=MODEL, prompt="ROMEO:", max_tokens=40, temperature=0)
    text = base.choices[0].text
    assert len(text) > 6
    stop = text[3:6]
    r = client.completions.create(model=MODEL, prompt="ROMEO:", max_tokens=40, temperature=0, stop=[stop, "zzzz"])
    assert r.choices[0].finish_reason == "stop"
    assert stop not in r.choices[0].text
    assert text.startswith(r.choices[0].text)


def test_stream_equals_nonstream_chat(client):
    kw = dict(model=MODEL, messages=MSGS, max_tokens=40, temperature=0.9, seed=7, n=2)
    full = client.chat.completions.create(**kw)
    texts, finish, roles = ["", ""], [None, None], [0, 0]
    first = {}
    for ch in client.chat.completions.create(**kw, stream=True):
        assert ch.object == "chat.completion.chunk"
        for c in ch.choices:
            if c.index not in first:
                first[c.index] = c.delta
            if c.delta.role:
                roles[c.index] += 1
            assert finish[c.index] is None, "content after finish_reason"
            texts[c.index] += c.delta.content or ""
            if c.finish_reason:
                finish[c.index] = c.finish_reason
    for i in range(2):
        assert first[i].role == "assistant" and first[i].content == ""
        assert roles[i] == 1
        assert texts[i] == full.choices[i].message.content
        assert finish[i] == full.choices[i].finish_reason


def test_stream_equals_nonstream_completion(client):
    kw = dict(model=MODEL, prompt="JULIET:", max_tokens=40, temperature=0.8, seed=11)
    full = client.completions.create(**kw)
    text, fr = "", None
    for ch in client.completions.create(**kw, stream=True):
        for c in ch.choices:
            text += c.text
            fr = c.finish_reason or fr
    assert text == full.choices[0].text and fr == full.choices[0].finish_reason


def test_include_usage(client):
    chunks = list(client.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=8, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens <= 8
    assert all(c.usage is None for c in chunks[:-1])
    assert chunks[-2].choices[0].finish_reason is not None


def test_logprobs_chat(client):
    r = client.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=6, logprobs=True, top_logprobs=3,
                                       temperature=0)
    lp = r.choices[0].logprobs.content
    assert len(lp) == r.usage.completion_tokens
    for t in lp:
        assert t.logprob <= 0 and len(t.top_logprobs) == 3
        assert isinstance(t.bytes, list)
        # greedy: the chosen token is the most likely one
        assert t.logprob >= max(x.logprob for x in t.top_logprobs) - 1e-4
    # streamed logprobs too
    n = 0
    for ch in client.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=6, logprobs=True,
                                             top_logprobs=2, temperature=0, stream=True):
        for c in ch.choices:
            if c.logprobs and c.logprobs.content:
                n += len(c.logprobs.content)
                assert all(len(t.top_logprobs) == 2 for t in c.logprobs.content)
    assert n == len(lp)


def test_logprobs_completion(client):
    r = client.completions.create(model=MODEL, prompt="ROMEO:", max_tokens=6, logprobs=2, temperature=0)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
    assert len(lp.tokens) == r.usage.completion_tokens
    assert all(len(d) <= 2 for d in lp.top_logprobs)
    streamed = []
    for ch in client.completions.create(model=MODEL, prompt="ROMEO:", max_tokens=6, logprobs=2,
                                        temperature=0, stream=True):
        for c in ch.choices:
            if c.logprobs:
                streamed += c.logprobs.tokens
    assert streamed == lp.tokens


def test_async_clients(srv):
    async def main():
        ac = openai.AsyncOpenAI(base_url=srv.base_url, api_key="unused", max_retries=0)
        a = ac.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=8, seed=1)
        b = ac.completions.create(model=MODEL, prompt="ROMEO:", max_tokens=8, seed=1)

        async def stream():
            s = await ac.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=8, seed=1, stream=True)
            return "".join([c.choices[0].delta.content or "" async for c in s if c.choices])
        ra, rb, rs = await asyncio.gather(a, b, stream())
        await ac.close()
        return ra, rb, rs
    ra, rb, rs = asyncio.run(main())
    assert ra.choices[0].message.content == rs
    assert rb.choices[0].text is not None


def test_api_errors_through_sdk(client):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=MSGS, max_tokens=4)
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=4, temperature=5)
    assert ei.value.body["param"] == "temperature"


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def test_tools_round_trip(qwen_srv):
    """The conversation of a tool round trip (assistant tool_calls with JSON-string
    arguments, a tool result) renders through a template with tool support, and the
    response has the chat shape. Whether this tiny model emits a call is up to it; the
    parser is unit-tested in C (test_server_units)."""
    c = openai.OpenAI(base_url=qwen_srv.base_url, api_key="unused", max_retries=0)
    msgs = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    r = c.chat.completions.create(model="qwen-tmpl", messages=msgs, tools=TOOLS, max_tokens=16, temperature=0)
    ch = r.choices[0]
    assert ch.finish_reason in ("stop", "length", "tool_calls")
    if ch.finish_reason == "tool_calls":
        assert ch.message.tool_calls[0].type == "function"
        json.loads(ch.message.tool_calls[0].function.arguments)
    # the template saw the tools and the call: check the rendered prompt via /tokenize
    st, body = qwen_srv.json("POST", "/tokenize", {"messages": msgs, "tools": TOOLS})
    assert st == 200, body
    st, back = qwen_srv.json("POST", "/detokenize", {"tokens": body["tokens"]})
    assert st == 200, back
    rendered = back["prompt"]
    assert "get_weather" in rendered and "Paris" in rendered and "<tool_call>" in rendered
    # streaming with tools: the chunks have the stream shape and end with a finish_reason
    frs = [ch.choices[0].finish_reason for ch in c.chat.completions.create(
        model="qwen-tmpl", messages=msgs, tools=TOOLS, max_tokens=16, temperature=0, stream=True) if ch.choices]
    assert frs[-1] in ("stop", "length", "tool_calls")
    # a tool_choice naming no tool is a 400 naming the field
    with pytest.raises(openai.BadRequestError) as ei:
        c.chat.completions.create(model="qwen-tmpl", messages=msgs, tools=TOOLS, max_tokens=4,
                                  tool_choice={"type": "function", "function": {"name": "get_wether"}})
    assert ei.value.body["param"] == "tool_choice"


def test_template_raise_is_400(qwen_srv):
    """A template's raise_exception reaches the client as a 400 with its message."""
    st, body = qwen_srv.json("POST", "/v1/chat/completions",
                             {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                              "chat_template": "{{ raise_exception('nope') }}"})
    assert st == 400 and body["error"]["param"] == "chat_template"
    assert body["error"]["message"] == "nope"

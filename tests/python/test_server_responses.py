"""`inferd serve`'s POST /v1/responses (the OpenAI Responses API) through the official
openai package and raw HTTP: plain, instructions, item lists, streaming (the exact event
order, sequence numbers, ids that agree with the final object), previous_response_id,
GET / DELETE /v1/responses/{id}, tools, and hostile bodies. Real server on 127.0.0.1.

The Responses request is translated into a chat request, so the prompt it runs is the
chat prompt of the equivalent messages: usage.input_tokens is checked against /tokenize
of those messages, and greedy text against /v1/chat/completions."""
from __future__ import annotations

import json
import re
import socket
import time

import pytest

from requires import require_module  # noqa: E402

openai = require_module("openai", "pip install -r requirements-dev.txt")

from server_util import TEMPLATES, Server  # noqa: E402

MODEL = "shakespeare-target"


@pytest.fixture(scope="module")
def srv():
    s = Server("--responses-store-max", "8")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def qwen_srv():
    """The same model with a chat template that knows tools (Hermes-style <tool_call>)."""
    s = Server("--chat-template-file", str(TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja"),
               "--served-model-name", "qwen-tmpl", "--max-model-len", "1024")
    yield s
    assert s.stop() == 0


def prompt_tokens(s: Server, messages, tools=None) -> int:
    """The token count of the chat prompt of these messages (what the server runs)."""
    body = {"messages": messages}
    if tools:
        body["tools"] = tools
    st, r = s.json("POST", "/tokenize", body)
    assert st == 200, r
    return r["count"]


def check_usage(r, max_out=None):
    u = r.usage
    assert u.total_tokens == u.input_tokens + u.output_tokens
    assert u.input_tokens_details.cached_tokens >= 0
    assert u.output_tokens_details.reasoning_tokens == 0
    if max_out is not None:
        assert u.output_tokens <= max_out


def message_text(r) -> str:
    msgs = [o for o in r.output if o.type == "message"]
    assert len(msgs) <= 1
    return "".join(c.text for m in msgs for c in m.content if c.type == "output_text")


# ---- plain requests ------------------------------------------------------------------


def test_plain_string_input(srv, client):
    r = client.responses.create(model=MODEL, input="ROMEO:", max_output_tokens=12, temperature=0)
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.status in ("completed", "incomplete")
    assert r.output_text and r.output_text == message_text(r)
    msg = r.output[0]
    assert msg.type == "message" and msg.role == "assistant" and msg.id.startswith("msg_")
    assert msg.content[0].annotations == []
    check_usage(r, 12)
    msgs = [{"role": "user", "content": "ROMEO:"}]
    assert r.usage.input_tokens == prompt_tokens(srv, msgs)
    # the same prompt through the chat API: the same greedy text and token counts
    c = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=12, temperature=0)
    assert c.choices[0].message.content == r.output_text
    assert c.usage.prompt_tokens == r.usage.input_tokens
    assert c.usage.completion_tokens == r.usage.output_tokens
    if r.status == "incomplete":
        assert r.incomplete_details.reason == "max_output_tokens" and r.usage.output_tokens == 12
    else:
        assert r.incomplete_details is None
    # echoed request fields
    assert r.max_output_tokens == 12 and r.temperature == 0 and r.tool_choice == "auto"
    assert r.tools == [] and r.parallel_tool_calls is True and r.previous_response_id is None
    assert r.text.format.type == "text" and r.error is None and r.metadata == {}


def test_instructions(srv, client):
    r = client.responses.create(model=MODEL, instructions="You are a poet.", input="Speak of the moon.",
                                max_output_tokens=10, temperature=0, metadata={"k": "v"}, user="u1")
    assert r.instructions == "You are a poet." and r.metadata == {"k": "v"} and r.user == "u1"
    msgs = [{"role": "system", "content": "You are a poet."}, {"role": "user", "content": "Speak of the moon."}]
    assert r.usage.input_tokens == prompt_tokens(srv, msgs)
    c = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=10, temperature=0)
    assert c.choices[0].message.content == r.output_text


def test_item_list(srv, client):
    items = [
        {"role": "developer", "content": "Speak in verse."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Who art thou?"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "A humble friar."}]},
        {"role": "user", "content": [{"type": "input_text", "text": "Speak"}, {"type": "input_text", "text": "more."}]},
    ]
    r = client.responses.create(model=MODEL, input=items, max_output_tokens=8, temperature=0)
    check_usage(r, 8)
    # developer -> system; content parts joined as the chat path joins them
    msgs = [{"role": "system", "content": "Speak in verse."},
            {"role": "user", "content": "Who art thou?"},
            {"role": "assistant", "content": "A humble friar."},
            {"role": "user", "content": [{"type": "text", "text": "Speak"}, {"type": "text", "text": "more."}]}]
    assert r.usage.input_tokens == prompt_tokens(srv, msgs)


def test_seeded_sampling_reproducible(client):
    kw = dict(model=MODEL, input="JULIET:", max_output_tokens=16, temperature=1.0, extra_body={"seed": 1234})
    a = client.responses.create(**kw)
    b = client.responses.create(**kw)
    assert a.output_text == b.output_text
    assert a.id != b.id


# ---- streaming -----------------------------------------------------------------------

ORDER = re.compile(
    r"^response\.created response\.in_progress "
    r"(response\.output_item\.added "
    r"(response\.content_part\.added (response\.output_text\.delta )*response\.output_text\.done "
    r"response\.content_part\.done |"
    r"(response\.function_call_arguments\.delta )*response\.function_call_arguments\.done )"
    r"response\.output_item\.done )*"
    r"response\.(completed|incomplete)$")


def check_stream(events):
    """The event order, sequence numbers and ids of a finished stream; returns the final
    response object (from response.completed / .incomplete)."""
    types = [e.type for e in events]
    assert ORDER.match(" ".join(types)), types
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    assert final.status == ("completed" if types[-1] == "response.completed" else "incomplete")
    assert events[0].response.id == events[1].response.id == final.id
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    # every item: its events carry its id and index, and agree with the final object
    items = {}
    for e in events:
        if e.type == "response.output_item.added":
            assert e.output_index == len(items)
            items[e.output_index] = {"id": e.item.id, "type": e.item.type, "deltas": [], "done": None}
        elif e.type in ("response.content_part.added", "response.output_text.delta", "response.output_text.done",
                        "response.content_part.done", "response.function_call_arguments.delta",
                        "response.function_call_arguments.done"):
            it = items[e.output_index]
            assert e.item_id == it["id"]
            if "output_text" in e.type or "content_part" in e.type:
                assert e.content_index == 0
            if e.type.endswith(".delta"):
                it["deltas"].append(e.delta)
            if e.type == "response.output_text.done":
                assert "".join(it["deltas"]) == e.text
            if e.type == "response.function_call_arguments.done":
                assert "".join(it["deltas"]) == e.arguments
        elif e.type == "response.output_item.done":
            it = items[e.output_index]
            assert e.item.id == it["id"]
            it["done"] = e.item
    assert len(final.output) == len(items)
    for i, out in enumerate(final.output):
        assert out.id == items[i]["id"] and out.type == items[i]["type"]
        assert out.model_dump() == items[i]["done"].model_dump()
        if out.type == "message":
            assert "".join(items[i]["deltas"]) == out.content[0].text
    return final


def test_stream(client):
    kw = dict(model=MODEL, input="ROMEO:", max_output_tokens=24, temperature=0, instructions="Be brief.")
    full = client.responses.create(**kw)
    events = list(client.responses.create(**kw, stream=True))
    final = check_stream(events)
    assert final.output_text == full.output_text
    assert final.usage.input_tokens == full.usage.input_tokens
    assert final.usage.output_tokens == full.usage.output_tokens
    assert final.status == full.status and final.id != full.id
    # (that deltas go out as they are produced: test_disconnect_mid_stream_aborts reads
    # several before the end, on a server slow enough to tell)


def test_stream_raw_sse(srv):
    """event: lines name the data's type; no [DONE]; the stream is text/event-stream."""
    c = srv.connection()
    body = json.dumps({"input": "ROMEO:", "max_output_tokens": 6, "stream": True})
    c.request("POST", "/v1/responses", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200 and r.getheader("content-type").startswith("text/event-stream")
    raw = r.read().decode()
    c.close()
    assert "[DONE]" not in raw
    blocks = [b for b in raw.split("\n\n") if b.strip() and not b.startswith(":")]
    for b in blocks:
        lines = b.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: ")
        assert json.loads(lines[1][6:])["type"] == lines[0][7:]


def test_stream_sdk_helper(client):
    """The SDK's stream helper (responses.stream) assembles the same response. (It wants
    response.completed: a stop string ends the text before max_output_tokens.)"""
    kw = dict(model=MODEL, input="ROMEO:", max_output_tokens=40, temperature=0, extra_body={"stop": [" "]})
    full = client.responses.create(**kw)
    with client.responses.stream(**kw) as s:
        text = "".join(e.delta for e in s if e.type == "response.output_text.delta")
        final = s.get_final_response()
    assert text == final.output_text == full.output_text
    assert final.status == full.status == "completed" and final.incomplete_details is None


# ---- previous_response_id and the store ------------------------------------------------


def test_previous_response_id(srv, client):
    r1 = client.responses.create(model=MODEL, input="ROMEO:", instructions="Be brief.", max_output_tokens=6,
                                 temperature=0)
    r2 = client.responses.create(model=MODEL, input="JULIET:", previous_response_id=r1.id, max_output_tokens=6,
                                 temperature=0)
    assert r2.previous_response_id == r1.id
    # the prompt holds the first exchange (without the first request's instructions)
    msgs = [{"role": "user", "content": "ROMEO:"}, {"role": "assistant", "content": r1.output_text},
            {"role": "user", "content": "JULIET:"}]
    assert r2.usage.input_tokens == prompt_tokens(srv, msgs)
    assert r2.usage.input_tokens > r1.usage.input_tokens + r1.usage.output_tokens - 4
    # a chain of three, with new instructions on the third
    r3 = client.responses.create(model=MODEL, input=[{"role": "user", "content": "Speak."}],
                                 previous_response_id=r2.id, instructions="Rhyme.", max_output_tokens=4,
                                 temperature=0)
    msgs3 = [{"role": "system", "content": "Rhyme."}, *msgs, {"role": "assistant", "content": r2.output_text},
             {"role": "user", "content": "Speak."}]
    assert r3.usage.input_tokens == prompt_tokens(srv, msgs3)


def test_previous_response_id_streamed(srv, client):
    """A streamed response is stored too, with the ids of its stream."""
    events = list(client.responses.create(model=MODEL, input="ROMEO:", max_output_tokens=5, temperature=0,
                                          stream=True))
    final = check_stream(events)
    got = client.responses.retrieve(final.id)
    assert got.model_dump() == final.model_dump()
    r2 = client.responses.create(model=MODEL, input="JULIET:", previous_response_id=final.id, max_output_tokens=3)
    msgs = [{"role": "user", "content": "ROMEO:"}, {"role": "assistant", "content": final.output_text},
            {"role": "user", "content": "JULIET:"}]
    assert r2.usage.input_tokens == prompt_tokens(srv, msgs)


def test_unknown_previous_response_id(client):
    with pytest.raises(openai.NotFoundError) as ei:
        client.responses.create(model=MODEL, input="hi", previous_response_id="resp_doesnotexist")
    err = ei.value.body
    assert err["code"] == "previous_response_not_found" and err["param"] == "previous_response_id"
    assert err["type"] == "invalid_request_error"
    assert err["message"] == "Previous response with id 'resp_doesnotexist' not found."


def test_retrieve_and_delete(client):
    r = client.responses.create(model=MODEL, input="ROMEO:", max_output_tokens=4, metadata={"a": "b"})
    got = client.responses.retrieve(r.id)
    assert got.model_dump() == r.model_dump()
    d = client.responses.delete(r.id)
    assert d is None or getattr(d, "deleted", True)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=MODEL, input="hi", previous_response_id=r.id)


def test_store_false(client):
    r = client.responses.create(model=MODEL, input="ROMEO:", max_output_tokens=4, store=False)
    assert r.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=MODEL, input="hi", previous_response_id=r.id)


def test_store_is_bounded(client):
    """--responses-store-max 8: the least recently used go first."""
    first = client.responses.create(model=MODEL, input="ROMEO:", max_output_tokens=1)
    keep = client.responses.create(model=MODEL, input="ROMEO:", max_output_tokens=1)
    for _ in range(7):
        client.responses.retrieve(keep.id)  # keep it recently used
        client.responses.create(model=MODEL, input="ROMEO:", max_output_tokens=1)
    client.responses.retrieve(keep.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)


def test_store_ttl():
    s = Server("--responses-store-ttl", "1.5")
    try:
        c = openai.OpenAI(base_url=s.base_url, api_key="unused", max_retries=0)
        r = c.responses.create(model=MODEL, input="ROMEO:", max_output_tokens=2)
        c.responses.retrieve(r.id)
        time.sleep(2.5)
        with pytest.raises(openai.NotFoundError):
            c.responses.retrieve(r.id)
    finally:
        assert s.stop() == 0


# ---- tools -------------------------------------------------------------------------------

TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather for a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16}},
                         "required": ["city"]},
          "strict": False}]
CHAT_TOOLS = [{"type": "function", "function": {k: v for k, v in TOOLS[0].items() if k != "type"}}]


def test_tools_auto(qwen_srv):
    c = openai.OpenAI(base_url=qwen_srv.base_url, api_key="unused", max_retries=0)
    r = c.responses.create(model="qwen-tmpl", input="Weather in Paris?", tools=TOOLS, tool_choice="auto",
                           parallel_tool_calls=True, max_output_tokens=16, temperature=0)
    assert r.status in ("completed", "incomplete")
    assert all(o.type in ("message", "function_call") for o in r.output)
    for o in r.output:
        if o.type == "function_call":
            assert o.call_id and o.id.startswith("fc_") and o.name
            json.loads(o.arguments)
    assert r.tools[0].name == "get_weather" and r.tools[0].type == "function"
    # the template saw the tools (flat -> nested)
    assert r.usage.input_tokens == prompt_tokens(qwen_srv, [{"role": "user", "content": "Weather in Paris?"}],
                                                 CHAT_TOOLS)
    events = list(c.responses.create(model="qwen-tmpl", input="Weather in Paris?", tools=TOOLS,
                                     max_output_tokens=16, temperature=0, stream=True))
    final = check_stream(events)
    assert [o.type for o in final.output] == [o.type for o in r.output]


def test_function_call_round_trip(qwen_srv):
    """function_call + function_call_output items become the assistant's tool call and the
    tool's message, as the chat API has them."""
    c = openai.OpenAI(base_url=qwen_srv.base_url, api_key="unused", max_retries=0)
    items = [{"role": "user", "content": "Weather in Paris?"},
             {"type": "function_call", "call_id": "call_1", "name": "get_weather",
              "arguments": json.dumps({"city": "Paris"})},
             {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21 C"}]
    r = c.responses.create(model="qwen-tmpl", input=items, tools=TOOLS, max_output_tokens=8, temperature=0)
    msgs = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    assert r.usage.input_tokens == prompt_tokens(qwen_srv, msgs, CHAT_TOOLS)
    # tool_choice "none": the tools are not offered
    r = c.responses.create(model="qwen-tmpl", input="Weather in Paris?", tools=TOOLS, tool_choice="none",
                           max_output_tokens=4)
    assert r.usage.input_tokens == prompt_tokens(qwen_srv, [{"role": "user", "content": "Weather in Paris?"}])


@pytest.mark.parametrize("choice", ["required", {"type": "function", "name": "get_weather"}])
def test_tool_choice_forced(qwen_srv, choice):
    c = openai.OpenAI(base_url=qwen_srv.base_url, api_key="unused", max_retries=0)
    r = c.responses.create(model="qwen-tmpl", input="Weather in Paris?", tools=TOOLS, tool_choice=choice,
                           max_output_tokens=200, temperature=0, parallel_tool_calls=False)
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather"
    json.loads(calls[0].arguments)


def test_text_format_json_schema(client):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}}, "required": ["name"],
              "additionalProperties": False}
    r = client.responses.create(model=MODEL, input="Name a king.", max_output_tokens=120, temperature=0,
                                text={"format": {"type": "json_schema", "name": "king", "schema": schema,
                                                 "strict": True}})
    assert r.text.format.type == "json_schema"
    assert isinstance(json.loads(r.output_text)["name"], str)


def test_text_format_json_object(client):
    r = client.responses.create(model=MODEL, input="A JSON object, please.", max_output_tokens=120, temperature=0,
                                text={"format": {"type": "json_object"}})
    assert isinstance(json.loads(r.output_text), dict)


def test_forced_features_errors_named(srv):
    """A bad schema or a tool_choice naming no tool: a 400 naming the Responses field."""
    bad_schema = {"type": "json_schema", "name": "x", "schema": {"type": "object", "patternProperties": {}}}
    for body, param in [({"tool_choice": {"type": "function", "name": "nope"}, "tools": TOOLS}, "tool_choice"),
                        ({"text": {"format": bad_schema}}, "text.format")]:
        st, h, d = srv.request("POST", "/v1/responses", {"input": "hi", "max_output_tokens": 2, **body})
        assert st == 400, d
        assert json.loads(d)["error"]["param"] == param, d


def test_accepted_extras(client):
    """What Codex-style clients send along is accepted."""
    r = client.responses.create(model=MODEL, input="ROMEO:", max_output_tokens=3, top_p=0.9, extra_body={"seed": 7},
                                reasoning={"effort": "low", "summary": "auto"}, include=[],
                                text={"format": {"type": "text"}, "verbosity": "medium"},
                                truncation="disabled", prompt_cache_key="k", parallel_tool_calls=False,
                                store=True, metadata={"x": "y"})
    assert r.reasoning.effort == "low" and r.parallel_tool_calls is False and r.top_p == 0.9
    items = [{"type": "reasoning", "id": "rs_1", "summary": []}, {"role": "user", "content": "hi"}]
    client.responses.create(model=MODEL, input=items, max_output_tokens=2)


# ---- hostile clients ------------------------------------------------------------------------

BAD = [
    ({}, "input", "missing_required_parameter"),
    ({"input": None}, "input", "missing_required_parameter"),
    ({"input": 5}, "input", "invalid_type"),
    ({"input": {"role": "user"}}, "input", "invalid_type"),
    ({"input": []}, "input", "invalid_value"),
    ({"input": [7]}, "input[0]", "invalid_type"),
    ({"input": [{"type": "image_generation_call"}]}, "input[0].type", "invalid_value"),
    ({"input": [{"type": 3}]}, "input[0].type", "invalid_type"),
    ({"input": [{"content": "x"}]}, "input[0].type", "missing_required_parameter"),
    ({"input": [{"role": "wizard", "content": "x"}]}, "input[0].role", "invalid_value"),
    ({"input": [{"role": "user"}]}, "input[0].content", "missing_required_parameter"),
    ({"input": [{"role": "user", "content": 5}]}, "input[0].content", "invalid_type"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input[0].content[0].type", "unsupported_value"),
    ({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}, "input[0].content[0].text",
     "missing_required_parameter"),
    ({"input": [{"role": "user", "content": [{"type": "input_text", "text": 1}]}]}, "input[0].content[0].text",
     "invalid_type"),
    ({"input": [{"role": "user", "content": ["x"]}]}, "input[0].content[0]", "invalid_type"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id",
     "missing_required_parameter"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "", "arguments": "{}"}]}, "input[0].name",
     "invalid_value"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]}, "input[0].arguments",
     "invalid_type"),
    ({"input": [{"type": "function_call_output", "call_id": "c"}]}, "input[0].output", "missing_required_parameter"),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": 3}]}, "input[0].output", "invalid_type"),
    ({"input": "x", "instructions": 5}, "instructions", "invalid_type"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens", "invalid_value"),
    ({"input": "x", "max_output_tokens": 1.5}, "max_output_tokens", "invalid_type"),
    ({"input": "x", "max_output_tokens": 10 ** 30}, "max_output_tokens", "invalid_value"),
    ({"input": "x", "max_output_tokens": "9"}, "max_output_tokens", "invalid_type"),
    ({"input": "x", "temperature": 9}, "temperature", "invalid_value"),
    ({"input": "x", "top_p": "a"}, "top_p", "invalid_type"),
    ({"input": "x", "seed": 2 ** 64}, "seed", "invalid_value"),
    ({"input": "x", "stream": "yes"}, "stream", "invalid_type"),
    ({"input": "x", "store": 1}, "store", "invalid_type"),
    ({"input": "x", "metadata": []}, "metadata", "invalid_type"),
    ({"input": "x", "metadata": {"k": 1}}, "metadata", "invalid_type"),
    ({"input": "x", "metadata": {f"k{i}": "v" for i in range(17)}}, "metadata", "invalid_value"),
    ({"input": "x", "metadata": {"k": "v" * 600}}, "metadata", "invalid_value"),
    ({"input": "x", "tools": {}}, "tools", "invalid_type"),
    ({"input": "x", "tools": [{"type": "web_search_preview"}]}, "tools[0].type", "unsupported_value"),
    ({"input": "x", "tools": [{"type": "function"}]}, "tools[0].name", "missing_required_parameter"),
    ({"input": "x", "tools": [{"type": "function", "name": "f", "parameters": "{}"}]}, "tools[0].parameters",
     "invalid_type"),
    ({"input": "x", "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools[0].name",
     "missing_required_parameter"),
    ({"input": "x", "tool_choice": "always"}, "tool_choice", "invalid_value"),
    ({"input": "x", "tool_choice": 1}, "tool_choice", "invalid_type"),
    ({"input": "x", "tool_choice": {"type": "function"}}, "tool_choice.name", "missing_required_parameter"),
    ({"input": "x", "tool_choice": {"type": "file_search"}}, "tool_choice.type", "unsupported_value"),
    ({"input": "x", "text": "json"}, "text", "invalid_type"),
    ({"input": "x", "text": {"format": {"type": "xml"}}}, "text.format.type", "invalid_value"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}}, "text.format.schema",
     "missing_required_parameter"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "n", "schema": []}}}, "text.format.schema",
     "invalid_type"),
    ({"input": "x", "reasoning": "high"}, "reasoning", "invalid_type"),
    ({"input": "x", "reasoning": {"effort": "extreme"}}, "reasoning.effort", "invalid_value"),
    ({"input": "x", "previous_response_id": 5}, "previous_response_id", "invalid_type"),
    ({"input": "x", "background": True}, "background", "unsupported_value"),
    ({"input": "x", "top_logprobs": 3}, "top_logprobs", "unsupported_value"),
    ({"input": "x", "include": "all"}, "include", "invalid_type"),
    ({"input": "x", "truncation": "middle"}, "truncation", "invalid_value"),
    ({"input": "x", "model": 5}, "model", "invalid_type"),
]


def check_error(st, h, d, status, param=None, code=None):
    assert st == status, (st, d)
    assert h.get("content-type", "").startswith("application/json")
    err = json.loads(d)["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    if param is not None:
        assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err
    return err


@pytest.mark.parametrize("body,param,code", BAD, ids=[f"{i}-{b[1]}" for i, b in enumerate(BAD)])
def test_bad_fields(srv, body, param, code):
    st, h, d = srv.request("POST", "/v1/responses", body)
    check_error(st, h, d, 400, param, code)


def test_bad_bodies(srv):
    for raw, code in [(b"", "invalid_json"), (b"[]", "invalid_json"), (b"{", "invalid_json"),
                      (b'{"input":"a\xff"}', "invalid_encoding"), (b'{"input":"a","input":"b"}', "duplicate_key"),
                      (b'{"input":"a\\u0000"}', "invalid_value"), (b'{"input":' + b"[" * 200 + b"]" * 200 + b"}",
                                                                    "invalid_json"),
                      (b'{"input":"\\ud800"}', None)]:
        st, h, d = srv.request("POST", "/v1/responses", raw, headers={"Content-Type": "application/json"})
        check_error(st, h, d, 400, code=code)
    # the context: a prompt past max_model_len is a 400 naming input
    st, h, d = srv.request("POST", "/v1/responses", {"input": "ROMEO: " * 400})
    check_error(st, h, d, 400, "input", "context_length_exceeded")
    # an unknown model
    st, h, d = srv.request("POST", "/v1/responses", {"input": "x", "model": "gpt-5"})
    check_error(st, h, d, 404, "model", "model_not_found")
    st, h, d = srv.request("GET", "/v1/responses/" + "x" * 300)
    check_error(st, h, d, 404)
    st, h, d = srv.request("GET", "/v1/responses/a/b")
    check_error(st, h, d, 404)
    st, h, d = srv.request("PUT", "/v1/responses/resp_x")
    check_error(st, h, d, 405)
    assert h["allow"] == "GET, HEAD, DELETE"
    st, h, d = srv.request("GET", "/v1/responses")
    check_error(st, h, d, 405)
    st, _, _ = srv.request("GET", "/health")
    assert st == 200


def test_unknown_fields_ignored(srv):
    st, h, d = srv.request("POST", "/v1/responses", {"input": "x", "max_output_tokens": 1, "frobnicate": [1, 2]})
    assert st == 200, d


def test_disconnect_mid_stream_aborts():
    s = Server("--reference-kernels", "--threads", "1")
    try:
        key = 'inferd_aborted_total{reason="client_disconnect"}'
        base = s.metrics()
        sk = socket.create_connection((s.host, s.port))
        body = json.dumps({"input": "ROMEO:", "max_output_tokens": 240, "ignore_eos": True, "temperature": 0,
                           "stream": True}).encode()
        sk.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n" % len(body) + body)
        got = b""
        while got.count(b"response.output_text.delta") < 6:  # event: + data: per delta
            chunk = sk.recv(4096)
            assert chunk, got
            got += chunk
        assert b"200" in got.split(b"\r\n")[0]
        sk.close()
        deadline = time.time() + 15
        m = s.metrics()
        while time.time() < deadline and not (m[key] == base[key] + 1 and m["inferd_num_requests_running"] == 0):
            time.sleep(0.05)
            m = s.metrics()
        assert m[key] == base[key] + 1 and m["inferd_num_requests_running"] == 0, m
        assert m["inferd_kv_blocks_used"] == base["inferd_kv_blocks_used"]
        gen = m["inferd_generation_tokens_total"] - base["inferd_generation_tokens_total"]
        assert gen < 240  # stopped early
    finally:
        assert s.stop() == 0

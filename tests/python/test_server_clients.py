"""The libraries people point at an OpenAI-compatible server, on their default
structured-output paths, against a real `inferd serve` (issue 12):

- langchain-openai: with_structured_output (json_schema, the default; function_calling),
  bind_tools with tool_choice "required" / a name;
- instructor: TOOLS mode (a named forced call) and the JSON modes (response_format);
- pydantic-ai: an Agent with output_type (its output tool, forced);
- the OpenAI SDK's chat.completions.parse is in test_server_structured.py.

On the Shakespeare model with a Hermes-format (Qwen2.5) template: whatever it knows, the
grammar makes its output valid, so each library gets a parsed object. The same runs on
the default Qwen2.5-Coder model when it has been fetched (models-cache/default.gguf, or
INFERD_QWEN_GGUF). Also run against the ASan build (scripts/test.sh)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Optional

import pytest

from requires import require_module

openai = require_module("openai", "pip install -r requirements-dev.txt")
pydantic = require_module("pydantic", "pip install -r requirements-dev.txt")

from server_util import REPO_ROOT, TEMPLATES, Server  # noqa: E402

# the default model (1.5B), else its 0.5B sibling (scripts/test.sh fetches that one for CI)
QWEN = next((p for p in (Path(os.environ["INFERD_QWEN_GGUF"]) if os.environ.get("INFERD_QWEN_GGUF") else None,
                         REPO_ROOT / "models-cache" / "default.gguf", REPO_ROOT / "models-cache" / "qwen0.5b.gguf")
             if p is not None and p.is_file()), None)


class City(pydantic.BaseModel):
    """A city and the country it is in."""
    name: str = pydantic.Field(max_length=16, description="the city's name")
    country: Literal["france", "italy", "spain", "england"]
    population_millions: int = pydantic.Field(ge=0, le=40)


class Anything(pydantic.BaseModel):
    """Any JSON object validates (the JSON mode cannot teach a model the schema)."""
    model_config = pydantic.ConfigDict(extra="allow")
    note: Optional[str] = None


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.fixture(scope="module", params=["shakespeare", "qwen"])
def srv(request):
    if request.param == "qwen":
        if QWEN is None:
            pytest.skip("no Qwen2.5-Coder model fetched (scripts/fetch_default_model.sh)")
        if "asan" in os.environ.get("INFERD_BIN", ""):
            pytest.skip("a real model under the sanitizers takes too long; the plain build runs it")
        s = Server("--served-model-name", "m", "--max-model-len", "4096", model=QWEN, ready_timeout=300)
    else:
        s = Server("--chat-template-file", str(TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja"),
                   "--served-model-name", "m", "--max-model-len", "2048")
    yield s
    assert s.stop() == 0


def test_langchain(srv):
    lc = require_module("langchain_openai", "pip install -r requirements-dev.txt")
    llm = lc.ChatOpenAI(base_url=srv.base_url, api_key="unused", model="m", temperature=0.3, max_tokens=200,
                        max_retries=0, seed=1)
    q = "Which city is the capital of Italy?"
    out = llm.with_structured_output(City).invoke(q)  # json_schema, strict
    assert isinstance(out, City)
    out = llm.with_structured_output(City, method="function_calling").invoke(q)
    assert isinstance(out, City)
    for choice in ("required", "add", "any"):
        msg = llm.bind_tools([add], tool_choice=choice).invoke("What is 2 + 3?")
        assert msg.tool_calls and msg.tool_calls[0]["name"] == "add", msg
        assert set(msg.tool_calls[0]["args"]) == {"a", "b"}


def test_instructor(srv):
    instructor = require_module("instructor", "pip install -r requirements-dev.txt")
    base = openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0)
    q = [{"role": "user", "content": "Which city is the capital of Spain?"}]
    c = instructor.from_openai(base, mode=instructor.Mode.TOOLS)
    out = c.chat.completions.create(model="m", response_model=City, messages=q, max_tokens=400, max_retries=0, seed=1,
                                    temperature=0.3)
    assert isinstance(out, City)
    c = instructor.from_openai(base, mode=instructor.Mode.JSON_SCHEMA)
    out = c.chat.completions.create(model="m", response_model=City, messages=q, max_tokens=400, max_retries=0, seed=1,
                                    temperature=0.3)
    assert isinstance(out, City)
    c = instructor.from_openai(base, mode=instructor.Mode.JSON)
    out = c.chat.completions.create(model="m", response_model=Anything, messages=q, max_tokens=400, max_retries=0, seed=1,
                                    temperature=0.3)
    assert isinstance(out, Anything)


def test_pydantic_ai(srv):
    pa = require_module("pydantic_ai", "pip install -r requirements-dev.txt")
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel("m", provider=OpenAIProvider(base_url=srv.base_url, api_key="unused"))
    agent = pa.Agent(model, output_type=City, model_settings={"max_tokens": 600, "temperature": 0.3})
    res = agent.run_sync("Which city is the capital of France?")
    assert isinstance(res.output, City)

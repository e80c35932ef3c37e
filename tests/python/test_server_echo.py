"""/v1/completions with echo, logprobs with echo, and max_tokens 0: what
lm-eval-harness sends for log-likelihoods, e.g.
{"prompt": [ids] or text, "echo": true, "max_tokens": 0, "logprobs": 1, "temperature": 0}.
The response is OpenAI's legacy shape: choices[i].text is the prompt (then the
completion); choices[i].logprobs.tokens / token_logprobs / top_logprobs / text_offset
cover the prompt's tokens (the first one's logprob and top_logprobs are null) and then
the generated ones. Real server on 127.0.0.1, the Shakespeare test model."""
from __future__ import annotations

import json
import math
import subprocess

import pytest

from server_util import MODEL, Server, inferd_bin, sse_events

COMP = "/v1/completions"
PROMPT = "ROMEO:\nBut soft, what light"
TOL = 1e-4


@pytest.fixture(scope="module")
def srv():
    s = Server()
    yield s
    assert s.stop() == 0


def complete(srv, **body):
    st, d = srv.json("POST", COMP, body)
    assert st == 200, d
    return d


def tokenize(srv, text):
    st, d = srv.json("POST", "/tokenize", {"prompt": text})
    assert st == 200, d
    return d["tokens"]


def detokenize(srv, ids):
    st, d = srv.json("POST", "/detokenize", {"tokens": ids})
    assert st == 200, d
    return d["prompt"]


def check_prompt_logprobs(lp, n_prompt, n_top):
    """The echoed prompt's part of a legacy logprobs object."""
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"])
    assert len(lp["tokens"]) >= n_prompt
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    for v, top in zip(lp["token_logprobs"][1:n_prompt], lp["top_logprobs"][1:n_prompt]):
        assert isinstance(v, float) and v <= 0.0 and math.isfinite(v)
        assert isinstance(top, dict) and len(top) == n_top
        # the top alternative is at least as likely as the prompt's own token
        assert max(top.values()) >= v - TOL
    offs = lp["text_offset"]
    assert offs == sorted(offs) and offs[0] == 0


def test_echo_text_prompt_max_tokens_0(srv):
    ids = tokenize(srv, PROMPT)
    d = complete(srv, prompt=PROMPT, echo=True, max_tokens=0, logprobs=1, temperature=0)
    (c,) = d["choices"]
    assert c["text"] == PROMPT
    assert c["finish_reason"] == "length"
    assert d["usage"]["prompt_tokens"] == len(ids) and d["usage"]["completion_tokens"] == 0
    lp = c["logprobs"]
    assert len(lp["token_logprobs"]) == len(ids)  # the prompt's tokens, no completion
    check_prompt_logprobs(lp, len(ids), 1)
    # the tokens are the prompt's, piece by piece
    assert "".join(lp["tokens"][1:]) == detokenize(srv, ids[1:])


def test_echo_token_id_prompt(srv):
    ids = tokenize(srv, PROMPT)
    d = complete(srv, prompt=ids, echo=True, max_tokens=0, logprobs=2, temperature=0)
    (c,) = d["choices"]
    assert c["text"] == detokenize(srv, ids)
    lp = c["logprobs"]
    assert len(lp["token_logprobs"]) == len(ids)
    check_prompt_logprobs(lp, len(ids), 2)
    # the same prompt as text gives the same logprobs (same token ids)
    t = complete(srv, prompt=PROMPT, echo=True, max_tokens=0, logprobs=2, temperature=0)
    tl = t["choices"][0]["logprobs"]["token_logprobs"]
    assert all(abs(a - b) <= TOL for a, b in zip(lp["token_logprobs"][1:], tl[1:]))


def test_echo_list_of_prompts(srv):
    a, b = "ROMEO:\nWhat", "JULIET:\nAy me"
    ids_b = tokenize(srv, b)
    d = complete(srv, prompt=[a, b], echo=True, max_tokens=0, logprobs=1, temperature=0)
    assert [c["text"] for c in d["choices"]] == [a, b]
    assert len(d["choices"][1]["logprobs"]["token_logprobs"]) == len(ids_b)
    d = complete(srv, prompt=[tokenize(srv, a), ids_b], echo=True, max_tokens=0, logprobs=1, temperature=0)
    assert [len(c["logprobs"]["tokens"]) for c in d["choices"]] == [len(tokenize(srv, a)), len(ids_b)]
    assert d["usage"]["prompt_tokens"] == len(tokenize(srv, a)) + len(ids_b)


def test_echo_with_completion(srv):
    ids = tokenize(srv, PROMPT)
    k = 5
    d = complete(srv, prompt=PROMPT, echo=True, max_tokens=k, logprobs=1, temperature=0, ignore_eos=True)
    (c,) = d["choices"]
    plain = complete(srv, prompt=PROMPT, max_tokens=k, logprobs=1, temperature=0, ignore_eos=True)["choices"][0]
    assert c["text"] == PROMPT + plain["text"]
    lp = c["logprobs"]
    assert len(lp["token_logprobs"]) == len(ids) + k
    check_prompt_logprobs(lp, len(ids), 1)
    assert lp["tokens"][len(ids):] == plain["logprobs"]["tokens"]
    for a, b in zip(lp["token_logprobs"][len(ids):], plain["logprobs"]["token_logprobs"]):
        assert abs(a - b) <= TOL
    # the completion's offsets start at the end of the echoed prompt
    assert lp["text_offset"][len(ids)] == len(PROMPT.encode())


def test_echo_logprobs_match_greedy_generation(srv):
    """Cross-check: generate k tokens greedily with logprobs, then echo prompt + those
    tokens with max_tokens 0: the echoed logprobs of the k tokens must be the ones the
    generation reported (same model, same positions)."""
    k = 6
    ids = tokenize(srv, PROMPT)
    # the greedy ids, from the CLI (the legacy response names tokens by text only)
    r = subprocess.run([str(inferd_bin()), "generate", "-m", str(MODEL), "-p", PROMPT, "-n", str(k),
                        "--temp", "0", "--ignore-eos", "--ids"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    gen_ids = [int(x) for x in r.stdout.split()]
    assert len(gen_ids) == k
    g = complete(srv, prompt=ids, max_tokens=k, logprobs=3, temperature=0, ignore_eos=True)["choices"][0]
    glp = g["logprobs"]
    assert [detokenize(srv, [t]) for t in gen_ids] == glp["tokens"], "the server's greedy tokens differ from the CLI's"
    e = complete(srv, prompt=ids + gen_ids, echo=True, max_tokens=0, logprobs=3, temperature=0)["choices"][0]
    elp = e["logprobs"]
    assert e["text"] == detokenize(srv, ids + gen_ids)
    assert len(elp["token_logprobs"]) == len(ids) + k
    assert elp["tokens"][len(ids):] == glp["tokens"]
    for a, b in zip(elp["token_logprobs"][len(ids):], glp["token_logprobs"]):
        assert abs(a - b) <= TOL, (a, b)
    for ta, tb in zip(elp["top_logprobs"][len(ids):], glp["top_logprobs"]):
        assert ta.keys() == tb.keys()
        assert all(abs(ta[t] - tb[t]) <= TOL for t in ta)
        # greedy: the generated token is the top alternative (what lm-eval's is_greedy checks)
    for v, top in zip(elp["token_logprobs"][len(ids):], elp["top_logprobs"][len(ids):]):
        assert abs(v - max(top.values())) <= TOL


def test_echo_stream(srv):
    ids = tokenize(srv, PROMPT)
    k = 4
    body = dict(prompt=PROMPT, echo=True, max_tokens=k, logprobs=1, temperature=0, ignore_eos=True)
    whole = complete(srv, **body)["choices"][0]
    c = srv.connection()
    try:
        c.request("POST", COMP, body=json.dumps({**body, "stream": True}),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200
        events = sse_events(r)
    finally:
        c.close()
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    first = chunks[0]["choices"][0]
    # the echoed prompt and its logprobs come first
    assert first["text"] == PROMPT
    assert len(first["logprobs"]["tokens"]) == len(ids)
    check_prompt_logprobs(first["logprobs"], len(ids), 1)
    text = "".join(ch["choices"][0]["text"] for ch in chunks if ch["choices"])
    toks, lps = [], []
    for ch in chunks:
        for cc in ch["choices"]:
            if cc["logprobs"]:
                toks += cc["logprobs"]["tokens"]
                lps += cc["logprobs"]["token_logprobs"]
    assert text == whole["text"]
    assert toks == whole["logprobs"]["tokens"]
    assert len(lps) == len(ids) + k and lps[0] is None
    assert all(abs(a - b) <= TOL for a, b in zip(lps[1:], whole["logprobs"]["token_logprobs"][1:]))
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_echo_stream_max_tokens_0(srv):
    c = srv.connection()
    try:
        c.request("POST", COMP, body=json.dumps(dict(prompt=PROMPT, echo=True, max_tokens=0, logprobs=1,
                                                     temperature=0, stream=True)),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200
        events = sse_events(r)
    finally:
        c.close()
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(ch["choices"][0]["text"] for ch in chunks) == PROMPT
    assert chunks[0]["choices"][0]["logprobs"]["token_logprobs"][0] is None
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_echo_n2(srv):
    """echo with n > 1 is served (as vLLM does): every choice echoes its prompt, with the
    same prompt logprobs."""
    ids = tokenize(srv, PROMPT)
    d = complete(srv, prompt=PROMPT, echo=True, n=2, max_tokens=3, logprobs=1, temperature=1.0, seed=7)
    assert len(d["choices"]) == 2
    for c in d["choices"]:
        assert c["text"].startswith(PROMPT)
        assert len(c["logprobs"]["tokens"]) == len(ids) + 3
    a, b = (c["logprobs"]["token_logprobs"][:len(ids)] for c in d["choices"])
    assert a == b


def test_echo_without_logprobs(srv):
    d = complete(srv, prompt=PROMPT, echo=True, max_tokens=0)
    (c,) = d["choices"]
    assert c["text"] == PROMPT and c["logprobs"] is None and c["finish_reason"] == "length"


def test_max_tokens_0_without_echo(srv):
    d = complete(srv, prompt=PROMPT, max_tokens=0)
    (c,) = d["choices"]
    assert c["text"] == "" and c["finish_reason"] == "length" and c["logprobs"] is None
    assert d["usage"]["completion_tokens"] == 0 and d["usage"]["prompt_tokens"] == len(tokenize(srv, PROMPT))
    d = complete(srv, prompt=PROMPT, max_tokens=0, logprobs=1)
    c = d["choices"][0]
    assert c["text"] == "" and c["finish_reason"] == "length"
    assert c["logprobs"]["tokens"] == [] and c["logprobs"]["token_logprobs"] == []


@pytest.mark.parametrize("path,body,param", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, "max_tokens"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 0},
     "max_completion_tokens"),
    (COMP, {"prompt": PROMPT, "max_tokens": -1, "echo": True}, "max_tokens"),
    (COMP, {"prompt": PROMPT, "max_tokens": 0, "echo": True, "logprobs": 21}, "logprobs"),
    (COMP, {"prompt": PROMPT, "max_tokens": 0, "echo": True, "logprobs": -1}, "logprobs"),
    (COMP, {"prompt": PROMPT, "max_tokens": 0, "echo": 1}, "echo"),
    (COMP, {"prompt": PROMPT, "max_tokens": 0.5, "echo": True}, "max_tokens"),
])
def test_invalid(srv, path, body, param):
    st, d = srv.json("POST", path, body)
    assert st == 400, d
    assert d["error"]["param"] == param

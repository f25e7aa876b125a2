#!/usr/bin/env python3
"""The official `openai` Python client against a running `capstan serve`.

Usage: openai_client.py BASE_URL QUESTIONS_JSONL [API_KEY]

Checks chat completions (plain and streamed: the streamed deltas join to the
plain answer), errors the client raises for bad requests, embeddings (two
inputs, 384 dimensions, the client's default base64 path equal to floats)
and the model list. Prints one line per check and a summary line
"N passed, N failed"; exits non-zero when any check failed.
"""

import json
import sys
import traceback

import openai
from openai import OpenAI

BASE_URL = sys.argv[1]
QUESTIONS = [json.loads(line)["text"] for line in open(sys.argv[2], encoding="utf-8") if line.strip()]
API_KEY = sys.argv[3] if len(sys.argv) > 3 else "unused"

client = OpenAI(base_url=BASE_URL, api_key=API_KEY, max_retries=0, timeout=60)
CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def plain_answer(question, model="capstan-extractive"):
    resp = client.chat.completions.create(model=model, messages=[{"role": "user", "content": question}])
    return resp


@check
def chat_completion():
    resp = plain_answer(QUESTIONS[0])
    assert resp.object == "chat.completion", resp
    assert len(resp.choices) == 1
    choice = resp.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content and choice.message.content.strip(), resp
    assert choice.finish_reason == "stop", choice.finish_reason
    assert resp.usage is not None and resp.usage.total_tokens >= 0
    # Capstan's extra field survives the client's model.
    extra = resp.model_extra or {}
    assert extra.get("citations"), f"no citations in {resp}"


@check
def the_default_model_is_the_llama_reader_when_one_is_loaded():
    # `capstan serve` loads SmolLM2 here (scripts/setup.sh installed it), so "capstan", the
    # server's default, answers as "capstan-llama" does: the same greedy text.
    ask = lambda model: client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": QUESTIONS[2]}], max_tokens=12,
        temperature=0).choices[0].message.content
    default, llama = ask("capstan"), ask("capstan-llama")
    assert default and default == llama, (default, llama)
    assert default != ask("capstan-extractive"), default


@check
def chat_with_system_message_and_parts():
    q = QUESTIONS[1]
    resp = client.chat.completions.create(
        model="capstan-extractive",
        messages=[
            {"role": "system", "content": "Answer from the index only."},
            {"role": "user", "content": [{"type": "text", "text": q}]},
        ],
        max_tokens=64,
        temperature=0,
    )
    assert resp.choices[0].message.content == plain_answer(q).choices[0].message.content
    assert resp.model == "capstan-extractive"


@check
def streamed_chat_equals_plain_chat():
    for q in QUESTIONS[:3]:
        expected = plain_answer(q).choices[0].message.content
        stream = client.chat.completions.create(
            model="capstan-extractive", messages=[{"role": "user", "content": q}], stream=True
        )
        pieces, finish, ids, roles = [], None, set(), []
        for chunk in stream:
            ids.add(chunk.id)
            assert chunk.object == "chat.completion.chunk", chunk
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            if delta.role:
                roles.append(delta.role)
            if delta.content:
                pieces.append(delta.content)
            if chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
        content = "".join(pieces)
        assert content.strip(), "empty streamed content"
        assert content == expected, f"streamed {content!r} != plain {expected!r}"
        assert finish == "stop", finish
        assert roles == ["assistant"], roles
        assert len(ids) == 1, ids


@check
def generated_answer_from_the_default_llm():
    """SmolLM2-135M-Instruct (the default generative model) answers through its chat
    template; greedy, so the streamed deltas join to the plain answer."""
    assert "capstan-llama" in model_ids()["chat"], model_ids()
    q = QUESTIONS[0]
    messages = [{"role": "user", "content": q}]
    resp = client.chat.completions.create(model="capstan-llama", messages=messages, max_tokens=24, temperature=0)
    content = resp.choices[0].message.content
    assert content and content.strip(), resp
    assert resp.model == "capstan-llama"
    assert resp.choices[0].finish_reason in ("stop", "length"), resp.choices[0].finish_reason
    assert resp.usage.completion_tokens > 0, resp.usage
    assert resp.usage.prompt_tokens > 50, resp.usage
    assert (resp.model_extra or {}).get("citations"), resp
    stream = client.chat.completions.create(
        model="capstan-llama", messages=messages, max_tokens=24, temperature=0, stream=True
    )
    pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
    assert "".join(pieces).strip() == content.strip(), (pieces, content)


@check
def unknown_model_is_not_found():
    try:
        plain_answer(QUESTIONS[0], model="gpt-4o")
    except openai.NotFoundError as e:
        assert e.status_code == 404
        assert e.body and e.body.get("type") == "model_not_found", e.body
    else:
        raise AssertionError("no NotFoundError")


@check
def bad_request_is_a_bad_request_error():
    try:
        client.chat.completions.create(model="capstan", messages=[{"role": "user", "content": "   "}])
    except openai.BadRequestError as e:
        assert e.status_code == 400
        assert e.body and e.body.get("message"), e.body
    else:
        raise AssertionError("no BadRequestError")


@check
def embeddings_default_base64():
    inputs = ["the harbour town", QUESTIONS[0]]
    # The client asks for base64 by default and decodes it itself.
    resp = client.embeddings.create(model=model_ids()["embedding"], input=inputs)
    assert resp.object == "list"
    assert [d.index for d in resp.data] == [0, 1]
    for d in resp.data:
        assert len(d.embedding) == 384, len(d.embedding)
        assert all(isinstance(x, float) for x in d.embedding)
        norm = sum(x * x for x in d.embedding) ** 0.5
        assert abs(norm - 1.0) < 1e-3, norm
    assert resp.usage.prompt_tokens > 0
    floats = client.embeddings.create(model=model_ids()["embedding"], input=inputs, encoding_format="float")
    for a, b in zip(resp.data, floats.data):
        assert max(abs(x - y) for x, y in zip(a.embedding, b.embedding)) < 1e-6
    assert resp.data[0].embedding != resp.data[1].embedding


@check
def embeddings_unknown_model():
    try:
        client.embeddings.create(model="text-embedding-3-small", input="hello")
    except openai.NotFoundError as e:
        assert e.status_code == 404
    else:
        raise AssertionError("no NotFoundError")


def model_ids():
    ids = [m.id for m in client.models.list()]
    chat = [i for i in ids if i.startswith("capstan-")]
    other = [i for i in ids if not i.startswith("capstan-")]
    return {"chat": chat, "embedding": other[0] if other else None, "all": ids}


@check
def models_list():
    ids = model_ids()
    assert "capstan-extractive" in ids["chat"], ids
    assert ids["embedding"] == "all-MiniLM-L6-v2", ids
    m = client.models.retrieve("capstan-extractive")
    assert m.id == "capstan-extractive" and m.object == "model", m
    try:
        client.models.retrieve("gpt-4o")
    except openai.NotFoundError as e:
        assert e.status_code == 404
    else:
        raise AssertionError("no NotFoundError")


def main():
    passed = failed = 0
    for fn in CHECKS:
        try:
            fn()
        except Exception:  # noqa: BLE001 - report every failure and go on
            failed += 1
            print(f"FAIL {fn.__name__}")
            traceback.print_exc()
        else:
            passed += 1
            print(f"ok   {fn.__name__}")
    print(f"openai {openai.__version__}: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""The loopback chat-completions server itself (tests/chatserver.py): answers, streams, judge calls, its knobs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from xml.sax.saxutils import escape, quoteattr

import httpx
import pytest

from tests.support.chatserver import (
    NOT_COVERED,
    ChatServer,
    answer_of,
    parse_passages,
    question_of,
    serve_chat,
    split_sentences,
)

KEY = "sk-chat-test-5e0c4a"
PASSAGES = [
    "Deposits are refundable within 14 days. After that they are kept.",
    "Invoices are archived for ten years!\nThen they are destroyed & shredded.",
    "Shipping is free above 50 EUR. Returns are paid by the customer.",
]


def block(passages: list[str], knowledge_base: str = "support") -> str:
    """A context block shaped like kbctl's (kbctl/query/context.py): quoted attributes, escaped text."""
    parts = [f'<reference_data knowledge_base={quoteattr(knowledge_base)} version="3">', "The passages below ..."]
    for i, text in enumerate(passages, start=1):
        attrs = {"id": str(i), "source": f"doc{i}", "title": 'a "quoted" title', "section": "A > B", "chars": "0-9"}
        rendered = " ".join(f"{k}={quoteattr(v)}" for k, v in attrs.items())
        parts.append(f"<passage {rendered}>\n{escape(text)}\n</passage>")
    parts.append("</reference_data>")
    return "\n".join(parts)


def ask(question: str, passages: list[str] = PASSAGES) -> str:
    return f"{block(passages)}\n\nQuestion: {question}"


def judge_content(answer: str, passages: list[str] = PASSAGES) -> str:
    return f"Judge the answer.\n{block(passages)}\n<answer>\n{escape(answer)}\n</answer>"


@pytest.fixture(scope="module")
def module_server() -> Iterator[ChatServer]:
    with serve_chat() as server:
        yield server


@pytest.fixture
def server(module_server: ChatServer) -> ChatServer:
    module_server.reset()
    return module_server


def chat(server: ChatServer, content: str, headers: dict[str, str] | None = None, **body: Any) -> httpx.Response:
    fields: dict[str, Any] = {
        "model": server.model_name,
        "messages": [{"role": "system", "content": "Answer from the passages."}, {"role": "user", "content": content}],
    }
    fields.update(body)
    return httpx.post(f"{server.url}/chat/completions", json=fields, headers=headers, timeout=10)


def text_of(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    content: str = response.json()["choices"][0]["message"]["content"]
    return content


def stream(server: ChatServer, content: str, **body: Any) -> list[str]:
    """The `data:` payloads of a streamed answer, read as a stream."""
    fields: dict[str, Any] = {"model": server.model_name, "messages": [{"role": "user", "content": content}]}
    fields.update(body, stream=True)
    with httpx.stream("POST", f"{server.url}/chat/completions", json=fields, timeout=10) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["transfer-encoding"] == "chunked"
        lines = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines)
    return [line.removeprefix("data: ") for line in lines]


def test_parsing_helpers_read_kbctls_block() -> None:
    content = ask("How long are invoices kept?")
    assert parse_passages(content) == [(1, PASSAGES[0]), (2, PASSAGES[1]), (3, PASSAGES[2])]
    assert question_of(content) == "How long are invoices kept?"
    assert question_of("Question: first\nQuestion:  second one \n") == "second one"
    assert split_sentences("Kept 10 years. [2] Costs 3.5 EUR! [1] [9] Done") == [
        "Kept 10 years. [2]",
        "Costs 3.5 EUR! [1] [9]",
        "Done",
    ]


def test_answer_cites_the_relevant_passage_or_says_not_covered(server: ChatServer) -> None:
    response = chat(server, ask("How long are invoices archived?"))
    assert text_of(response) == "Invoices are archived for ten years! [2]"
    payload = response.json()
    assert payload["id"].startswith("chatcmpl-") and payload["object"] == "chat.completion"
    assert payload["model"] == server.model_name and isinstance(payload["created"], int)
    assert payload["choices"][0]["finish_reason"] == "stop"
    usage = payload["usage"]
    assert usage["completion_tokens"] == 7
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 7
    # Two relevant passages at most, in id order; "long" and "what" are stop words.
    both = chat(server, ask("What about deposits, invoices and shipping?"))
    assert text_of(both) == "Deposits are refundable within 14 days. [1] Invoices are archived for ten years! [2]"
    assert text_of(chat(server, ask("What is the best pizza dough?"))) == NOT_COVERED
    assert text_of(chat(server, ask("How long?"))) == NOT_COVERED
    assert text_of(chat(server, "Question: invoices?")) == NOT_COVERED  # no passages at all
    assert server.last_user_content == "Question: invoices?"
    assert len(server.completions) == 5 and server.completions[0].body["messages"][0]["role"] == "system"


def test_streaming_reassembles_the_same_text_and_ends_with_done(server: ChatServer) -> None:
    content = ask("What about deposits, invoices and shipping?")
    expected = answer_of(content)
    for include_usage in (False, True):
        options = {"stream_options": {"include_usage": True}} if include_usage else {}
        events = stream(server, content, **options)
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
        with_choices = [c for c in chunks if c["choices"]]
        assert with_choices[0]["choices"][0]["delta"] == {"role": "assistant"}
        pieces = [c["choices"][0]["delta"].get("content", "") for c in with_choices]
        assert "".join(pieces) == expected and len([p for p in pieces if p]) > 5
        assert max(len(p) for p in pieces) == 8
        assert with_choices[-1]["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "stop"}
        assert all(c["choices"][0]["finish_reason"] is None for c in with_choices[:-1])
        if include_usage:
            last = chunks[-1]
            assert last["choices"] == [] and last["usage"]["completion_tokens"] == len(expected.split())
            assert all(c["usage"] is None for c in chunks[:-1])
        else:
            assert all(c["choices"] and "usage" not in c for c in chunks)

    server.bad_stream_next()
    events = stream(server, content)
    assert "{not json" in events[2:-2] and events[-1] == "[DONE]"
    assert "{not json" not in stream(server, content)  # one-shot
    bad = chat(server, content, stream_options={"include_usage": True})  # only allowed with stream: true
    assert bad.status_code == 400


def test_cite_extra_uncited_and_reply(server: ChatServer) -> None:
    content = ask("How long are invoices archived?")
    server.cite_extra = 9
    assert text_of(chat(server, content)) == "Invoices are archived for ten years! [2] [9]"
    server.cite_extra = None
    server.uncited = True
    assert text_of(chat(server, ask("What about deposits and invoices?"))) == (
        "Deposits are refundable within 14 days. Invoices are archived for ten years!"
    )
    server.reply = lambda body: f"exactly {body['model']} [1]"
    assert text_of(chat(server, content)) == f"exactly {server.model_name} [1]"
    server.reset()
    assert text_of(chat(server, content)) == "Invoices are archived for ten years! [2]"
    with serve_chat(cite_extra=4) as other:
        other.cite_extra = None
        other.reset()  # the constructor's knobs are the ones restored
        assert text_of(chat(other, content)) == "Invoices are archived for ten years! [2] [4]"


def test_judge_mode_verdicts(server: ChatServer) -> None:
    answer = "Invoices are archived for ten years. [2] Deposits earn interest monthly. [1] Nothing cited here."
    response = chat(server, judge_content(answer), response_format={"type": "json_object"})
    claims = json.loads(text_of(response))["claims"]
    assert claims == [
        {"claim": "Invoices are archived for ten years.", "verdict": "supported", "passages": [2]},
        {"claim": "Deposits earn interest monthly.", "verdict": "unsupported", "passages": [1]},
        {"claim": "Nothing cited here.", "verdict": "unsupported", "passages": []},
    ]
    unknown = json.loads(text_of(chat(server, judge_content("Invoices are archived for ten years. [7]"))))
    assert unknown["claims"][0]["verdict"] == "unsupported"  # cites a passage that was not given
    empty = json.loads(text_of(chat(server, judge_content(f"  {NOT_COVERED.upper()} "))))
    assert empty == {"claims": []}

    server.judge_verdict = "contradicted"
    forced = json.loads(text_of(chat(server, judge_content(answer))))["claims"]
    assert [c["verdict"] for c in forced] == ["contradicted"] * 3
    server.reply = lambda body: "not used for judge calls"
    server.judge_reply = lambda body: '{"claims": [{"claim": "x"'
    assert text_of(chat(server, judge_content(answer))) == '{"claims": [{"claim": "x"'


def test_429_then_success_and_other_one_shot_knobs(server: ChatServer) -> None:
    content = ask("How long are invoices archived?")
    server.fail_next(429, headers={"Retry-After": "0"})
    first = chat(server, content)
    assert first.status_code == 429 and first.headers["retry-after"] == "0"
    assert first.json()["error"]["code"] == "rate_limit_exceeded"
    assert text_of(chat(server, content)) == "Invoices are archived for ten years! [2]"
    assert server.request_count == 2 and len(server.completions) == 2

    server.bad_json_next()
    with pytest.raises(ValueError):
        chat(server, content).json()

    def shout(payload: dict[str, Any]) -> None:
        for choice in payload["choices"]:
            if "delta" in choice:
                choice["delta"]["content"] = choice["delta"].get("content", "").upper()
            else:
                choice["message"]["content"] = choice["message"]["content"].upper()

    server.mangle_next(shout)
    assert text_of(chat(server, content)) == "INVOICES ARE ARCHIVED FOR TEN YEARS! [2]"
    server.mangle_next(shout)
    events = stream(server, content)
    pieces = [json.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-1]]
    assert "".join(pieces) == "INVOICES ARE ARCHIVED FOR TEN YEARS! [2]"

    server.disconnect_next()
    with pytest.raises(httpx.TransportError):
        chat(server, content)
    assert chat(server, content).status_code == 200


def test_require_key_strict_model_and_bad_requests(server: ChatServer) -> None:
    content = ask("invoices?")
    server.require_key = KEY
    denied = chat(server, content, headers={"Authorization": "Bearer nope"})
    assert denied.status_code == 401 and denied.json()["error"]["code"] == "invalid_api_key"
    assert chat(server, content).status_code == 401
    assert chat(server, content, headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    server.reset()

    assert chat(server, content, model="gpt-4o").json()["model"] == "gpt-4o"  # any model unless strict
    server.strict_model = True
    missing = chat(server, content, model="gpt-4o")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"

    for messages in ([], "hello", [{"role": "user"}], [{"role": "user", "content": ["parts"]}], [3]):
        bad = chat(server, content, messages=messages)
        assert bad.status_code == 400
        assert bad.json() == {
            "error": {
                "message": bad.json()["error"]["message"],
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
        }
    not_json = httpx.post(f"{server.url}/chat/completions", content=b"{nope", timeout=10)
    assert not_json.status_code == 400
    assert httpx.get(f"{server.url}/models").json()["data"][0]["id"] == server.model_name
    assert httpx.post(f"{server.url}/completions", json={}).status_code == 404

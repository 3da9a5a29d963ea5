"""The reference server follows vLLM where the contract allows, for the differences steered runs
found on real vLLM (docs/real-vllm.md, steered runs): ``/tokenize`` decodes a message's media as the
chat endpoint does (vLLM answers both alike), and a ``structured_outputs`` constraint beside a JSON
``response_format``, or of two kinds at once, is refused with vLLM's words."""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer

import httpx
import pytest

from pytest_qualify.tasks.corpus import load_manifest, malformed_part, media_part
from pytest_qualify.profiles import load_profile
from pytest_qualify.reference.faults import Faults
from pytest_qualify.reference.handler import Handler
from pytest_qualify.reference.state import ReferenceState

MANIFEST = load_manifest()


@pytest.fixture(params=[(), ("malformed_500",)], ids=["clean", "malformed_500"])
def reference(request):
    profile = load_profile("mm-cpu")
    state = ReferenceState(profile, Faults.parse(request.param), None, 0.0, 0.0)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), type("H", (Handler,), {"state": state}))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}", profile, bool(request.param)
    finally:
        httpd.shutdown()
        httpd.server_close()


def _message(part: dict) -> list[dict]:
    return [{"role": "user", "content": [part, {"type": "text", "text": "describe"}]}]


def test_tokenize_refuses_malformed_media_as_the_chat_endpoint_does(reference):
    url, profile, faulty = reference
    for case in MANIFEST.malformed:
        messages = _message(malformed_part(case))
        tok = httpx.post(url + "/tokenize", json={"messages": messages}, timeout=30)
        chat = httpx.post(url + "/v1/chat/completions", timeout=30,
                          json={"model": profile.deployment.served_name, "messages": messages, "max_tokens": 8})
        assert tok.status_code == chat.status_code == (500 if faulty else 400), (case.id, tok.text, chat.text)
        assert tok.json()["error"]["message"] == chat.json()["error"]["message"], case.id


def test_tokenize_still_counts_media_that_decodes(reference):
    url, _, _ = reference
    item = next(i for i in MANIFEST.items if i.kind == "image")
    messages = [{"role": "user", "content": [media_part(item.files[0]), {"type": "text", "text": "describe"}]}]
    tok = httpx.post(url + "/tokenize", json={"messages": messages}, timeout=30)
    assert tok.status_code == 200 and tok.json()["count"] > 0, tok.text


@pytest.mark.parametrize("extra, message", [
    ({"response_format": {"type": "json_object"}, "structured_outputs": {"choice": ["a"]}},
     "You can only use one kind of structured outputs constraint"),
    ({"structured_outputs": {"choice": ["a"], "regex": "a"}},
     "You can only use one kind of constraints for structured outputs"),
    ({"structured_outputs": "a"}, "'structured_outputs' must be an object"),
])
def test_structured_outputs_refused_as_vllm_refuses_them(reference, extra, message):
    url, profile, _ = reference
    body = {"model": profile.deployment.served_name, "messages": [{"role": "user", "content": "hi"}], **extra}
    answer = httpx.post(url + "/v1/chat/completions", json=body, timeout=30)
    assert answer.status_code == 400 and message in answer.json()["error"]["message"], answer.text


@pytest.mark.parametrize("extra", [
    {"structured_outputs": {"choice": ["a"]}},
    {"response_format": {"type": "text"}, "structured_outputs": {"regex": "a+"}},
])
def test_one_constraint_is_accepted(reference, extra):
    url, profile, _ = reference
    body = {"model": profile.deployment.served_name, "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 8, **extra}
    assert httpx.post(url + "/v1/chat/completions", json=body, timeout=30).status_code == 200

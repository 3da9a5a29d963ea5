"""Media on the reference server: admission (limits, real decoding) and corpus answers.

This is an ORACLE, not a vision model. ``admit`` really decodes every image (Pillow) and video
(PyAV) a request carries in data URLs, so malformed media is rejected because it does not decode,
and counts media against the profile's limits with vLLM's wording. ``answer`` recognises a corpus
item by the request's prompt together with the hashes of the decoded media content, and answers
with the manifest's ground truth in the item's contract (one JSON object, each fact in its field);
it never sees a test name. Requests with media that are no
corpus item are answered with what the oracle can know: how many images and videos arrived.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping
from functools import cache
from threading import Lock
from typing import Any

from pytest_qualify.tasks.corpus import MediaError, load_manifest

from pytest_qualify.tasks.media_decode import decode_data_url, decoded_file
from pytest_qualify.reference.oracle import ChatRequest, OracleContext, Rejection, Reply

PRIORITY = 50  # before generic oracles: only requests that carry media are answered here
FAULTS = {"drop_required_word": "=ITEM_ID: the answer for that corpus item omits its first field"}
SERVED_FAULTS = {
    "accept_over_limit": "requests over the profile's image/video limits are admitted with HTTP 200",
    "malformed_500": "malformed media gets HTTP 500 instead of a 400 refusal",
}
KIND_OF_PART = {"image_url": "image", "video_url": "video"}
_CACHE_SIZE = 16  # decoded videos are ~1 MB each


class _DecodeCache:
    """Decoded media by payload hash: ``admit`` and ``answer`` see the same request."""

    def __init__(self) -> None:
        self._data: OrderedDict[str, Any] = OrderedDict()
        self._lock = Lock()

    def decode(self, url: str, part: str) -> Any:
        key = hashlib.sha256(f"{part}\0{url}".encode()).hexdigest()
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        decoded = decode_data_url(url, part)  # raises MediaError
        with self._lock:
            self._data[key] = decoded
            while len(self._data) > _CACHE_SIZE:
                self._data.popitem(last=False)
        return decoded


_decoded = _DecodeCache()


def _media(req: ChatRequest) -> list[tuple[str, str]]:
    """(part type, URL) of every image/video part, in message order."""
    out = []
    for part in req.media_parts():
        kind = part.get("type")
        if kind in KIND_OF_PART:
            out.append((kind, str((part.get(kind) or {}).get("url", ""))))
    return out


def admit(req: ChatRequest, ctx: OracleContext) -> None:
    media = _media(req)
    if not media:
        return
    limits = ctx.profile.limits
    for kind, limit in (("image", limits.images_per_request), ("video", limits.videos_per_request)):
        count = sum(1 for part, _ in media if KIND_OF_PART[part] == kind)
        if count > limit:
            if "accept_over_limit" in ctx.faults:
                ctx.faults.engage("accept_over_limit")  # answered although over the limit
            else:
                # vLLM's wording, so suites written against the reference read real vLLM too.
                raise Rejection(400, f"At most {limit} {kind}(s) may be provided in one prompt. (parameter={kind})",
                                param=kind)
    decode_all(req, ctx)


def decode_all(req: ChatRequest, ctx: OracleContext) -> None:
    """Decode every media part, refusing one that does not decode. The chat endpoint and
    ``/tokenize`` both do it, as on vLLM (which answers a chat request and a ``/tokenize`` of the same
    malformed media alike: docs/real-vllm.md)."""
    for part, url in _media(req):
        try:
            _decoded.decode(url, part)
        except MediaError as exc:
            if "malformed_500" in ctx.faults:
                ctx.faults.engage("malformed_500")
                # vLLM 0.32.0's answer to a PNG sent as video/mp4 (its OpenCV video decoder raises).
                raise Rejection(500, VLLM_VIDEO_DECODER_500, "InternalServerError") from None
            raise Rejection(400, vllm_media_message(part, str(exc))) from None


# What vLLM 0.32.0 says when it cannot use a media part (observed: docs/real-vllm.md). The reference
# decodes with Pillow/PyAV, so the detail of its own decoder is mapped onto vLLM's wording.
VLLM_BAD_IMAGE = "Failed to load image: cannot identify image file <_io.BytesIO object>"
VLLM_BAD_VIDEO = "Could not open video stream"
VLLM_VIDEO_DECODER_500 = "upper bound and lower bound inconsistent with step sign"
_BASE64_PREFIX = "invalid base64 payload: "


def vllm_media_message(part: str, detail: str) -> str:
    """vLLM's refusal message for a media part that does not decode (``detail``: the decoder's)."""
    if detail.startswith(_BASE64_PREFIX):
        # vLLM decodes with validation, as the reference does; Python words a stray character
        # "Only base64 data is allowed" where vLLM's decoder says "Non-base64 digit found".
        detail = detail.removeprefix(_BASE64_PREFIX)
        return "Non-base64 digit found" if "Only base64 data is allowed" in detail else detail
    if detail.startswith(("only data: URLs", "data URL", "image_url carries", "video_url carries")):
        return detail  # the reference serves data URLs only; vLLM would fetch or refuse otherwise
    return VLLM_BAD_VIDEO if KIND_OF_PART[part] == "video" else VLLM_BAD_IMAGE


def _prompt_key(text: str) -> str:
    return " ".join(text.split()).casefold()


@cache
def _by_prompt() -> dict[str, list[tuple[str, tuple[str, ...], bool]]]:
    """Prompt -> (item id, its files, whether it is the tool case) for every corpus request."""
    manifest = load_manifest()
    index: dict[str, list[tuple[str, tuple[str, ...], bool]]] = {}
    for item in manifest.items:
        index.setdefault(_prompt_key(item.request), []).append((item.id, item.files, False))
    tool = manifest.tool_case
    index.setdefault(_prompt_key(tool.prompt), []).append((tool.item, manifest.item(tool.item).files, True))
    return index


def _recognise(req: ChatRequest, media: list[tuple[str, str]]) -> tuple[str, bool] | None:
    """The corpus item this request asks about: same prompt AND same decoded media content."""
    candidates = _by_prompt().get(_prompt_key(req.last_user_text()), [])
    if not candidates:
        return None  # only decode the corpus files a request could be about
    prints = sorted(_decoded.decode(url, part).fingerprint for part, url in media)
    for item_id, files, is_tool in candidates:
        if sorted(decoded_file(name).fingerprint for name in files) == prints:
            return item_id, is_tool
    return None


# Repetitions write the same object differently, as models do: the graders must accept all three.
def _compact(obj: dict[str, Any]) -> str:
    return json.dumps(obj)


def _fenced(obj: dict[str, Any]) -> str:
    return f"Here is the answer:\n```json\n{json.dumps(obj, indent=2)}\n```"


def _reordered(obj: dict[str, Any]) -> str:
    return "{ " + " ,\n  ".join(f"{json.dumps(k)} :  {json.dumps(v)}" for k, v in reversed(obj.items())) + " }"


_PHRASINGS = (_compact, _fenced, _reordered)


def _item_reply(item_id: str, ctx: OracleContext) -> Reply:
    manifest = load_manifest()
    item = manifest.item(item_id)
    answer = item.answer
    if "drop_required_word" in ctx.faults:
        target = ctx.faults.arg("drop_required_word")
        if target not in {i.id for i in manifest.items}:
            raise Rejection(500, f"reference fault drop_required_word={target!r}: not a corpus item id",
                            "InternalServerError")
        if target == item_id:
            ctx.faults.engage("drop_required_word")
            answer = dict(list(answer.items())[1:])  # the field a model left out
    phrasing = _PHRASINGS[(ctx.occurrence(f"media:{item_id}") - 1) % len(_PHRASINGS)]
    return Reply(content=phrasing(answer))


def _tool_reply(item_id: str) -> Reply:
    manifest = load_manifest()
    tool = manifest.tool_case
    start, end = manifest.item(item_id).interval_s or (0.0, 0.0)
    return Reply(tool_calls=[(tool.function["name"], {"event": tool.event, "start_s": start, "end_s": end})])


def _offers(req: ChatRequest, name: str) -> bool:
    return any((t.get("function") or {}).get("name") == name for t in req.tools if isinstance(t, Mapping))


def answer(req: ChatRequest, ctx: OracleContext) -> Reply | None:
    media = _media(req)
    if not media:
        return None
    found = _recognise(req, media)
    if found is not None:
        item_id, is_tool = found
        if not is_tool:
            return _item_reply(item_id, ctx)
        if _offers(req, load_manifest().tool_case.function["name"]):
            return _tool_reply(item_id)
    images = sum(1 for part, _ in media if part == "image_url")
    videos = len(media) - images
    admission = load_manifest().admission
    prompt = _prompt_key(req.last_user_text())
    if prompt == _prompt_key(admission["images_prompt"]):
        return Reply(content=str(images))
    if prompt == _prompt_key(admission["videos_prompt"]):
        return Reply(content=str(videos))
    return Reply(content=f"This message carries {images} image(s) and {videos} video(s).")

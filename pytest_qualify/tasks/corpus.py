"""The multimodal corpus: its manifest, its files and the data URLs a request carries them in.

The manifest (``media/manifest.toml``, installed as ``pytest_qualify.media``) describes every
media file as a list of draw operations and every corpus item as a prompt, its answer contract (one
JSON object, each fact in its own field) and the ground truth its files encode. The room's other
files: ``media_render.py`` draws and encodes the files from the manifest, ``media_decode.py``
decodes them (shared by the corpus tests and the reference server, which rejects malformed media
by really decoding it). No pytest here.
"""

from __future__ import annotations

import base64
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from pytest_qualify.graders.contract import Accept, Contract, Form, accepts

MEDIA_PACKAGE = "pytest_qualify.media"
MANIFEST = "manifest.toml"
GLYPHS = "glyphs.toml"
KINDS = ("image", "mixed", "video")
KIND_TITLES = {"image": "images", "mixed": "mixed", "video": "videos"}
MIME_BY_SUFFIX = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".mp4": "video/mp4"}
# The container names FFmpeg reports for a declared video MIME type: content that probes as
# something else (a PNG sent as video/mp4) is malformed, whatever a lenient decoder would make of it.
VIDEO_FORMATS = {"video/mp4": ("mov", "mp4")}
FONT_CELLS = (5, 7)  # glyph width and height in cells


class MediaError(ValueError):
    """Media that cannot be used: the message says what is wrong with it."""


# The event items' interval fields: seconds, graded within the item's tolerance; a unit may follow.
INTERVAL_FIELDS = ("start_s", "end_s")
SECOND_UNITS = ("seconds", "second", "secs", "sec", "s")


@dataclass(frozen=True)
class Item:
    id: str
    kind: str  # image | mixed | video
    files: tuple[str, ...]
    prompt: str  # the question; it names each field (the contract's instruction follows it)
    fields: Mapping[str, Accept]  # the answer contract: what each JSON field accepts
    truth: Mapping[str, Any]
    interval_s: tuple[float, float] | None = None
    tolerance_s: float = 0.5

    @property
    def schema(self) -> dict[str, Any]:
        """The reply's JSON Schema: every field required, no other field; a number field takes a
        JSON number or a string (so "2 or 3" is graded as the hedge it is, not as a type error)."""
        props = {name: {"type": ["number", "string"]} if accept.kind == "number" else {"type": "string"}
                 for name, accept in self.fields.items()}
        return {"type": "object", "properties": props, "required": list(self.fields), "additionalProperties": False}

    @property
    def contract(self) -> Contract:
        return Contract(Form.JSON, fields=self.fields, schema=self.schema)

    @property
    def request(self) -> str:
        """The text the model reads: the question, then the contract's instruction."""
        return f"{self.prompt}\n\n{self.contract.instruction()}"

    @property
    def answer(self) -> dict[str, Any]:
        """A correct reply's object (each field's first accepted form): what the reference says."""
        return {name: _as_json(accept) for name, accept in self.fields.items()}


def _as_json(accept: Accept) -> Any:
    if accept.kind != "number":
        return accept.forms[0]
    value = float(accept.forms[0])
    return int(value) if value.is_integer() and "." not in accept.forms[0] else value


def _item_fields(raw: Mapping[str, Any]) -> dict[str, Accept]:
    fields = accepts(raw.get("fields"))
    interval = raw.get("interval_s")
    if interval is not None:
        clash = [name for name in INTERVAL_FIELDS if name in fields]
        if clash:
            raise ValueError(f"manifest item {raw['id']}: {clash} come from interval_s, not from fields")
        tolerance = float(raw.get("tolerance_s", 0.5))
        for name, seconds in zip(INTERVAL_FIELDS, interval):
            fields[name] = Accept((str(float(seconds)),), kind="number", units=SECOND_UNITS, tolerance=tolerance)
    if not fields:
        raise ValueError(f"manifest item {raw['id']}: no answer fields")
    return fields


@dataclass(frozen=True)
class MalformedCase:
    id: str
    part: str  # image_url | video_url
    mime: str
    payload: Mapping[str, Any]


@dataclass(frozen=True)
class MediaToolCase:
    item: str
    prompt: str
    event: str
    tolerance_s: float
    function: Mapping[str, Any]  # the OpenAI tool's "function" object

    @property
    def tool(self) -> dict[str, Any]:
        return {"type": "function", "function": dict(self.function)}


@dataclass(frozen=True)
class Manifest:
    items: tuple[Item, ...]
    files: Mapping[str, Mapping[str, Any]]  # file name -> draw spec
    colours: Mapping[str, tuple[int, int, int]]
    corpus_dir: str
    admission: Mapping[str, str]
    malformed: tuple[MalformedCase, ...]
    tool_case: MediaToolCase
    stream_item: str

    def item(self, item_id: str) -> Item:
        for item in self.items:
            if item.id == item_id:
                return item
        raise KeyError(item_id)

    def of_kind(self, kind: str) -> tuple[Item, ...]:
        return tuple(i for i in self.items if i.kind == kind)

    def files_of_kind(self, kind: str) -> tuple[str, ...]:
        """Corpus file names whose MIME type is ``kind`` (image or video), in manifest order."""
        return tuple(name for name in self.files if mime_of(name).startswith(kind + "/"))


def media_root() -> Path:
    return Path(str(resources.files(MEDIA_PACKAGE)))


def parse_manifest(data: Mapping[str, Any]) -> Manifest:
    """Build a :class:`Manifest` from parsed TOML; ``ValueError`` names what is inconsistent."""
    files = {f["name"]: f for f in data["file"]}
    items = []
    for raw in data["item"]:
        missing = [name for name in raw["files"] if name not in files]
        if missing:
            raise ValueError(f"manifest item {raw['id']}: files {missing} have no [[file]] entry")
        if raw["kind"] not in KINDS:
            raise ValueError(f"manifest item {raw['id']}: kind {raw['kind']!r} is not one of {KINDS}")
        interval = raw.get("interval_s")
        items.append(Item(
            id=raw["id"], kind=raw["kind"], files=tuple(raw["files"]), prompt=raw["prompt"],
            fields=_item_fields(raw), truth=dict(raw.get("truth", {})),
            interval_s=(float(interval[0]), float(interval[1])) if interval else None,
            tolerance_s=float(raw.get("tolerance_s", 0.5)),
        ))
    ids = [i.id for i in items]
    if len(set(ids)) != len(ids):
        raise ValueError(f"manifest: duplicate item ids in {ids}")
    tc = data["tool_case"]
    manifest = Manifest(
        items=tuple(items),
        files=files,
        colours={name: tuple(rgb) for name, rgb in data["colours"].items()},  # type: ignore[misc]
        corpus_dir=data.get("corpus_dir", "corpus"),
        admission=dict(data["admission"]),
        malformed=tuple(MalformedCase(m["id"], m["part"], m["mime"], dict(m["payload"])) for m in data["malformed"]),
        tool_case=MediaToolCase(tc["item"], tc["prompt"], tc["event"], float(tc["tolerance_s"]), tc["function"]),
        stream_item=data["stream_case"]["item"],
    )
    for ref in (manifest.tool_case.item, manifest.stream_item):
        manifest.item(ref)  # KeyError if a case names an unknown item
    return manifest


@cache
def load_manifest() -> Manifest:
    """The installed corpus manifest."""
    return parse_manifest(tomllib.loads((media_root() / MANIFEST).read_text(encoding="utf-8")))


# -- files and data URLs -------------------------------------------------------------------------


def mime_of(name: str) -> str:
    return MIME_BY_SUFFIX[Path(name).suffix.lower()]


def file_path(name: str, manifest: Manifest | None = None) -> Path:
    manifest = manifest or load_manifest()
    return media_root() / manifest.corpus_dir / name


@cache
def file_bytes(name: str) -> bytes:
    return file_path(name).read_bytes()


def data_url(payload: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(payload).decode('ascii')}"


def media_part(name: str) -> dict[str, Any]:
    """An OpenAI content part (``image_url`` or ``video_url``) carrying a corpus file inline."""
    mime = mime_of(name)
    kind = "video_url" if mime.startswith("video/") else "image_url"
    return {"type": kind, kind: {"url": data_url(file_bytes(name), mime)}}


def user_message(files: Sequence[str], prompt: str) -> list[dict[str, Any]]:
    """One user message: the media first, then the question."""
    parts = [media_part(name) for name in files]
    parts.append({"type": "text", "text": prompt})
    return [{"role": "user", "content": parts}]


def malformed_part(case: MalformedCase) -> dict[str, Any]:
    """The content part of a malformed-media case, built from its payload recipe."""
    p = case.payload
    if "base64" in p:
        url = f"data:{case.mime};base64,{p['base64']}"
    else:
        if "file" in p:
            raw = file_bytes(p["file"])
            raw = raw[: int(len(raw) * float(p.get("keep_fraction", 1.0)))]
        elif "text" in p:
            raw = str(p["text"]).encode("utf-8")
        else:
            raise ValueError(f"malformed case {case.id}: payload needs file, text or base64")
        url = data_url(raw, case.mime)
    return {"type": case.part, case.part: {"url": url}}

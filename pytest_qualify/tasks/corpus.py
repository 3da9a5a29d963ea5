"""The multimodal corpus: its manifest, a deterministic generator, and media decoding.

The manifest (``media/manifest.toml``, installed as ``pytest_qualify.media``) describes every
media file as a list of draw operations and every corpus item as a prompt, its answer contract (one
JSON object, each fact in its own field) and the ground truth its files encode. :func:`generate` is a pure function of the manifest: it draws
the images with Pillow and encodes the videos as H.264/MP4 with PyAV. The decoders are shared by
the corpus tests and the reference server, which rejects malformed media by really decoding it.

No pytest here; Pillow and PyAV load only when a function needs them.

Run ``python -m pytest_qualify.tasks.corpus [OUT_DIR]`` to regenerate the files (default: the corpus
directory next to the manifest).
"""

from __future__ import annotations

import base64
import hashlib
import io
import sys
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from pytest_qualify.graders.contract import Accept, Contract, accepts

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
        return Contract("json", fields=self.fields, schema=self.schema)

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
class ToolCase:
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
    tool_case: ToolCase
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
        tool_case=ToolCase(tc["item"], tc["prompt"], tc["event"], float(tc["tolerance_s"]), tc["function"]),
        stream_item=data["stream_case"]["item"],
    )
    for ref in (manifest.tool_case.item, manifest.stream_item):
        manifest.item(ref)  # KeyError if a case names an unknown item
    return manifest


@cache
def load_manifest() -> Manifest:
    """The installed corpus manifest."""
    return parse_manifest(tomllib.loads((media_root() / MANIFEST).read_text(encoding="utf-8")))


@cache
def _glyphs() -> dict[str, tuple[str, ...]]:
    data = tomllib.loads((media_root() / GLYPHS).read_text(encoding="utf-8"))
    return {str(ch): tuple(rows) for ch, rows in data["glyph"].items()}


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


# -- generation ----------------------------------------------------------------------------------


def _rgb(colours: Mapping[str, Sequence[int]], name: str) -> tuple[int, int, int]:
    r, g, b = colours[name]
    return (int(r), int(g), int(b))


def _draw_text(draw: Any, op: Mapping[str, Any], fill: tuple[int, int, int]) -> None:
    glyphs = _glyphs()
    x0, y0 = op["xy"]
    scale = int(op["scale"])
    width, _ = FONT_CELLS
    for index, ch in enumerate(str(op["text"]).upper()):
        if ch == " ":
            continue
        left = x0 + index * (width + 1) * scale
        for row, cells in enumerate(glyphs[ch]):
            for col, cell in enumerate(cells):
                if cell == "#":
                    x, y = left + col * scale, y0 + row * scale
                    draw.rectangle([x, y, x + scale - 1, y + scale - 1], fill=fill)


def _draw_arrow(draw: Any, op: Mapping[str, Any], fill: tuple[int, int, int]) -> None:
    (tx, ty), (hx, hy) = op["tail"], op["head"]
    width = int(op["width"])
    length = ((hx - tx) ** 2 + (hy - ty) ** 2) ** 0.5
    ux, uy = (hx - tx) / length, (hy - ty) / length  # unit vector tail -> head
    head_len, head_half = 3 * width, 1.5 * width
    bx, by = hx - ux * head_len, hy - uy * head_len  # base of the head
    draw.line([(tx, ty), (bx, by)], fill=fill, width=width)
    draw.polygon([(hx, hy), (bx - uy * head_half, by + ux * head_half), (bx + uy * head_half, by - ux * head_half)], fill=fill)


def _draw_op(draw: Any, op: Mapping[str, Any], colours: Mapping[str, Sequence[int]], offset: tuple[float, float]) -> None:
    fill = _rgb(colours, op["fill"])
    dx, dy = offset
    kind = op["op"]
    if kind in ("rect", "circle"):
        x0, y0, x1, y1 = op["box"]
        box = [round(x0 + dx), round(y0 + dy), round(x1 + dx) - 1, round(y1 + dy) - 1]
        (draw.rectangle if kind == "rect" else draw.ellipse)(box, fill=fill)
    elif kind == "polygon":
        draw.polygon([(round(x + dx), round(y + dy)) for x, y in op["points"]], fill=fill)
    elif kind == "arrow":
        _draw_arrow(draw, op, fill)
    elif kind == "text":
        _draw_text(draw, {**op, "xy": (round(op["xy"][0] + dx), round(op["xy"][1] + dy))}, fill)
    else:
        raise ValueError(f"unknown draw operation {kind!r}")


def render_frame(spec: Mapping[str, Any], colours: Mapping[str, Sequence[int]], t_s: float | None = None) -> Any:
    """One PIL image: an image file, or a video's frame at time ``t_s``."""
    from PIL import Image, ImageDraw

    width, height = spec["size"]
    img = Image.new("RGB", (int(width), int(height)), _rgb(colours, spec["background"]))
    draw = ImageDraw.Draw(img)
    for op in spec.get("draw", ()):
        offset = (0.0, 0.0)
        if t_s is not None:
            start = float(op.get("from_s", 0.0))
            end = float(op.get("to_s", spec["seconds"]))
            # A small epsilon keeps frame times like 0.75 (= 3/4) on the intended side of an edge.
            if not (start - 1e-9 <= t_s < end - 1e-9):
                continue
            fraction = (t_s - start) / (end - start)
            mx, my = op.get("move", (0, 0))
            offset = (mx * fraction, my * fraction)
        _draw_op(draw, op, colours, offset)
    return img


def frame_count(spec: Mapping[str, Any]) -> int:
    return round(float(spec["seconds"]) * int(spec["fps"]))


def render_video_frames(spec: Mapping[str, Any], colours: Mapping[str, Sequence[int]]) -> list[Any]:
    fps = int(spec["fps"])
    return [render_frame(spec, colours, i / fps) for i in range(frame_count(spec))]


def _encode_video(frames: Sequence[Any], fps: int, path: Path) -> None:
    import av

    # One encoder thread and a fixed CRF: the output depends on the frames alone.
    with av.open(str(path), mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height = frames[0].size
        stream.pix_fmt = "yuv420p"
        stream.options = {"crf": "18", "preset": "medium", "threads": "1"}
        for img in frames:
            frame = av.VideoFrame.from_image(img)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)


def generate_file(name: str, spec: Mapping[str, Any], colours: Mapping[str, Sequence[int]], out_dir: Path) -> Path:
    path = out_dir / name
    mime = mime_of(name)
    if mime == "video/mp4":
        _encode_video(render_video_frames(spec, colours), int(spec["fps"]), path)
    elif mime == "image/png":
        render_frame(spec, colours).save(path, format="PNG", optimize=True)
    else:
        render_frame(spec, colours).save(path, format="JPEG", quality=int(spec.get("quality", 90)))
    return path


def generate(manifest: Manifest, out_dir: Path) -> list[Path]:
    """Write every file of the manifest into ``out_dir``; a pure function of the manifest."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return [generate_file(name, spec, manifest.colours, out_dir) for name, spec in manifest.files.items()]


# -- decoding ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decoded:
    """Decoded media: RGB24 frames (one for an image)."""

    kind: str  # image | video
    size: tuple[int, int]
    frames: tuple[bytes, ...]
    container: str = ""

    @property
    def fingerprint(self) -> str:
        """A hash of the decoded content, not of the encoded bytes."""
        h = hashlib.sha256(f"{self.kind}:{self.size}:{len(self.frames)}".encode())
        for frame in self.frames:
            h.update(frame)
        return h.hexdigest()

    def frame_means(self) -> list[tuple[float, float, float]]:
        """Per frame, the mean of each RGB channel."""
        out = []
        for frame in self.frames:
            n = len(frame) // 3
            out.append(tuple(sum(frame[c::3]) / n for c in range(3)))  # type: ignore[misc]
        return out


def decode_image(payload: bytes) -> Decoded:
    """Decode an image fully; :class:`MediaError` says why it cannot be."""
    from PIL import Image

    if not payload:
        raise MediaError("empty image payload (0 bytes)")
    try:
        with Image.open(io.BytesIO(payload)) as img:
            img.load()
            rgb = img.convert("RGB")
    except Exception as exc:  # Pillow raises several types for undecodable data
        raise MediaError(f"cannot decode image: {type(exc).__name__}: {exc}") from None
    return Decoded("image", rgb.size, (rgb.tobytes(),))


def decode_video(payload: bytes, mime: str = "video/mp4") -> Decoded:
    """Decode every frame of a video; :class:`MediaError` says why it cannot be."""
    import av

    if not payload:
        raise MediaError("empty video payload (0 bytes)")
    expected = VIDEO_FORMATS.get(mime)
    try:
        with av.open(io.BytesIO(payload), mode="r") as container:
            name = container.format.name
            if expected is not None and not any(part in expected for part in name.split(",")):
                raise MediaError(f"content is {name!r}, not the declared {mime}")
            if not container.streams.video:
                raise MediaError("no video stream")
            frames = [f.to_ndarray(format="rgb24").tobytes() for f in container.decode(video=0)]
            stream = container.streams.video[0]
            size = (stream.codec_context.width, stream.codec_context.height)
    except MediaError:
        raise
    except Exception as exc:  # PyAV raises FFmpegError subclasses and others
        raise MediaError(f"cannot decode video: {type(exc).__name__}: {exc}") from None
    if not frames:
        raise MediaError("video has no decodable frames")
    return Decoded("video", size, tuple(frames), name)


def decode_data_url(url: str, part: str) -> Decoded:
    """Decode an ``image_url``/``video_url`` data URL; :class:`MediaError` for anything malformed."""
    if not url.startswith("data:"):
        raise MediaError("only data: URLs are accepted here")
    header, sep, body = url[5:].partition(",")
    if not sep:
        raise MediaError("data URL has no ',' before its payload")
    mime, _, encoding = header.partition(";")
    if encoding != "base64":
        raise MediaError(f"data URL must be base64-encoded, got {header!r}")
    want = "video/" if part == "video_url" else "image/"
    if not mime.startswith(want):
        raise MediaError(f"{part} carries MIME type {mime!r}, expected {want}*")
    try:
        payload = base64.b64decode(body, validate=True)
    except ValueError as exc:
        raise MediaError(f"invalid base64 payload: {exc}") from None
    return decode_video(payload, mime) if part == "video_url" else decode_image(payload)


@cache
def decoded_file(name: str) -> Decoded:
    """A committed corpus file, decoded (cached: the reference server indexes the corpus by it)."""
    payload = file_bytes(name)
    return decode_video(payload, mime_of(name)) if mime_of(name).startswith("video/") else decode_image(payload)


# -- the per-kind result table ---------------------------------------------------------------------


def kind_table(results: Iterable[tuple[str, str, bool]]) -> list[str]:
    """Per-kind corpus results from ``(kind, item id, passed)`` per item and repetition.

    An item counts as passed only when it passed in every repetition (pass^k), as in the gate;
    attempts count each repetition separately.
    """
    items: dict[str, dict[str, bool]] = {}
    attempts: dict[str, list[int]] = {}
    for kind, item, passed in results:
        items.setdefault(kind, {})
        items[kind][item] = items[kind].get(item, True) and passed
        counts = attempts.setdefault(kind, [0, 0])
        counts[0] += int(passed)
        counts[1] += 1
    rows = []
    totals = [0, 0, 0, 0]  # items passed, items, attempts passed, attempts
    for kind in sorted(items, key=lambda k: (KINDS.index(k) if k in KINDS else len(KINDS), k)):
        row = [sum(items[kind].values()), len(items[kind]), *attempts[kind]]
        totals = [t + x for t, x in zip(totals, row)]
        rows.append((KIND_TITLES.get(kind, kind), row))
    rows.append(("total", totals))
    lines = ["Corpus kind | Items passed | Attempts passed", "------------+--------------+----------------"]
    for title, (passed, n, ok, tries) in rows:
        lines.append(f"{title:<11} | {f'{passed}/{n}':<12} | {ok}/{tries}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    manifest = load_manifest()
    out = Path(args[0]) if args else media_root() / manifest.corpus_dir
    paths = generate(manifest, out)
    total = sum(p.stat().st_size for p in paths)
    print(f"wrote {len(paths)} files ({total:,} bytes) to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

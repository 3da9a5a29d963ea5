"""Media decoding: an image with Pillow, every frame of a video with PyAV, a data URL checked for
its MIME type and base64. Shared by the corpus tests and the reference server, which rejects
malformed media by really decoding it. Pillow and PyAV load only when a function needs them."""

from __future__ import annotations

import base64
import hashlib
import io
from dataclasses import dataclass
from functools import cache

from pytest_qualify.tasks.corpus import VIDEO_FORMATS, MediaError, file_bytes, mime_of


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

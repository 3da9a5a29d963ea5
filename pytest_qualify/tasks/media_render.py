"""The corpus files drawn from the manifest: a pure function of it. Images are drawn with Pillow,
videos encoded as H.264/MP4 with PyAV (both load only when a function needs them).

Run ``python -m pytest_qualify.tasks.media_render [OUT_DIR]`` to regenerate the files (default:
the corpus directory next to the manifest).
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from pytest_qualify.tasks.corpus import FONT_CELLS, GLYPHS, Manifest, load_manifest, media_root, mime_of


@cache
def _glyphs() -> dict[str, tuple[str, ...]]:
    data = tomllib.loads((media_root() / GLYPHS).read_text(encoding="utf-8"))
    return {str(ch): tuple(rows) for ch, rows in data["glyph"].items()}


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

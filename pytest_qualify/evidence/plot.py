"""A PNG of TTFT against prompt tokens, drawn with Pillow.

Pillow is already a runtime dependency (the media corpus is generated with it), so the plot is in
every bundle of a plain ``pip install -e .``; matplotlib would add a plotting stack (and its
fonttools, kiwisolver, contourpy wheels) to every CI image for one scatter plot. What the plot
needs — axes with round ticks, one colour per lane, a legend, a title — is a page of drawing.
Pillow is imported here only, lazily: loading the plugin does not import it.

The same figures give the same bytes (no timestamp or software tag in the PNG), so SHA256SUMS and
the provenance statement are reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

PLOT_FILE = "ttft-vs-prompt-tokens.png"
WIDTH, HEIGHT = 825, 495
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 80, 24, 44, 62
# Colour-blind-safe (Okabe-Ito), in lane order; "other items" is grey.
PALETTE = ((0, 114, 178), (230, 159, 0), (0, 158, 115), (204, 121, 167), (86, 180, 233), (213, 94, 0),
           (240, 228, 66), (0, 0, 0))
OTHER = (150, 150, 150)


class PlotUnavailable(RuntimeError):
    """Pillow cannot draw here (kept for callers that still catch it; Pillow is a dependency)."""


def nice_ticks(lo: float, hi: float, target: int = 6) -> list[float]:
    """Round tick values (1, 2, 2.5, 5 × 10^k steps) covering lo..hi."""
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(1, target - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    start = math.floor(lo / step) * step
    ticks = []
    value = start
    while value <= hi + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    if ticks[-1] < hi:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def _tick_label(value: float, seconds: bool) -> str:
    if seconds:
        return f"{value:g}"
    if abs(value) >= 1000:
        return f"{value / 1000:g}K"
    return f"{value:g}"


def plot_ttft(points: Sequence[Mapping[str, Any]], path: Path, title: str, simulated: bool) -> Path:
    """Scatter every measured request's TTFT over its prompt tokens, one colour per lane."""
    from PIL import Image, ImageDraw, ImageFont

    def font(size: int) -> Any:
        try:
            return ImageFont.load_default(size=size)
        except TypeError:  # Pillow < 10.1: one bitmap size
            return ImageFont.load_default()

    small, normal = font(11), font(13)
    img = Image.new("RGB", (WIDTH, HEIGHT), "white")
    draw = ImageDraw.Draw(img)
    x0, y0, x1, y1 = MARGIN_LEFT, MARGIN_TOP, WIDTH - MARGIN_RIGHT, HEIGHT - MARGIN_BOTTOM

    # The embedded font has no dashes beyond ASCII.
    full_title = (title + (" - SIMULATED reference server" if simulated else "")).replace("\u2014", "-").replace("\u2013", "-")
    draw.text(((x0 + x1) / 2, 14), full_title, fill="black", font=normal, anchor="mt")

    xs = [float(p["prompt_tokens"]) for p in points]
    ys = [float(p["ttft_s"]) for p in points]
    xticks = nice_ticks(0.0, max(xs, default=1.0))
    yticks = nice_ticks(0.0, max(ys, default=1.0))
    xmax, ymax = xticks[-1], yticks[-1]

    def sx(v: float) -> float:
        return x0 + (v / xmax) * (x1 - x0)

    def sy(v: float) -> float:
        return y1 - (v / ymax) * (y1 - y0)

    for t in xticks:
        draw.line([(sx(t), y0), (sx(t), y1)], fill=(232, 232, 232))
        draw.line([(sx(t), y1), (sx(t), y1 + 4)], fill="black")
        draw.text((sx(t), y1 + 7), _tick_label(t, False), fill="black", font=small, anchor="mt")
    for t in yticks:
        draw.line([(x0, sy(t)), (x1, sy(t))], fill=(232, 232, 232))
        draw.line([(x0 - 4, sy(t)), (x0, sy(t))], fill="black")
        draw.text((x0 - 7, sy(t)), _tick_label(t, True), fill="black", font=small, anchor="rm")
    draw.rectangle([x0, y0, x1, y1], outline="black")
    draw.text(((x0 + x1) / 2, HEIGHT - 16), "prompt tokens (server usage)", fill="black", font=normal, anchor="mb")
    label = "TTFT, client-observed (s)"
    box = draw.textbbox((0, 0), label, font=normal)
    side = Image.new("RGB", (box[2] - box[0] + 4, box[3] - box[1] + 6), "white")
    ImageDraw.Draw(side).text((2, 1 - box[1]), label, fill="black", font=normal)
    side = side.rotate(90, expand=True)
    img.paste(side, (8, int((y0 + y1) / 2 - side.height / 2)))

    if not points:
        draw.text(((x0 + x1) / 2, (y0 + y1) / 2), "no streamed request recorded", fill="black", font=normal, anchor="mm")
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for p in points:
        groups.setdefault(f"{p['lane']} lane" if p.get("lane") else "other items", []).append(p)
    # Lanes in prompt-size order (32K before 128K), then everything else.
    lanes = sorted((n for n in groups if n != "other items"),
                   key=lambda n: (min(float(p["prompt_tokens"]) for p in groups[n]), n))
    names = lanes + (["other items"] if "other items" in groups else [])
    colours = {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(lanes)}
    colours["other items"] = OTHER
    # "other items" first, so lane points are drawn on top of them.
    for name in (["other items"] if "other items" in groups else []) + lanes:
        for p in groups[name]:
            cx, cy = sx(float(p["prompt_tokens"])), sy(float(p["ttft_s"]))
            draw.ellipse([cx - 3.5, cy - 3.5, cx + 3.5, cy + 3.5], fill=colours[name], outline=(40, 40, 40))
    # Legend, top left inside the axes.
    lx, ly = x0 + 10, y0 + 8
    for name in names:
        draw.ellipse([lx, ly + 2, lx + 8, ly + 10], fill=colours[name], outline=(40, 40, 40))
        draw.text((lx + 14, ly + 6), f"{name} (n={len(groups[name])})", fill="black", font=small, anchor="lm")
        ly += 16
    img.save(path, format="PNG", optimize=False)
    return path

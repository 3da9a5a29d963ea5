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
WIDTH, HEIGHT = 1000, 495
# The legend sits in the right margin, off the data.
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 80, 210, 44, 62
LOAD_HEIGHT = 330  # the load panel under the TTFT panel, when the load module ran
# Colour-blind-safe (Okabe-Ito), in lane order; "other items" is grey.
PALETTE = ((0, 114, 178), (230, 159, 0), (0, 158, 115), (204, 121, 167), (86, 180, 233), (213, 94, 0),
           (240, 228, 66), (0, 0, 0))
OTHER = (150, 150, 150)
FAILED = (200, 0, 0)
LIMIT = (120, 0, 0)
EDGE = (90, 90, 90)
SWEEP = (0, 90, 140)  # the sweep module's samples and medians
CLAIM = (120, 40, 150)  # the recipe's claimed TTFT
PERCENTILE_COLOURS = {50: PALETTE[0], 95: PALETTE[1], 99: PALETTE[5]}


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


def _dashed(draw: Any, a: tuple[float, float], b: tuple[float, float], fill: Any, dash: float = 6.0,
            width: int = 1) -> None:
    (xa, ya), (xb, yb) = a, b
    length = math.hypot(xb - xa, yb - ya)
    steps = max(1, int(length // dash))
    for i in range(0, steps, 2):
        t0, t1 = i / steps, min(1.0, (i + 1) / steps)
        draw.line([(xa + (xb - xa) * t0, ya + (yb - ya) * t0), (xa + (xb - xa) * t1, ya + (yb - ya) * t1)],
                  fill=fill, width=width)


def _cross(draw: Any, cx: float, cy: float, r: float = 6.0) -> None:
    draw.line([(cx - r, cy - r), (cx + r, cy + r)], fill=FAILED, width=2)
    draw.line([(cx - r, cy + r), (cx + r, cy - r)], fill=FAILED, width=2)


def _font(size: int) -> Any:
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1: one bitmap size
        return ImageFont.load_default()


def _side_label(img: Any, label: str, font: Any, x: int, y_mid: float) -> None:
    from PIL import Image, ImageDraw

    draw = ImageDraw.Draw(img)
    box = draw.textbbox((0, 0), label, font=font)
    side = Image.new("RGB", (box[2] - box[0] + 4, box[3] - box[1] + 6), "white")
    ImageDraw.Draw(side).text((2, 1 - box[1]), label, fill="black", font=font)
    side = side.rotate(90, expand=True)
    img.paste(side, (x, int(y_mid - side.height / 2)))


class _Legend:
    """Legend rows in the right margin, outside every axis."""

    def __init__(self, draw: Any, x: float, y: float, font: Any) -> None:
        self.draw, self.x, self.y, self.font = draw, x, y, font

    def row(self, text: str, mark: str, colour: Any) -> None:
        d, x, y = self.draw, self.x, self.y
        if mark == "dot":
            d.ellipse([x, y + 2, x + 8, y + 10], fill=colour, outline=(40, 40, 40))
        elif mark == "cross":
            _cross(d, x + 4, y + 6, 4)
        elif mark == "square":
            d.rectangle([x, y + 2, x + 8, y + 10], fill=colour, outline=(40, 40, 40))
        elif mark == "diamond":
            d.polygon([(x + 4, y), (x + 9, y + 6), (x + 4, y + 12), (x - 1, y + 6)], outline=colour)
        elif mark == "line":
            d.line([(x - 2, y + 6), (x + 10, y + 6)], fill=colour, width=2)
        else:  # dashed
            _dashed(d, (x - 2, y + 6), (x + 12, y + 6), colour, 3, 2)
        d.text((x + 16, y + 6), text, fill="black", font=self.font, anchor="lm")
        self.y += 16


def plot_ttft(points: Sequence[Mapping[str, Any]], path: Path, title: str, simulated: bool, *,
              window_tokens: int | None = None, limits: Sequence[Mapping[str, Any]] = (),
              load: Mapping[str, Any] | None = None, load_limits: Sequence[Mapping[str, Any]] = (),
              sweep: Sequence[Mapping[str, Any]] = (), claims: Sequence[Mapping[str, Any]] = ()) -> Path:
    """Scatter every measured request's TTFT over its prompt tokens, one colour per lane; the SLO
    TTFT limits drawn (``limits``: ``{"lane": name or None, "ttft_s": limit, "label": ...}``), points
    of failed items or over their lane's limit crossed out, the window's edge a vertical line, the
    legend in the right margin. With ``load`` (the summary's ``timing.load``), a second panel: TTFT
    and TPOT percentiles against concurrency, ``[slo.load]`` limits drawn (``load_limits``:
    ``{"metric": "ttft_s_p95", "limit": s}``) and every point over its limit crossed out. ``sweep``:
    the sweep module's points (``timing.sweep.points``), every sample and the median per size;
    ``claims``: the recipe's TTFT claims (``{"prompt_tokens", "ttft_s": claimed, "bound": held up to,
    "status"}``), a diamond at the claimed value and a bar at its tolerance's edge, crossed when broken."""
    from PIL import Image, ImageDraw

    small, normal = _font(11), _font(13)
    levels = list((load or {}).get("levels") or [])
    height = HEIGHT + (LOAD_HEIGHT if levels else 0)
    img = Image.new("RGB", (WIDTH, height), "white")
    draw = ImageDraw.Draw(img)
    x0, y0, x1, y1 = MARGIN_LEFT, MARGIN_TOP, WIDTH - MARGIN_RIGHT, HEIGHT - MARGIN_BOTTOM

    # The embedded font has no dashes beyond ASCII.
    full_title = (title + (" - SIMULATED reference server" if simulated else "")).replace("\u2014", "-").replace("\u2013", "-")
    draw.text(((x0 + x1) / 2, 14), full_title, fill="black", font=normal, anchor="mt")

    samples = [(float(p["prompt_tokens"]), float(v)) for p in sweep for v in p.get("ttft_s_samples") or ()]
    xs = [float(p["prompt_tokens"]) for p in points] + [x for x, _ in samples] + [float(c["prompt_tokens"]) for c in claims]
    ys = [float(p["ttft_s"]) for p in points] + [y for _, y in samples] + [float(c["bound"] or c["ttft_s"]) for c in claims]
    limit_ys = [float(lim["ttft_s"]) for lim in limits]
    xticks = nice_ticks(0.0, max(xs + ([float(window_tokens)] if window_tokens else []), default=1.0))
    yticks = nice_ticks(0.0, max(ys + limit_ys, default=1.0))
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
    _side_label(img, "TTFT at the first chunk, client-observed (s)", normal, 8, (y0 + y1) / 2)

    if not points and not samples:
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
    lane_limit = {str(lim["lane"]): float(lim["ttft_s"]) for lim in limits if lim.get("lane")}
    run_limits = [lim for lim in limits if not lim.get("lane")]

    if window_tokens:
        _dashed(draw, (sx(window_tokens), y0), (sx(window_tokens), y1), EDGE, 5, 2)
        draw.text((sx(window_tokens) - 4, y0 + 4), f"window {window_tokens:,}", fill=EDGE, font=small, anchor="rt")
    for lim in run_limits:
        _dashed(draw, (x0, sy(float(lim["ttft_s"]))), (x1, sy(float(lim["ttft_s"]))), LIMIT, 6, 2)
    for name in lanes:
        lane = name[: -len(" lane")]
        if lane in lane_limit:
            span = [float(p["prompt_tokens"]) for p in groups[name]]
            ya = sy(lane_limit[lane])
            _dashed(draw, (max(x0, sx(min(span)) - 24), ya), (min(x1, sx(max(span)) + 24), ya), colours[name], 4, 2)
    failed = 0
    # "other items" first, so lane points are drawn on top of them.
    for name in (["other items"] if "other items" in groups else []) + lanes:
        for p in groups[name]:
            cx, cy = sx(float(p["prompt_tokens"])), sy(float(p["ttft_s"]))
            draw.ellipse([cx - 3.5, cy - 3.5, cx + 3.5, cy + 3.5], fill=colours[name], outline=(40, 40, 40))
            over = p.get("lane") in lane_limit and float(p["ttft_s"]) > lane_limit[str(p["lane"])]
            if p.get("outcome") not in (None, "passed") or over:
                _cross(draw, cx, cy)
                failed += 1
    for x, y in samples:
        cx, cy = sx(x), sy(y)
        draw.rectangle([cx - 2.5, cy - 2.5, cx + 2.5, cy + 2.5], outline=SWEEP)
    for p in sweep:
        if p.get("ttft_s") is not None:
            cx, cy = sx(float(p["prompt_tokens"])), sy(float(p["ttft_s"]))
            draw.rectangle([cx - 4, cy - 4, cx + 4, cy + 4], fill=SWEEP, outline=(40, 40, 40))
    broken = 0
    for c in claims:
        cx, cy = sx(float(c["prompt_tokens"])), sy(float(c["ttft_s"]))
        if c.get("bound") is not None:
            yb = sy(float(c["bound"]))
            _dashed(draw, (cx, cy), (cx, yb), CLAIM, 3, 2)
            draw.line([(cx - 7, yb), (cx + 7, yb)], fill=CLAIM, width=2)
        draw.polygon([(cx, cy - 6), (cx + 6, cy), (cx, cy + 6), (cx - 6, cy)], outline=CLAIM)
        if c.get("status") == "broken":
            _cross(draw, cx, cy)
            broken += 1
    legend = _Legend(draw, x1 + 18, y0 + 2, small)
    for name in names:
        legend.row(f"{name} (n={len(groups[name])})", "dot", colours[name])
    if samples:
        legend.row(f"sweep median ({len(samples)} samples)", "square", SWEEP)
    if claims:
        legend.row("recipe's claimed TTFT", "diamond", CLAIM)
        legend.row("  held up to (tolerance)", "line", CLAIM)
        if broken:
            legend.row(f"claim broken ({broken})", "cross", FAILED)
    for name in lanes:
        lane = name[: -len(" lane")]
        if lane in lane_limit:
            legend.row(f"SLO {lane} TTFT <= {lane_limit[lane]:g} s", "dashed", colours[name])
    for lim in run_limits:
        legend.row(str(lim.get("label") or f"SLO TTFT <= {float(lim['ttft_s']):g} s"), "dashed", LIMIT)
    if window_tokens:
        legend.row("window edge", "dashed", EDGE)
    if failed:
        legend.row(f"failed or over its limit ({failed})", "cross", FAILED)
    if levels:
        _load_panel(img, draw, levels, load_limits, HEIGHT, small, normal)
    img.save(path, format="PNG", optimize=False)
    return path


def _load_panel(img: Any, draw: Any, levels: Sequence[Mapping[str, Any]], load_limits: Sequence[Mapping[str, Any]],
                top: int, small: Any, normal: Any) -> None:
    """TTFT and TPOT p50/p95/p99 against the concurrency levels, side by side, limits drawn."""
    draw.line([(0, top), (WIDTH, top)], fill=(200, 200, 200))
    draw.text(((MARGIN_LEFT + WIDTH - MARGIN_RIGHT) / 2, top + 10),
              "Load: latency percentiles against concurrency (decode probes)", fill="black", font=normal, anchor="mt")
    limits = {str(lim["metric"]): float(lim["limit"]) for lim in load_limits}
    gap = 70
    width = (WIDTH - MARGIN_RIGHT - MARGIN_LEFT - gap) / 2
    crossed = 0
    for n, metric in enumerate(("ttft_s", "tpot_s")):
        x0 = MARGIN_LEFT + n * (width + gap)
        x1, y0, y1 = x0 + width, top + 40, top + LOAD_HEIGHT - 50
        series = {q: [r.get(f"{metric}_p{q}") for r in levels] for q in PERCENTILE_COLOURS}
        values = [v for vs in series.values() for v in vs if v is not None]
        values += [v for k, v in limits.items() if k.startswith(metric)]
        yticks = nice_ticks(0.0, max(values, default=1.0), target=5)
        ymax = yticks[-1]

        def sx(i: int) -> float:
            return x0 + (i + 0.5) / len(levels) * (x1 - x0)

        def sy(v: float) -> float:
            return y1 - (v / ymax) * (y1 - y0)

        for t in yticks:
            draw.line([(x0, sy(t)), (x1, sy(t))], fill=(232, 232, 232))
            draw.text((x0 - 7, sy(t)), f"{t * 1000:g}", fill="black", font=small, anchor="rm")
        for i, r in enumerate(levels):
            bad = bool(r.get("failed"))
            label = f"{r['concurrency']}" + (f" ({r['failed']} failed)" if bad else "")
            draw.text((sx(i), y1 + 7), label, fill=FAILED if bad else "black", font=small, anchor="mt")
        draw.rectangle([x0, y0, x1, y1], outline="black")
        draw.text(((x0 + x1) / 2, y1 + 24), "concurrency", fill="black", font=small, anchor="mt")
        _side_label(img, f"{'TTFT, first chunk' if metric == 'ttft_s' else 'TPOT'} (ms)", small, int(x0 - 62), (y0 + y1) / 2)
        for q, colour in PERCENTILE_COLOURS.items():
            limit = limits.get(f"{metric}_p{q}")
            if limit is not None:
                _dashed(draw, (x0, sy(limit)), (x1, sy(limit)), colour, 6, 2)
            pts = [(sx(i), sy(v), v) for i, v in enumerate(series[q]) if v is not None]
            if len(pts) > 1:
                draw.line([(a, b) for a, b, _ in pts], fill=colour, width=2)
            for a, b, v in pts:
                draw.ellipse([a - 3, b - 3, a + 3, b + 3], fill=colour)
                if limit is not None and v > limit:
                    _cross(draw, a, b)
                    crossed += 1
    legend = _Legend(draw, WIDTH - MARGIN_RIGHT + 18, top + 42, small)
    for q, colour in PERCENTILE_COLOURS.items():
        legend.row(f"p{q}", "line", colour)
    if limits:
        legend.row("[slo.load] limit (its colour)", "dashed", (60, 60, 60))
    if crossed:
        legend.row(f"over its limit ({crossed})", "cross", FAILED)

"""The multimodal corpus: manifest and files agree, generation is deterministic and quick, the
ground truth is really in the pixels, the answer contracts agree with it, and every reference answer
passes its own contract while every field of it is load-bearing.

Files are compared DECODED (pixels, frame counts, frame means), never byte for byte: an H.264
encoder need not be byte-stable across versions, while what a model sees must not change.
"""

from __future__ import annotations

import json
import time
from collections import deque
from pathlib import Path

import pytest

from pytest_qualify.tasks import corpus, media_render
from pytest_qualify.tasks.corpus import load_manifest, mime_of
from pytest_qualify.tasks.kind_table import kind_table
from pytest_qualify.tasks.media_decode import decode_image, decode_video, decoded_file
from pytest_qualify.tasks.media_render import frame_count
from pytest_qualify.graders.media import grade_item

MANIFEST = load_manifest()
ITEMS = MANIFEST.items
CORPUS_BYTES_LIMIT = 2_000_000
GENERATION_SECONDS_LIMIT = 20.0  # a few seconds on one core; the margin is for a loaded CI machine


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory) -> tuple[Path, float]:
    out = tmp_path_factory.mktemp("corpus")
    t0 = time.perf_counter()
    media_render.generate(MANIFEST, out)
    return out, time.perf_counter() - t0


def _decode(path: Path):
    data = path.read_bytes()
    return decode_video(data, mime_of(path.name)) if mime_of(path.name).startswith("video/") else decode_image(data)


# -- the manifest --------------------------------------------------------------------------------


def test_corpus_has_12_images_4_mixed_14_videos():
    assert [len(MANIFEST.of_kind(k)) for k in ("image", "mixed", "video")] == [12, 4, 14]


def test_item_media_matches_kind():
    for item in ITEMS:
        kinds = {mime_of(name).split("/")[0] for name in item.files}
        expected = {"image": {"image"}, "video": {"video"}, "mixed": {"image", "video"}}[item.kind]
        assert kinds == expected, item.id


def test_items_fit_the_262k_media_limits():
    from pytest_qualify.profiles import load_profile

    limits = load_profile("262k").limits
    for item in ITEMS:
        images = sum(mime_of(n).startswith("image/") for n in item.files)
        assert images <= limits.images_per_request and len(item.files) - images <= limits.videos_per_request, item.id


def test_committed_files_are_exactly_the_manifest_files():
    folder = corpus.media_root() / MANIFEST.corpus_dir
    assert sorted(p.name for p in folder.iterdir()) == sorted(MANIFEST.files)


def test_corpus_is_small():
    folder = corpus.media_root() / MANIFEST.corpus_dir
    assert sum(p.stat().st_size for p in folder.iterdir()) < CORPUS_BYTES_LIMIT


def test_event_items_ask_the_event_and_its_interval():
    events = [i for i in ITEMS if i.interval_s is not None]
    assert {i.id for i in events} == {"video-13", "video-14"}
    for item in events:
        assert list(item.fields) == ["event", "start_s", "end_s"] and item.truth["banner"] == "ALERT"
        assert item.fields["event"].forms == ("alert",)
        assert [float(item.fields[k].forms[0]) for k in ("start_s", "end_s")] == list(item.interval_s)
        assert {item.fields[k].tolerance for k in ("start_s", "end_s")} == {item.tolerance_s}


def test_every_prompt_names_its_fields_and_states_the_contract():
    for item in ITEMS:
        for name in item.fields:
            assert name in item.prompt, (item.id, name)
        assert item.request.startswith(item.prompt) and "Reply with one JSON object only" in item.request
        assert json.dumps(item.schema, separators=(",", ":")) in item.request


@pytest.mark.parametrize("item", ITEMS, ids=[i.id for i in ITEMS])
def test_graded_fields_are_the_ground_truth(item):
    # Every graded value is one the media encodes (truth, checked against the pixels below).
    truths = {str(v).casefold() for v in item.truth.values()} | {str(float(s)) for s in item.interval_s or ()}
    for name, accept in item.fields.items():
        assert accept.forms[0].casefold() in truths, (item.id, name, accept.forms)


def test_parse_manifest_rejects_interval_fields_written_twice():
    import tomllib

    data = tomllib.loads((corpus.media_root() / corpus.MANIFEST).read_text())
    event = next(raw for raw in data["item"] if "interval_s" in raw)
    event["fields"]["start_s"] = 2
    with pytest.raises(ValueError, match="come from interval_s"):
        corpus.parse_manifest(data)


def test_cases_name_real_items():
    assert MANIFEST.item(MANIFEST.tool_case.item).interval_s is not None
    assert MANIFEST.item(MANIFEST.stream_item).kind == "video"


def test_parse_manifest_rejects_a_missing_file_entry():
    import tomllib

    data = tomllib.loads((corpus.media_root() / corpus.MANIFEST).read_text())
    data["item"][0]["files"] = ["nowhere.png"]
    with pytest.raises(ValueError, match="nowhere.png"):
        corpus.parse_manifest(data)


# -- the reference answers against their own contracts ---------------------------------------------


def _grade(item, content):
    return grade_item(item.id, content, item.contract, finish_reason="stop")


@pytest.mark.parametrize("item", ITEMS, ids=[i.id for i in ITEMS])
def test_reference_answer_passes(item):
    verdict = _grade(item, json.dumps(item.answer))
    assert verdict.ok, verdict.reason


def _wrong(value):
    if isinstance(value, (int, float)):
        return value + 1 if isinstance(value, int) else value + 1.5
    return "none" if value != "none" else "alert"


@pytest.mark.parametrize("item", ITEMS, ids=[i.id for i in ITEMS])
def test_each_field_is_load_bearing(item):
    # A wrong value in any one field is a miss; any one field left out is a format failure.
    for name, value in item.answer.items():
        wrong = _grade(item, json.dumps({**item.answer, name: _wrong(value)}))
        assert not wrong.ok and not wrong.is_format and f"field {name!r}" in wrong.reason, (item.id, name)
        missing = _grade(item, json.dumps({k: v for k, v in item.answer.items() if k != name}))
        assert not missing.ok and missing.is_format and name in missing.reason, (item.id, name)


# -- regeneration: deterministic, quick, equal to the committed files --------------------------------


def test_generation_takes_seconds(regenerated):
    _, seconds = regenerated
    assert seconds < GENERATION_SECONDS_LIMIT


@pytest.mark.parametrize("name", list(MANIFEST.files))
def test_regenerated_file_decodes_like_the_committed_one(regenerated, name):
    out, _ = regenerated
    fresh, committed = _decode(out / name), decoded_file(name)
    spec = MANIFEST.files[name]
    assert fresh.size == committed.size == tuple(spec["size"])
    if mime_of(name) == "image/png":
        assert fresh.frames == committed.frames  # lossless: pixel-identical
        return
    expected_frames = frame_count(spec) if mime_of(name).startswith("video/") else 1
    assert len(fresh.frames) == len(committed.frames) == expected_frames
    for i, (a, b) in enumerate(zip(fresh.frame_means(), committed.frame_means())):
        assert max(abs(x - y) for x, y in zip(a, b)) <= 1.0, f"{name} frame {i}: means {a} vs {b}"
    for i, (a, b) in enumerate(zip(fresh.frames, committed.frames)):
        diff = sum(abs(x - y) for x, y in zip(a[::7], b[::7])) / len(a[::7])
        assert diff <= 2.0, f"{name} frame {i}: mean absolute pixel difference {diff:.2f}"


def test_generation_is_a_pure_function_of_the_manifest(regenerated, tmp_path):
    out, _ = regenerated
    name = "video-13.mp4"
    media_render.generate_file(name, MANIFEST.files[name], MANIFEST.colours, tmp_path)
    assert _decode(tmp_path / name).fingerprint == _decode(out / name).fingerprint
    changed = {**MANIFEST.files[name], "background": "black"}
    media_render.generate_file(name, changed, MANIFEST.colours, tmp_path)
    assert _decode(tmp_path / name).fingerprint != _decode(out / name).fingerprint


# -- the ground truth is in the pixels ------------------------------------------------------------


def _near(pixel, rgb, tolerance=60):
    return sum(abs(p - c) for p, c in zip(pixel, rgb)) <= tolerance


def _pixels(frame: bytes):
    return [tuple(frame[i : i + 3]) for i in range(0, len(frame), 3)]


def _components(frame: bytes, size, rgb) -> int:
    """Connected regions (4-neighbour) of pixels near ``rgb``, ignoring specks under 20 pixels."""
    w, h = size
    mask = [_near(p, rgb) for p in _pixels(frame)]
    seen, regions = [False] * len(mask), 0
    for start in range(len(mask)):
        if not mask[start] or seen[start]:
            continue
        seen[start], queue, n = True, deque([start]), 0
        while queue:
            i = queue.popleft()
            n += 1
            x, y = i % w, i // w
            for j in ((i - 1) if x else -1, (i + 1) if x < w - 1 else -1, i - w, i + w):
                if 0 <= j < len(mask) and mask[j] and not seen[j]:
                    seen[j] = True
                    queue.append(j)
        regions += n >= 20
    return regions


def _nearest_colour(mean) -> str:
    return min(MANIFEST.colours, key=lambda c: sum((m - v) ** 2 for m, v in zip(mean, MANIFEST.colours[c])))


def _files(item, kind):
    return [n for n in item.files if mime_of(n).startswith(kind + "/")]


def _centroid(frame: bytes, size, background) -> tuple[float, float]:
    w, _ = size
    points = [(i % w, i // w) for i, p in enumerate(_pixels(frame)) if not _near(p, background, 90)]
    return sum(x for x, _ in points) / len(points), sum(y for _, y in points) / len(points)


def _direction(dx: float, dy: float) -> str:
    if abs(dx) > abs(dy):
        return "right" if dx > 0 else "left"
    return "down" if dy > 0 else "up"


def observe(item, key):
    """What the decoded files (or, for drawn symbols, their draw operations) say about ``key``."""
    images, videos = _files(item, "image"), _files(item, "video")
    if key == "count":
        rgb = MANIFEST.colours[item.truth["counted_colour"]]
        if images:
            return sum(_components(decoded_file(n).frames[0], decoded_file(n).size, rgb) for n in images)
        last = decoded_file(videos[0])
        return _components(last.frames[-1], last.size, rgb)
    if key == "colour":
        # the most common colour that is not the background
        counts: dict[str, int] = {}
        for n in images:
            bg = MANIFEST.files[n]["background"]
            for p in _pixels(decoded_file(n).frames[0])[::5]:
                name = _nearest_colour(p)
                if name != bg:
                    counts[name] = counts.get(name, 0) + 1
        return max(counts, key=counts.get)
    if key == "end_colour":
        return _nearest_colour(decoded_file(videos[0]).frame_means()[-1])
    if key == "flashes":
        bright = [sum(m) / 3 > 200 for m in decoded_file(videos[0]).frame_means()]
        return sum(1 for i, b in enumerate(bright) if b and (i == 0 or not bright[i - 1]))
    if key == "interval_s":
        video = decoded_file(videos[0])
        fps = MANIFEST.files[videos[0]]["fps"]
        w, _ = video.size
        red = MANIFEST.colours["red"]
        # the banner row: pixel (2, 60) sits in the red banner and outside any letter
        shown = [i for i, f in enumerate(video.frames) if _near(tuple(f[(60 * w + 2) * 3 : (60 * w + 2) * 3 + 3]), red)]
        assert shown == list(range(shown[0], shown[-1] + 1)), "the banner must be shown in one stretch"
        return (shown[0] / fps, (shown[-1] + 1) / fps)
    if key == "direction":
        arrows = [op for n in images for op in MANIFEST.files[n]["draw"] if op["op"] == "arrow"]
        if arrows:
            (tx, ty), (hx, hy) = arrows[0]["tail"], arrows[0]["head"]
            return _direction(hx - tx, hy - ty)
        video = decoded_file(videos[0])
        bg = MANIFEST.colours[MANIFEST.files[videos[0]]["background"]]
        (x0, y0), (x1, y1) = _centroid(video.frames[0], video.size, bg), _centroid(video.frames[-1], video.size, bg)
        return _direction(x1 - x0, y1 - y0)
    if key in ("word", "number"):
        texts = {op["text"] for n in images for op in MANIFEST.files[n]["draw"] if op["op"] == "text"}
        return item.truth[key] if str(item.truth[key]) in texts else sorted(texts)
    if key == "first":
        ops = [op for n in videos for op in MANIFEST.files[n]["draw"]]
        first = min(ops, key=lambda op: op.get("from_s", 0.0))
        return {"circle": "circle", "rect": "square", "polygon": "triangle"}[first["op"]]
    return None  # no independent observation for this key (largest, banner, ...)


CHECKED_KEYS = ("count", "colour", "end_colour", "flashes", "interval_s", "direction", "word", "number", "first")


@pytest.mark.parametrize("item", ITEMS, ids=[i.id for i in ITEMS])
def test_ground_truth_is_in_the_media(item):
    truths = dict(item.truth)
    if item.interval_s is not None:
        truths["interval_s"] = item.interval_s
    for key in CHECKED_KEYS:
        if key in truths:
            assert observe(item, key) == truths[key], f"{item.id}: {key}"


def test_most_items_have_an_independent_truth_check():
    checked = [i for i in ITEMS if any(k in i.truth or (k == "interval_s" and i.interval_s) for k in CHECKED_KEYS)]
    assert len(checked) >= 24


# -- helpers the suites use -----------------------------------------------------------------------


def test_media_part_is_an_inline_data_url():
    part = corpus.media_part("video-13.mp4")
    assert part["type"] == "video_url" and part["video_url"]["url"].startswith("data:video/mp4;base64,")
    assert corpus.media_part("image-06.jpg")["image_url"]["url"].startswith("data:image/jpeg;base64,")


def test_user_message_puts_media_before_the_prompt():
    item = MANIFEST.item("mixed-04")
    (message,) = corpus.user_message(item.files, item.prompt)
    assert [p["type"] for p in message["content"]] == ["image_url", "image_url", "video_url", "text"]


def test_kind_table_counts_items_pass_k_and_attempts():
    rows = [("video", "v1", True), ("video", "v1", False), ("video", "v2", True), ("image", "i1", True), ("mixed", "m1", True)]
    lines = kind_table(rows)
    assert lines[2].split("|") == ["images      ", " 1/1          ", " 1/1"]
    assert "1/2" in lines[4] and "2/3" in lines[4]  # videos: v1 failed once, so it does not count
    assert lines[-1].startswith("total") and "3/4" in lines[-1] and "4/5" in lines[-1]

"""report.html and transcripts.jsonl: every bundle has them, the page is a rendering of the bundle
(rebuilt byte for byte by ``python -m pytest_qualify report``), and a real browser (headless
Chromium over the DevTools protocol) shows what a signer needs — the verdict, the failed item, its
request, its answer and its reason — filters to the failures, escapes what the server said and
makes no request of its own."""

from __future__ import annotations

import html
import json
from html import escape
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_qualify.evidence import bundle, job_summary, transcripts
from pytest_qualify.evidence.html import HTML_FILE
from pytest_qualify.bundle_format.manifest import verify_manifest

from ..browser import FAIL_FAULT, INSTALL_CHROMIUM, Page, browser_page, chromium, reference_bundle
from ..real_vllm import in_ci

SECRET = "sk-test-transcript-secret-98765"


@pytest.fixture(scope="module")
def fail_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return reference_bundle(tmp_path_factory.mktemp("fail"), faults=(FAIL_FAULT,))


@pytest.fixture(scope="module")
def pass_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return reference_bundle(tmp_path_factory.mktemp("pass"))


@pytest.fixture(scope="module")
def browser() -> None:
    if chromium() is None:
        message = (f"chromium is not installed: install Debian's chromium (sudo {INSTALL_CHROMIUM}; the "
                   "README's test command does it through .ci/browser.sh where it runs as root or with sudo)")
        if in_ci():
            pytest.fail(message + " CI=true: the browser tests must run in CI.", pytrace=False)
        pytest.skip(message)


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def _failed_lane_item(run_dir: Path) -> dict:
    (item,) = [i for i in _summary(run_dir)["items"] if i["outcome"] == "failed" and i["repetition"] == 1]
    return item


# -- the bundle ------------------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("which", ["fail_bundle", "pass_bundle"])
def test_every_bundle_has_the_page_and_its_data(which, request):
    run_dir: Path = request.getfixturevalue(which)
    summary = _summary(run_dir)
    assert summary["artifacts"]["html"] == HTML_FILE and summary["artifacts"]["transcripts"] == "transcripts.jsonl"
    listed = {line.split("  ", 1)[1] for line in (run_dir / "SHA256SUMS").read_text().splitlines()}
    assert {HTML_FILE, "transcripts.jsonl"} <= listed
    subjects = {s["name"] for s in json.loads((run_dir / "provenance.intoto.json").read_text())["subject"]}
    assert {HTML_FILE, "transcripts.jsonl"} <= subjects
    assert verify_manifest(run_dir) == []
    assert f"[`{HTML_FILE}`]({HTML_FILE})" in (run_dir / "report.md").read_text()
    page = job_summary.render(summary, bundle_dir=str(run_dir), exit_code=1)
    assert f"`{run_dir}/{HTML_FILE}`" in page
    # Every protocol answer of the journal has its request and answer in the transcripts.
    journal = [line for x in (run_dir / "answers.jsonl").read_text().splitlines()
               if (line := json.loads(x))["role"] != "verdict"]  # a grader's verdict is no answer
    asked = [r for r in transcripts.read(run_dir) if r["kind"] == transcripts.ASKED]
    assert sorted(r["key"] for r in asked) == sorted(j["key"] for j in journal) and asked


@pytest.mark.e2e
def test_a_failed_lane_items_whole_story_is_in_the_transcripts(fail_bundle):
    item = _failed_lane_item(fail_bundle)
    story = transcripts.by_item(transcripts.read(fail_bundle))[item["nodeid"]]
    (asked,) = story[transcripts.ASKED]
    params = asked["request"]["params"]
    assert params["stream"] is True and params["temperature"] == 0 and params["seed"] == 1 and params["max_tokens"]
    haystack = next(m["content"] for m in asked["request"]["messages"] if isinstance(m["content"], dict))
    assert haystack["compacted"] and haystack["chars"] > transcripts.LONG_TEXT_CHARS and len(haystack["sha256"]) == 64
    assert haystack["first_lines"] and haystack["last_lines"]
    marks = {m["name"].split()[0]: m for m in haystack["marks"]}
    assert marks["target"]["char"] is not None and 0 <= marks["target"]["depth"] <= 1
    answer = asked["answer"]
    assert answer["streamed"] and answer["stream"]["chunks"] >= 1 and answer["timing"]["ttft_s"] > 0
    assert answer["finish_reason"] == "stop" and answer["usage"]["prompt_tokens"] > 0
    # Each TTFT says what it timed: the first chunk, the first content token beside it.
    assert answer["timing"]["ttfvt_s"] >= answer["timing"]["ttft_s"]
    page = html.unescape((fail_bundle / HTML_FILE).read_text())
    assert "<th>TTFT (first chunk)</th>" in page and "<th>first content token</th>" in page
    assert "<th>Lane</th><th>TTFT (first chunk)</th>" in page and "timing</th><td>TTFT (first chunk) " in page
    # The slot the contract read is the value the reason names: a distractor's, not the target's.
    (slot,) = story[transcripts.SLOTS]
    distractors = {m["value"] for m in haystack["marks"] if m["name"].startswith("distractor")}
    assert slot["format_error"] is None and slot["slot"] in answer["content"] and slot["slot"] in distractors
    assert slot["slot"] in item["reason"]
    assert item["failure_kind"] == "fact"


@pytest.mark.e2e
def test_the_page_rebuilds_byte_for_byte_from_the_bundle(fail_bundle, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(fail_bundle, copy)
    original = (copy / HTML_FILE).read_bytes()
    (copy / HTML_FILE).unlink()
    done = subprocess.run([sys.executable, "-m", "pytest_qualify", "report", str(copy)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (copy / HTML_FILE).read_bytes() == original
    assert "SHA256SUMS: every file matches" in done.stdout
    # Not a bundle: one line, exit 2.
    done = subprocess.run([sys.executable, "-m", "pytest_qualify", "report", str(tmp_path / "nothing")],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "not an evidence bundle" in done.stderr


@pytest.mark.e2e
def test_a_secret_in_a_request_never_reaches_the_transcripts_or_the_page(fail_bundle, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(fail_bundle, copy)
    item = _failed_lane_item(copy)
    record = transcripts.asked_record(item["nodeid"], "k", [{"role": "user", "content": f"my key is {SECRET}"}],
                                      {"api_key": SECRET}, error=f"HTTP 401: key {SECRET} rejected")
    transcripts.append(copy, record, (SECRET,))
    bundle.write_html(copy, _summary(copy), (SECRET,))
    for name in ("transcripts.jsonl", HTML_FILE):
        text = (copy / name).read_text()
        assert SECRET not in text and "my key is ***" in text


def test_long_texts_and_media_are_kept_by_digest_and_position():
    haystack = "intro line\n" + "filler sentence.\n" * 400 + "The code of Curlew is 4417.\n" + "tail.\n" * 50 + "Question?"
    kept = transcripts.compact_text(haystack, {"target Curlew": "4417", "distractor Heron": "9999"})
    assert kept["chars"] == len(haystack) and kept["lines"] == haystack.count("\n") + 1
    assert kept["first_lines"][0] == "intro line" and kept["last_lines"][-1] == "Question?"
    target, missing = kept["marks"]
    assert haystack[target["char"]:].startswith("4417") and target["line"] == 402
    assert missing["char"] is None
    assert transcripts.compact_text("short") == "short"
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 5000}}
    (msg,) = transcripts.compact_messages([{"role": "user", "content": [image]}])
    url = msg["content"][0]["image_url"]["url"]
    assert url["data_url"] == "image/png;base64" and url["chars"] == 5022 and len(url["sha256"]) == 64


# -- in the browser --------------------------------------------------------------------------------


def _open(page: Page, run_dir: Path) -> None:
    page.open((run_dir / HTML_FILE).as_uri())


def _no_request_leaves(page: Page) -> None:
    """Every request the page made is the page itself or a data: URL, and nothing in the DOM points out."""
    assert page.requests and all(u.startswith(("file://", "data:")) for u in page.requests), page.requests
    external = page.js("[...document.querySelectorAll('[src],[href],link,script,iframe,object,embed')]"
                       ".map(e => e.getAttribute('src') || e.getAttribute('href') || e.tagName)"
                       ".filter(v => !/^(data:|#|[A-Za-z0-9_.-]+$)/.test(v))")
    assert external == []
    styles = page.js("[...document.querySelectorAll('style')].map(s => s.textContent).join('')")
    assert "url(" not in styles and "@import" not in styles


def _visible(page: Page, selector: str) -> list[str]:
    return page.js(f"[...document.querySelectorAll({json.dumps(selector)})].filter(e => e.checkVisibility())"
                   ".map(e => e.id)")


def _check_screenshot(path: Path) -> None:
    from PIL import Image

    with Image.open(path) as img:
        assert img.size == (1280, 1000)
        grey = img.convert("L")
        histogram = grey.histogram()
    dark = sum(histogram[:200]) / sum(histogram)
    assert 0.01 < dark < 0.6, f"{path.name}: {dark:.1%} of the pixels are dark (blank or one block)"
    assert sum(1 for n in histogram if n) > 40  # text, badges and borders: many shades, not a flat fill


@pytest.mark.e2e
def test_fail_report_in_a_browser(fail_bundle, browser, tmp_path):
    item = _failed_lane_item(fail_bundle)
    story = transcripts.by_item(transcripts.read(fail_bundle))[item["nodeid"]]
    asked = story[transcripts.ASKED][0]
    failures = _summary(fail_bundle)["verdict"]["failures"]
    with browser_page() as page:
        _open(page, fail_bundle)
        assert page.js("document.getElementById('verdict').innerText") == "FAIL (SIMULATED)"
        text = page.visible_text()
        assert "SIMULATED" in text and item["item"] in text
        # The filter: only failed items (and their gate rows) remain.
        page.click("label[for=show-failed]")
        shown = _visible(page, "details.item")
        assert len(shown) == len(failures) and all(
            page.js(f"document.getElementById('{i}').classList.contains('failed')") for i in shown)
        assert _visible(page, "details.module") == ["module-context"]
        # Second click (its gate row is open already): the item's whole story.
        assert "Request as sent".upper() not in page.visible_text().upper()
        page.click(f"#{shown[0]} > summary")
        text = page.visible_text()
        haystack = next(m["content"] for m in asked["request"]["messages"] if isinstance(m["content"], dict))
        assert "Request as sent".upper() in text.upper() and haystack["sha256"] in text
        assert "Needle positions".upper() in text.upper() and haystack["marks"][0]["name"] in text
        assert "Answer as received".upper() in text.upper() and asked["answer"]["content"] in text
        assert item["reason"] in text and "fact" in text
        assert "Answer slot the contract read".upper() in text.upper()
        page.screenshot(tmp_path / "fail.png")
        _no_request_leaves(page)
    _check_screenshot(tmp_path / "fail.png")


@pytest.mark.e2e
def test_pass_report_in_a_browser(pass_bundle, browser, tmp_path):
    summary = _summary(pass_bundle)
    with browser_page() as page:
        _open(page, pass_bundle)
        assert page.js("document.getElementById('verdict').innerText") == "PASS (SIMULATED)"
        assert "Every hard assertion passed" in page.visible_text()
        assert _visible(page, "details.item") == []  # every gate row starts closed on a pass
        page.click("#module-smoke > summary")
        smoke = [i for i in summary["items"] if i["module"] == "smoke"]
        assert len(_visible(page, "details.item")) == len(smoke)
        page.click("label[for=show-failed]")
        assert _visible(page, "details.item") == [] and _visible(page, "details.module") == []
        page.click("label[for=mod-context]")
        page.click("label[for=show-all]")
        assert _visible(page, "details.module") == ["module-context"]
        page.click("label[for=mod-all]")
        page.screenshot(tmp_path / "pass.png")
        _no_request_leaves(page)
    _check_screenshot(tmp_path / "pass.png")


@pytest.mark.e2e
def test_what_the_server_said_is_shown_as_text_never_run(fail_bundle, browser, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(fail_bundle, copy)
    item = _failed_lane_item(copy)
    hostile = ('</pre><script>document.title="ran"</script><img src="http://example.invalid/x.png" '
               'onerror="document.title=\'ran\'"><a href="https://example.invalid/">x</a>')
    record = transcripts.asked_record(item["nodeid"], "k", [{"role": "user", "content": hostile}], {"stream": False})
    record["answer"] = {"content": hostile, "reasoning": hostile, "tool_calls": [
        {"id": "c", "name": hostile, "arguments": "{}", "parsed": {"x": hostile}}], "finish_reason": hostile,
        "usage": {}, "streamed": False, "stream": None, "timing": {}}
    transcripts.append(copy, record)
    bundle.rebuild_html(copy)
    with browser_page() as page:
        _open(page, copy)
        title = page.js("document.title")
        page.click("label[for=show-failed]")
        page.click(f"#{_visible(page, 'details.item')[0]} > summary")
        assert page.js("document.title") == title and "ran" not in title
        assert page.js("document.querySelectorAll('script').length") == 0
        assert page.js("[...document.images].map(i => i.id)") == ["plot"]
        assert page.visible_text().count('<script>document.title="ran"</script>') >= 3
        _no_request_leaves(page)


def test_a_request_that_got_no_answer_is_kept_with_its_error(qualify_pytest):
    qualify_pytest(faults=("drop_connection=1",))
    run_dir = qualify_pytest.run_dir()
    records = transcripts.read(run_dir)
    (lost,) = [r for r in records if r["kind"] == transcripts.ASKED and r["answer"] is None]
    assert lost["error"] and lost["request"]["messages"][0]["role"] == "user"
    item = next(i for i in _summary(run_dir)["items"] if i["nodeid"] == lost["nodeid"])
    assert item["outcome"] == "failed"
    page = (run_dir / HTML_FILE).read_text()
    assert "No answer:" in page and escape(lost["error"]) in page

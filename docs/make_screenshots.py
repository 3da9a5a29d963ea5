"""Regenerates docs/report-html-fail.png and docs/report-html-pass.png: the report.html of a FAIL
and of a PASS run against the reference server (smoke and context on the small profile, the FAIL
one with the ``drop_needle`` fault), opened in headless Chromium as the browser tests open them
(tests/browser.py). The FAIL page is shown after the two clicks a signer makes: the filter on
"failed", then the first failed item. Prints each page's size.

    python docs/make_screenshots.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.browser import FAIL_FAULT, browser_page, reference_bundle  # noqa: E402

HTML = "report.html"


def small(path: Path) -> None:
    """Re-saved with zlib's best compression (Chromium writes a fast one); no palette reduction,
    which would merge the plot's lane colours."""
    from PIL import Image

    with Image.open(path) as img:
        img.load()
        img.save(path, optimize=True)


def main() -> int:
    docs = ROOT / "docs"
    with tempfile.TemporaryDirectory(prefix="report-html-") as tmp:
        fail = reference_bundle(Path(tmp) / "fail", faults=(FAIL_FAULT,))
        passed = reference_bundle(Path(tmp) / "pass")
        with browser_page(width=1280, height=1000) as page:
            page.open((fail / HTML).as_uri())
            page.click("label[for=show-failed]")
            page.click("details.item.failed > summary")
            page.js("window.scrollTo(0, 0)")
            page.screenshot(docs / "report-html-fail.png", full_page=True, max_height=2200)
        with browser_page(width=1280, height=1000) as page:
            page.open((passed / HTML).as_uri())
            page.screenshot(docs / "report-html-pass.png", full_page=True, max_height=2200)
        for shot in ("report-html-fail.png", "report-html-pass.png"):
            small(docs / shot)
        for name, run_dir in (("FAIL", fail), ("PASS", passed)):
            print(f"{name}: {HTML} {(run_dir / HTML).stat().st_size:,} bytes, "
                  f"transcripts.jsonl {(run_dir / 'transcripts.jsonl').stat().st_size:,} bytes")
    print("wrote docs/report-html-fail.png, docs/report-html-pass.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())

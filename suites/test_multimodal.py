"""Protocol module 9 — the multimodal corpus: 12 images, 4 mixed, 14 videos, graded strictly.

Each item's answer is one JSON object under the item's contract (media/manifest.toml): each fact in
its own field, compared exactly with the manifest's accepted forms; the prompt states the contract.

Each corpus item is its own test item per repetition (ids are the item ids) and records its kind
as the ``corpus_kind`` property, from which the per-kind table (x/12 images, x/4 mixed,
x/14 videos) is drawn. Media travels inline as base64 data URLs in ``image_url``/``video_url``
parts. The module is waivable: a failed item fails the gate unless an operator waiver names it.
"""

from __future__ import annotations

import pytest

from pytest_qualify.checks import require
from pytest_qualify.tasks.corpus import load_manifest, mime_of, user_message
from pytest_qualify.graders.media import grade_item

pytestmark = pytest.mark.qualify_module("multimodal")

ITEMS = load_manifest().items


@pytest.mark.parametrize("item", ITEMS, ids=[item.id for item in ITEMS])
def test_corpus_item(qualify_ask, qualify_record, item):
    videos = sum(1 for name in item.files if mime_of(name).startswith("video/"))
    # With vLLM's image_prompt_tokens / video_prompt_tokens (recorded with the answer), the
    # prompt-token cost of each image and video.
    qualify_record.props(corpus_kind=item.kind, corpus_item=item.id, corpus_files=",".join(item.files),
                         media_images=len(item.files) - videos, media_videos=videos)
    answer = qualify_ask(user_message(item.files, item.request))  # its own salt: the media is read again
    require(grade_item(item.id, answer.content, item.contract, finish_reason=answer.finish_reason))

"""The reasoning module with thinking enabled, end to end against the reference server: reasoning in
its own field passes; reasoning that comes back as plain prose in the content, with no reasoning
field and no reasoning tokens (a parser that stripped or missed the markers), fails every reasoning
prompt as a leak naming the recipe's reasoning parser, whether the working stands on lines of its own
or on the answer's own line."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..helpers import QualifyPytest, suite, write_profile

PROMPTS = ("sky", "train", "spider")


def _thinking_on(directory: Path) -> Path:
    path = write_profile(directory, ("reasoning",))
    text = path.read_text().replace("[thinking]\nenabled = false", "[thinking]\nenabled = true", 1)
    text = text.replace('    "--enable-auto-tool-choice",', '    "--reasoning-parser", "qwen3",\n    "--enable-auto-tool-choice",', 1)
    assert "enabled = true" in text and "--reasoning-parser" in text
    path.write_text(text)
    return path


def test_reasoning_in_its_own_field_passes(qualify_pytest: QualifyPytest):
    result = qualify_pytest(profile=_thinking_on(qualify_pytest.pytester.path), repeat=1, suites=suite("reasoning"))
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:]


@pytest.mark.parametrize("fault, working", [
    ("leak_reasoning_unmarked", "holds 3 lines of working besides its answer slot: 'Okay, the user wants a short answer."),
    ("leak_reasoning_one_line", "holds working on its answer's own line: 'Okay, the user wants a short answer, so I"),
], ids=["lines-of-working", "on-the-answers-line"])
def test_reasoning_left_in_the_content_is_a_leak_naming_the_parser(qualify_pytest: QualifyPytest, fault: str,
                                                                   working: str):
    result = qualify_pytest(profile=_thinking_on(qualify_pytest.pytester.path), repeat=1, faults=(fault,),
                            suites=suite("reasoning"))
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()[-3000:]
    summary = qualify_pytest.summary()
    assert {f["name"]: f["engaged"] for f in summary["faults"]["armed"]} == {fault: True}
    items = [i for i in summary["items"] if i["module"] == "reasoning"]
    # Every prompt, plain and streamed, and the override item (thinking stays on: the same leak).
    assert len(items) == 2 * len(PROMPTS) + 2 and all(i["outcome"] == "failed" for i in items), items
    for item in items:
        assert ("reasoning leak: thinking is enabled and no reasoning came back (no reasoning field, no reasoning "
                "tokens), while the visible content " + working) in item["reason"], item["reason"]
        assert item["reason"].endswith("(the reasoning parser 'qwen3' left the reasoning in the content)"), item["reason"]
        assert item["failure_kind"] == "fact"

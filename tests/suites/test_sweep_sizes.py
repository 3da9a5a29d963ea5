"""The sweep module end to end against the reference server: prompts of exactly the named sizes,
and a size the harness cannot build leaves its item not judged (the run INCOMPLETE, naming the
harness), never a FAIL of the deployment."""

from __future__ import annotations

from pathlib import Path

from ..helpers import QualifyPytest, suite, write_profile


def _profile(directory: Path, sizes: str, decode: int = 512) -> Path:
    path = write_profile(directory, ["sweep"])
    path.write_text(path.read_text() + f"\n[sweep]\nprompt_tokens = {sizes}\nsamples = 2\noutput_tokens = 8\n"
                    f"decode_prompt_tokens = {decode}\ndecode_tokens = 16\ndecode_samples = 1\n")
    return path


def test_the_sweep_measures_exactly_the_named_sizes(qualify_pytest: QualifyPytest):
    result = qualify_pytest(profile=_profile(qualify_pytest.pytester.path, "[512, 1000]"), suites=suite("sweep"))
    assert result.ret == 0, result.stdout.str()[-3000:]
    points = {p["prompt_tokens"]: p for p in qualify_pytest.summary()["timing"]["sweep"]["points"]}
    assert set(points) == {512, 1000}
    assert all(p["measured_prompt_tokens"] == [n] and p["samples"] == 2 for n, p in points.items()), points
    props = qualify_pytest.item_properties()
    assert not any("sweep_declared_prompt_tokens" in p for p in props.values())


def test_a_prompt_the_harness_cannot_build_is_not_judged_never_a_fail(qualify_pytest: QualifyPytest):
    # Sixteen tokens: the chat's system line and question alone are longer, so no haystack of that size exists.
    result = qualify_pytest(profile=_profile(qualify_pytest.pytester.path, "[16]", decode=16), suites=suite("sweep"))
    out = result.stdout.str()
    assert result.ret == 2, out[-3000:]
    result.stdout.fnmatch_lines(["*QUALIFICATION: INCOMPLETE*"])
    summary = qualify_pytest.summary()
    items = [i for i in summary["items"] if i["module"] == "sweep"]
    assert len(items) == 2 and all(i["outcome"] == "ungraded" for i in items), items
    assert all("not judged: the harness (tasks/haystack.py) could not build a prompt of 16 server tokens" in i["reason"]
               for i in items), items
    verdict = summary["verdict"]
    assert verdict["result"] == "INCOMPLETE" and not verdict["failures"], verdict
    assert any("the harness (tasks/haystack.py)" in r for r in verdict["reasons"]), verdict["reasons"]
    assert "not judged: the harness" in out.strip().splitlines()[-1]

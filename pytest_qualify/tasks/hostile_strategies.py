"""The hypothesis strategies that draw the robustness corpus's recipes, and the seeded draw that
makes ``fixtures/robustness_corpus.json``.

A recipe is one builder of ``hostile.py`` and the values drawn for it from ``fixtures/robustness.toml``
(``{"build": "bad_tool", "args": [...]}``), JSON data, target-free: the served name and the window
are the run's own when the recipe is built. Imported by the tests (which check that the stored
corpus is exactly :func:`draw_corpus`'s output and that every recipe builds a request with its one
fault) and by ``python -m pytest_qualify.tasks.hostile_strategies`` (which writes the corpus after a
change to the data or the builders); never by the plugin at run time.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from pytest_qualify.tasks import hostile

Recipe = dict[str, Any]
# The seed of the stored draw: change it (and write the corpus again) only on purpose.
CORPUS_SEED = 20261206
# The target the draw checks malformed bodies against (a run checks them again against its own).
DRAW_TARGET = hostile.RequestTarget("served-model", 4096)


def _recipe(name: str) -> Callable[..., Recipe]:
    def make(*args: Any) -> Recipe:
        return {"build": name, "args": [list(a) if isinstance(a, tuple) else a for a in args]}

    return make


def variants() -> st.SearchStrategy[tuple[int, bool, int]]:
    return st.tuples(st.integers(0, len(hostile.data()["base"]["prompts"]) - 1), st.booleans(), st.integers(0, 16))


def malformed_json() -> st.SearchStrategy[Recipe]:
    pool = hostile.data()["malformed_json"]
    # A body that still parses (NaN after an array's comma, say) is dropped.
    return st.one_of(
        st.builds(_recipe("truncated"), variants(), st.floats(0, 1)),
        st.builds(_recipe("damaged"), variants(), st.floats(0, 1), st.sampled_from(pool["damage"])),
        st.builds(_recipe("not_json"), st.sampled_from(pool["bodies"])),
        st.builds(_recipe("garbage"), st.binary(max_size=64).map(bytes.hex)),
    ).filter(lambda recipe: not hostile._parses(hostile.build(recipe, DRAW_TARGET).body))


def wrong_types() -> st.SearchStrategy[Recipe]:
    pool = hostile.data()["wrong_types"]
    return st.one_of(*(st.builds(_recipe("wrong_type"), st.just(name), variants(), st.sampled_from(pool[name]))
                       for name in pool))


def max_tokens() -> st.SearchStrategy[Recipe]:
    pool = hostile.data()["max_tokens"]
    values = st.one_of(
        st.sampled_from(pool["values"]),
        st.integers(max_value=0, min_value=-(2**62)),
        st.integers(min_value=1, max_value=2**61).map(lambda k: {"window_plus": k}),
    )
    return st.builds(_recipe("bad_max_tokens"), variants(), st.sampled_from(pool["fields"]), values)


def roles() -> st.SearchStrategy[Recipe]:
    pool = hostile.data()["roles"]
    return st.builds(_recipe("bad_role"), variants(), st.sampled_from(pool["values"]), st.booleans(), st.booleans())


def tools() -> st.SearchStrategy[Recipe]:
    pool = hostile.data()["tools"]
    mutations = {
        "not_a_list": pool["not_a_list"], "not_an_object": pool["not_an_object"], "bad_type": pool["bad_type"],
        "no_function": [None], "bad_function": pool["bad_function"], "no_name": [None],
        "bad_name": pool["bad_name"], "bad_description": pool["bad_description"],
        "bad_parameters": pool["bad_parameters"], "bad_tool_choice": pool["bad_tool_choice"],
    }
    return st.one_of(*(
        st.builds(_recipe("bad_tool"), variants(), st.just(m), st.sampled_from(values), st.integers(1, 3),
                  st.integers(0, 2))
        for m, values in mutations.items()
    ))


def response_format() -> st.SearchStrategy[Recipe]:
    pool = hostile.data()["response_format"]
    mutations = {
        "not_an_object": pool["not_an_object"], "bad_type": pool["bad_type"], "no_type": [None],
        "no_json_schema": [None], "bad_json_schema": pool["bad_json_schema"], "no_name": [None],
        "bad_name": pool["bad_name"], "bad_schema_value": pool["bad_schema_value"], "bad_schemas": pool["bad_schemas"],
    }
    return st.one_of(*(st.builds(_recipe("bad_response_format"), variants(), st.just(m), st.sampled_from(v))
                       for m, v in mutations.items()))


def cache_salt() -> st.SearchStrategy[Recipe]:
    return st.builds(_recipe("bad_cache_salt"), variants(), st.sampled_from(hostile.data()["cache_salt"]["values"]))


def oversized() -> st.SearchStrategy[Recipe]:
    # Only what the engine refuses unread: a prompt over the window is the window bracket's proof.
    return st.builds(_recipe("long_model"), variants(), st.sampled_from(hostile.data()["oversized"]["model_name_chars"]))


def media() -> st.SearchStrategy[Recipe]:
    pool = hostile.data()["media"]
    mutations = {
        "bad_part_type": pool["bad_part_types"], "bad_url": pool["bad_urls"], "bad_scheme": pool["bad_schemes"],
        "not_base64_data": pool["not_base64_data"], "bad_base64": pool["bad_base64"], "wrong_mime": pool["wrong_mime"],
    }
    return st.one_of(*(
        st.builds(_recipe("bad_media"), variants(), st.just(m), st.sampled_from(v), st.sampled_from(pool["parts"]),
                  st.booleans())
        for m, v in mutations.items()
    ))


STRATEGIES: dict[str, Callable[[], st.SearchStrategy[Recipe]]] = {
    "malformed_json": malformed_json,
    "wrong_types": wrong_types,
    "max_tokens": max_tokens,
    "roles": roles,
    "tools": tools,
    "response_format": response_format,
    "cache_salt": cache_salt,
    "oversized": oversized,
    "media": media,
}


def recipes(kind: str) -> st.SearchStrategy[Recipe]:
    return STRATEGIES[kind]()


def strategy(kind: str, target: hostile.RequestTarget) -> st.SearchStrategy[hostile.Hostile]:
    """The class's examples for a target (the property tests')."""
    return recipes(kind).map(lambda recipe: hostile.build(recipe, target))


class _Enough(Exception):
    """Raised inside the draw once the class has its recipes (hypothesis has no early stop)."""


def draw(kind: str, count: int, seed: int = CORPUS_SEED) -> list[Recipe]:
    """``count`` recipes of one class making distinct requests, seeded: the same ones on every call.
    Generated values repeat now and then; more are drawn than needed and each request kept once."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as seeded

    chosen: list[Recipe] = []
    seen: set[bytes] = set()

    @seeded(seed)
    @settings(max_examples=count * 8, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(recipes(kind))
    def explore(recipe: Recipe) -> None:
        if len(chosen) >= count:
            raise _Enough
        key = hostile.build(recipe, DRAW_TARGET).body  # two recipes may make one request (a cut at byte 1)
        if key not in seen:
            seen.add(key)
            chosen.append(recipe)

    # Without the constants hypothesis mines from the loaded modules' source: which modules are
    # loaded (a test run's or the writer's) would otherwise change the draw.
    from pytest_qualify.tasks.parsers_corpus import no_local_constants

    try:
        with no_local_constants():
            explore()
    except _Enough:
        pass
    return chosen


def draw_corpus(per_class: int = hostile.CORPUS_PER_CLASS, seed: int = CORPUS_SEED) -> Mapping[str, Any]:
    """The whole corpus as stored: its seed, its size per class and each class's recipes."""
    return {"seed": seed, "per_class": per_class,
            "classes": {kind: draw(kind, per_class, seed) for kind in hostile.classes()}}


def render(corpus: Mapping[str, Any]) -> str:
    """The corpus file's text: one recipe a line, so a change to the draw reads as a diff."""
    lines = ["{", f'  "seed": {json.dumps(corpus["seed"])},', f'  "per_class": {json.dumps(corpus["per_class"])},',
             '  "classes": {']
    kinds = list(corpus["classes"])
    for i, kind in enumerate(kinds):
        rows = corpus["classes"][kind]
        lines.append(f"    {json.dumps(kind)}: [")
        lines.extend(f"      {json.dumps(r, ensure_ascii=True)}{',' if j < len(rows) - 1 else ''}" for j, r in enumerate(rows))
        lines.append("    ]" + ("," if i < len(kinds) - 1 else ""))
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write the robustness module's stored corpus (a seeded draw).")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[2] / "fixtures" / hostile.CORPUS_FILE)
    args = ap.parse_args(argv)
    args.out.write_text(render(draw_corpus()), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

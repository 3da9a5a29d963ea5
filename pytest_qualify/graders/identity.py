"""Deployment identity: the served name, its root model and its window, from ``/v1/models``
(looked up by ``identity.model_entry``, the one reader of that answer)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_qualify.graders import Verdict
from pytest_qualify.promotion.identity import model_entry


def check_identity(models: Sequence[Mapping[str, Any]], served_name: str, model: str, window_tokens: int) -> Verdict:
    entry, ids = model_entry(models, served_name)
    if entry is None:
        return Verdict.reject(f"served name {served_name!r} not listed; the server lists {ids}")
    problems = []
    root = entry.get("root")
    if root != model:
        problems.append(f"root is {root!r}, expected {model!r}")
    window = entry.get("max_model_len")
    if window != window_tokens:
        problems.append(f"max_model_len is {window!r}, expected {window_tokens}")
    if problems:
        return Verdict.reject(f"{served_name}: " + "; ".join(problems))
    return Verdict.accept(f"{served_name}: root {root}, window {window}")

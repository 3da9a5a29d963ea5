"""The profile files the gate tests edit: a built-in profile's text, and an edited text as a file."""

from __future__ import annotations

from pathlib import Path

from pytest_qualify.profiles import builtin_profiles


def small_text() -> str:
    return Path(builtin_profiles()["small"]).read_text()


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "p.toml"
    path.write_text(text)
    return str(path)

"""Reading the operator's TOML files (profiles, waivers) with errors that name the file."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any


def read_toml(path: Path, label: str, error: type[Exception]) -> dict[str, Any]:
    """The parsed file, or ``error`` naming ``label`` and the path: unreadable, not UTF-8, not TOML."""
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise error(f"{label} {path}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise error(f"{label} {path}: cannot be read (not UTF-8 text: {exc.reason} at byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{label} {path}: not valid TOML ({exc})") from None

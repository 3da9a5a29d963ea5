"""Keeping the API key out of every artifact: one place that masks secrets. No pytest here.

The value of the API key variable may reach a server log (a server may echo its own flags), a
launch command, a failure message or a URL with ``user:password``; everything the run keeps
passes through here first.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path

REDACTED = "***"
# Launch-command flags whose next argument is a secret, whatever its value.
SECRET_FLAGS = ("--api-key", "--hf-token", "--token", "--api_key")


def secrets_from_env(api_key_env: str, environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The secret values of this run: the API key's value, whatever the variable is called."""
    value = environ.get(api_key_env)
    return (value,) if value else ()


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every secret value replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text


def redact_command(command: str, secrets: Sequence[str] = ()) -> str:
    """A launch command fit for evidence: known secret flags' values and secret values masked."""
    for flag in SECRET_FLAGS:
        command = re.sub(rf"({re.escape(flag)}(?:=|\s+))(?:'[^']*'|\"[^\"]*\"|\S+)", rf"\g<1>{REDACTED}", command)
    return redact(command, secrets)


def redact_file(path: Path, secrets: Sequence[str]) -> bool:
    """Mask secrets in a file kept as evidence, byte for byte otherwise; True when it changed."""
    needles = [s.encode("utf-8", errors="surrogateescape") for s in secrets if s]
    if not needles:
        return False
    try:
        data = path.read_bytes()
    except OSError:
        return False
    clean = data
    for needle in needles:
        clean = clean.replace(needle, REDACTED.encode())
    if clean == data:
        return False
    path.write_bytes(clean)
    return True


def safe_url(url: str | None) -> str | None:
    """A URL without user:password, which may be a credential."""
    if not url:
        return url
    parts = urllib.parse.urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host += f":{parts.port}"
        parts = parts._replace(netloc=host)
    return urllib.parse.urlunsplit(parts)

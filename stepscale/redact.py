"""Passwords never reach a file or a message: the one redactor of the project.

Used on storage URLs before they are stored or shown, on commands and configs written to
``run.json``, and again on everything a report writes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# The password of ``scheme://user:secret@host``: up to the last "@" of the URL, so that a
# password holding a raw "@" or "/" is hidden whole (over-hiding is harmless).
_URL_PASSWORD = re.compile(
    r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)(?P<pw>\S*)(?P<tail>@)", re.IGNORECASE
)
# ``password=secret`` (libpq's parameters: ``…/db?password=secret``, ``pgpassword=…``) and
# ``token: secret``-like keys in commands and configs.
_KEY_PASSWORD = re.compile(
    r"(?P<key>(?<![A-Za-z0-9_])(?:pg|ssl)?(?:password|passwd|pwd|secret|token)\s*[=:]\s*)"
    r"(?P<value>[^\s&;,'\"]+)",
    re.IGNORECASE,
)
MASK = "***"


def redact(text: str) -> str:
    """``scheme://user:secret@host`` → ``scheme://user:***@host``; ``password=secret`` →
    ``password=***``."""
    text = _URL_PASSWORD.sub(lambda m: f"{m['head']}{MASK}{m['tail']}", text)
    return _KEY_PASSWORD.sub(lambda m: f"{m['key']}{MASK}", text)


def redact_all(obj: Any) -> Any:
    """:func:`redact` applied to every string (keys too) of a JSON-like structure."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, Mapping):
        return {redact(str(k)): redact_all(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_all(v) for v in obj]
    return obj


def passwords_in(text: str) -> list[str]:
    """The passwords written in ``text`` (to scrub them also where they are quoted alone)."""
    found = [m["pw"] for m in _URL_PASSWORD.finditer(text)]
    found += [m["value"] for m in _KEY_PASSWORD.finditer(text)]
    return [p for p in found if p and p != MASK]


def scrub(text: str, secret_source: str) -> str:
    """``text`` without the passwords of ``secret_source`` (also if quoted outside a URL)
    nor any URL's."""
    for secret in sorted(passwords_in(secret_source), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return redact(text)

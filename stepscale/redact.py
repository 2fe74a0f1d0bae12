"""Passwords never reach a file or a message: the one redactor of the project.

Used on storage URLs before they are stored or shown, on commands and configs written to
``run.json``, again on everything a report writes, and (`redact_output`) on what a trial
job quotes of a script's output: besides URL passwords and ``password=…``, the values of
the environment's secret variables (`secret_values`) and known token shapes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
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


# Environment variables whose values are secrets whatever the user says (``trainer.secret_env``
# names more): *PASSWORD*, *PASSWD*, *TOKEN*, *SECRET*, *KEY*, *CREDENTIAL*.
SECRET_NAME = re.compile(r"PASSWORD|PASSWD|TOKEN|SECRET|KEY|CREDENTIAL", re.IGNORECASE)
MIN_SECRET_LEN = 6  # shorter values ("1", "true") would mask ordinary text
# Token shapes of the common services: Hugging Face, GitHub, OpenAI-style ``sk-``, AWS access
# key ids, Slack, GitLab, Google API keys.
_TOKEN = re.compile(
    r"(?<![A-Za-z0-9_])(?:hf_[A-Za-z0-9]{30,}|gh[pousr]_[A-Za-z0-9]{30,}"
    r"|github_pat_[A-Za-z0-9_]{40,}|sk-[A-Za-z0-9_-]{20,}|(?:AKIA|ASIA)[A-Z0-9]{16}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}|glpat-[A-Za-z0-9_-]{20,}|AIza[A-Za-z0-9_-]{35})"
)


def secret_values(env: Mapping[str, str], names: Iterable[str] = ()) -> list[str]:
    """The values of ``env``'s secret variables: those in ``names`` and those whose name
    says secret (`SECRET_NAME`), at least `MIN_SECRET_LEN` characters long; the longest
    first (so a secret containing another is masked whole)."""
    marked = set(names)
    found = {
        value
        for name, value in env.items()
        if (name in marked or SECRET_NAME.search(name)) and len(value) >= MIN_SECRET_LEN
    }
    return sorted(found, key=len, reverse=True)


def redact_output(text: str, secrets: Iterable[str] = ()) -> str:
    """What a program printed, fit to quote: each of ``secrets`` (`secret_values`) masked
    wherever it appears, token shapes masked, then `redact` (URL passwords, ``password=…``)."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    text = _TOKEN.sub(MASK, text)
    return redact(text)

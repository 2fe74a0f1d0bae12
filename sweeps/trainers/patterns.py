"""The one door through which a user's regular expression (``trainer.metrics.pattern``)
is compiled. Every pattern the reader applies to a script's output comes from
`compile_pattern`, so a bound on what one pattern may cost on one line (a linear-time
engine, or a time limit) is set here, for every caller at once."""

from __future__ import annotations

import re
from typing import Any

from stepscale.errors import UsageError


def compile_pattern(pattern: str, key: str = "trainer.metrics.pattern") -> Any:
    """``pattern`` compiled (an object with ``search`` and ``groupindex``, as `re`'s);
    a pattern that does not compile → `UsageError` naming ``key``."""
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"{key}: {pattern!r} does not compile: {exc}") from None


__all__ = ["compile_pattern"]

"""Reading and writing the small files of a run directory: JSON read with one error
policy, and writes that are atomic (a reader sees the old file or the new one, never half).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class BadFileError(ValueError):
    """A file that exists but cannot be read or is not valid JSON."""


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path``; on success it replaces ``path``, on error it is
    removed. The name is private to this process and thread."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as exc:
        if exc.filename is None:  # a failed write names no file: say which one it was
            exc.filename = str(path)
        raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def write_text_atomic(path: Path, data: str | bytes, *, fsync: bool = False) -> None:
    """Write text (UTF-8) or bytes to ``path`` atomically; ``fsync`` makes it durable."""
    mode, encoding = ("w", "utf-8") if isinstance(data, str) else ("wb", None)
    with atomic_path(path) as tmp, open(tmp, mode, encoding=encoding) as f:
        f.write(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON with sorted keys, atomically and durably."""
    text = json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n"
    write_text_atomic(path, text, fsync=True)


def read_json(
    path: Path,
    *,
    required: bool = False,
    lenient: bool = False,
    error: type[Exception] = BadFileError,
) -> Any:
    """A JSON file's content.

    A missing file gives None, or raises ``error`` when ``required``. An unreadable or
    invalid file raises ``error`` with a message naming the file, or gives None when
    ``lenient`` (a file another process may be writing, such as a heartbeat).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        if required:
            raise error(f"{path} is missing") from None
        return None
    except (OSError, UnicodeDecodeError) as exc:
        if lenient:
            return None
        raise error(f"cannot read {path}: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if lenient:
            return None
        raise error(f"{path} is not valid JSON: {exc}") from None

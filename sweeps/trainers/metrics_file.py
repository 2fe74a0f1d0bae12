"""Reading a trial's ``metrics.jsonl`` as a trainer writes it: line by line while it grows
(a command trainer appends to it; the job follows), and whole, with the records that a
resumed run produced again put in order (a run that resumes from step s writes steps
after s again; the later records win)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from stepscale.files import write_text_atomic
from stepscale.reporters import dumps

READ_CAP = 4 * 2**20  # the most one read of a followed file takes (the rest comes next time)
MAX_RECORD_BYTES = 8 * 2**20  # a metrics.jsonl line longer than this is no record


class UnreadableSource(ValueError):
    """A followed file that is not a regular file (a FIFO, a device, a symlink to
    ``/dev/zero``): it could block the job or never end, so it is refused."""

    def __init__(self, path: Path, mode: int) -> None:
        kind = (
            "a FIFO"
            if stat.S_ISFIFO(mode)
            else "a character device"
            if stat.S_ISCHR(mode)
            else "a block device"
            if stat.S_ISBLK(mode)
            else "a socket"
            if stat.S_ISSOCK(mode)
            else "a directory"
            if stat.S_ISDIR(mode)
            else "not a regular file"
        )
        super().__init__(
            f"the metrics source {path} is {kind}, not a regular file: refused (it could "
            "block the job or never end); the script must write its metrics to a file"
        )
        self.path = path


class MalformedRecord(ValueError):
    """A line of metrics.jsonl that is not a JSON object with an integer ``step``."""

    def __init__(self, lineno: int, line: str, why: str) -> None:
        super().__init__(
            f"metrics.jsonl line {lineno}: {why}: {line[:200]!r} (each line must be a JSON "
            'object with an integer "step", e.g. {"step": 100, "eval_loss": 2.3})'
        )
        self.lineno = lineno


def tail_step(path: Path, tail_bytes: int = 8192) -> int:
    """The step of the last whole record of a metrics.jsonl that may be growing (0 when
    there is none yet): read from its end, so a long file costs no more than a short one."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - tail_bytes))
            tail = f.read()
    except OSError:
        return 0
    for line in reversed(tail.split(b"\n")[1 if size > tail_bytes else 0 : -1]):
        try:
            step = json.loads(line).get("step")
        except (ValueError, AttributeError):
            continue
        if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
            return step
    return 0


def parse_record(line: str, lineno: int) -> dict[str, Any]:
    """One line as a record, or `MalformedRecord` saying what is wrong with it."""
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise MalformedRecord(lineno, line, f"not JSON ({exc.msg})") from None
    if not isinstance(record, dict):
        raise MalformedRecord(lineno, line, "not a JSON object")
    step = record.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise MalformedRecord(lineno, line, 'no integer "step" ≥ 0')
    return record


def read_appended(
    path: Path, inode: int | None, offset: int, limit: int = READ_CAP
) -> tuple[bytes, int, bool] | None:
    """What was appended to a followed file since ``offset`` (of the file ``inode``), at
    most ``limit`` bytes (`READ_CAP` by default) (the rest comes with the next call): ``(data, inode, restarted)``.
    A file replaced or cut short (a program that resumes and rewrites it) is read from its
    start, with ``restarted`` true. None while it does not exist; `UnreadableSource` when
    it is not a regular file (it is opened without blocking and checked before a read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnreadableSource(path, st.st_mode)
        restarted = st.st_ino != inode or st.st_size < offset
        return os.pread(fd, limit, 0 if restarted else offset), st.st_ino, restarted
    finally:
        os.close(fd)


class MetricsTail:
    """Follows a growing metrics.jsonl: each call of `read_new` returns the complete lines
    added since the last call. A file replaced or cut short (a trainer that resumes and
    rewrites it) is read again from its start."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.lineno = 0
        self.inode: int | None = None
        self.partial = b""

    def read_new(self) -> list[dict[str, Any]]:
        """Records of the lines completed since the last call (`MalformedRecord` on a bad one)."""
        got = read_appended(self.path, self.inode, self.offset)
        if got is None:
            return []
        data, self.inode, restarted = got
        if restarted:
            self.offset, self.lineno, self.partial = 0, 0, b""
        self.offset += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        if len(self.partial) > MAX_RECORD_BYTES:
            raise MalformedRecord(
                self.lineno + 1,
                self.partial[:200].decode("utf-8", errors="replace"),
                f"a line longer than {MAX_RECORD_BYTES // 2**20} MiB",
            )
        records = []
        for raw in lines:
            self.lineno += 1
            line = raw.decode("utf-8", errors="replace").strip()
            if line:
                records.append(parse_record(line, self.lineno))
        return records


def normalized_records(path: Path, rewrite: bool = False) -> list[dict[str, Any]]:
    """The records of ``path`` in step order, each step once: records of one step in a
    row are merged, and a record whose step is before the previous one's starts over from
    that step (a resumed run: the records it redoes replace the old ones). Unreadable lines
    (one cut short by a crash) are skipped. ``rewrite``: write the file back that way."""
    kept: list[dict[str, Any]] = []
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = parse_record(line, n)
        except MalformedRecord:
            continue
        step = record["step"]
        if kept and kept[-1]["step"] == step:  # two reports of one step: one record
            kept[-1] = {**kept[-1], **record}
            continue
        while kept and kept[-1]["step"] >= step:
            kept.pop()
        kept.append(record)
    if rewrite:
        write_text_atomic(path, "".join(dumps(r) + "\n" for r in kept))
    return kept


def last_step(path: Path) -> int:
    """The last step recorded in ``path`` (0 when there is none)."""
    records = normalized_records(path)
    return int(records[-1]["step"]) if records else 0

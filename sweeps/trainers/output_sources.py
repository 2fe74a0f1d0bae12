"""Where a command trainer's records come from while it runs (``trainer.metrics.source``):
the ``metrics.jsonl`` it appends to itself (`JsonlSource`), its stdout or stderr read
through a pipe and passed on whole to the trial's logs (`PipeSource`), or a file it writes
(`FileSource`). Each gives the records completed since it was last asked."""

from __future__ import annotations

import os
import queue
import stat
import threading
from pathlib import Path
from typing import IO, Any

from stepscale.sweeps.trainers.line_formats import MetricsSpec, RecordStream
from stepscale.sweeps.trainers.metrics_file import (
    MetricsTail,
    UnreadableSource,
    read_appended,
)

CHUNK = 65536
MAX_LINE_BYTES = 2**20  # of a longer line only the first MiB is read (the rest is dropped)
EARLIER_BYTES = 2**20  # of a file's earlier lines, the first and the last MiB are read


class LineCap:
    """Cuts every line of a byte stream at `MAX_LINE_BYTES` (the rest of it, up to its
    newline, is dropped), so that output without newlines cannot grow the job's memory."""

    def __init__(self, limit: int = MAX_LINE_BYTES) -> None:
        self.limit = limit
        self.length = 0  # bytes of the current line seen so far

    def cut(self, data: bytes) -> bytes:
        """``data`` with what passes the cap of its lines."""
        if self.length + len(data) <= self.limit and b"\n" not in data:
            self.length += len(data)
            return data
        out = []
        for i, piece in enumerate(data.split(b"\n")):
            if i:
                out.append(b"\n")
                self.length = 0
            room = max(0, self.limit - self.length)
            out.append(piece[:room])
            self.length += len(piece)
        return b"".join(out)


class JsonlSource:
    """The script's own metrics.jsonl (stepscale's records, checked line by line)."""

    parsed = False

    def __init__(self, path: Path) -> None:
        self.tail = MetricsTail(path)

    def read_new(self) -> list[dict[str, Any]]:
        """Records appended since the last call (`MalformedRecord` on a bad line)."""
        return self.tail.read_new()

    def finish(self) -> None:
        """Nothing to wait for: the file is read to its end by `read_new`."""


class PipeSource:
    """One of the program's output pipes: a thread copies every byte to ``out_fd`` (the
    trial's log, so the output is kept whole) and parses the lines as they come."""

    parsed = True

    def __init__(self, spec: MetricsSpec, pipe: IO[bytes], out_fd: int, where: str) -> None:
        self.stream = RecordStream(spec)
        self.where = where
        self.pipe = pipe
        self.out_fd = out_fd
        self.queue: queue.Queue[list[dict[str, Any]]] = queue.Queue()
        self.cap = LineCap()
        self.error: Exception | None = None  # a pattern that hit its bound (patterns.py)
        self.thread = threading.Thread(target=self._copy, name=f"stepscale-{where}", daemon=True)
        self.thread.start()

    def _copy(self) -> None:
        decoder_tail = b""
        fd = self.pipe.fileno()
        while True:
            data = os.read(fd, CHUNK)
            if not data:
                break
            _write_all(self.out_fd, data)
            if self.error is not None:
                continue  # parsing has failed: the output is still copied, the pipe drained
            data, decoder_tail = _split_utf8(decoder_tail + self.cap.cut(data))
            try:
                records = self.stream.feed(data.decode("utf-8", errors="replace"))
            except Exception as exc:  # a pattern past its bound: read_new raises it
                self.error = exc
                continue
            if records:
                self.queue.put(records)
        if self.error is None:
            try:
                tail = self.stream.feed(decoder_tail.decode("utf-8", errors="replace"))
                self.queue.put(tail + self.stream.close())
            except Exception as exc:
                self.error = exc

    def read_new(self) -> list[dict[str, Any]]:
        """Records parsed since the last call (the error, if parsing failed)."""
        if self.error is not None:
            raise self.error
        out: list[dict[str, Any]] = []
        while True:
            try:
                out += self.queue.get_nowait()
            except queue.Empty:
                return out

    def finish(self, timeout: float = 10.0) -> None:
        """Wait for the pipe's end (the program exited; a child of it may hold the pipe
        open a little longer)."""
        self.thread.join(timeout)


class FileSource:
    """A file the script writes (a CSV log, a text log), followed as it grows from where it
    ended when the program started (an earlier attempt's lines are not this run's); a
    file replaced or cut short is read again from its start."""

    parsed = True

    def __init__(self, spec: MetricsSpec, path: Path) -> None:
        self.spec = spec
        self.path = path
        self.where = f"file {path}"
        self.stream = RecordStream(spec)
        self.cap = LineCap()
        self.offset = 0
        self.inode: int | None = None
        self.refused: int | None = None  # the mode of a path that is not a regular file
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return
        if not stat.S_ISREG(st.st_mode):  # never opened: a FIFO would block the job
            self.refused = st.st_mode
            return
        self.inode, self.offset = st.st_ino, st.st_size
        self._header_of_earlier_lines()

    def _header_of_earlier_lines(self) -> None:
        """Read the lines already there without keeping their records: a CSV appended to
        keeps its header, the current step is known. Of a long file only its first and
        last `EARLIER_BYTES` are read (the header, and the last step)."""
        with open(self.path, "rb") as f:
            if self.offset <= 2 * EARLIER_BYTES:
                data = f.read(self.offset)
            else:
                head = f.read(EARLIER_BYTES).rpartition(b"\n")[0]
                f.seek(self.offset - EARLIER_BYTES)
                tail = f.read(EARLIER_BYTES).partition(b"\n")[2]
                data = head + b"\n" + tail
        self.stream.feed(self.cap.cut(data).decode("utf-8", errors="replace"))
        self.stream.records = self.stream.lines = 0
        self.stream.last_lines.clear()

    def read_new(self) -> list[dict[str, Any]]:
        """Records of the lines completed since the last call (at most
        `sweeps.trainers.metrics_file.READ_CAP` bytes
        of them a call); `UnreadableSource` when the file is not a regular file."""
        if self.refused is not None:
            raise UnreadableSource(self.path, self.refused)
        got = read_appended(self.path, self.inode, self.offset)
        if got is None:
            return []
        data, self.inode, restarted = got
        if restarted:
            self.offset = 0
            counted = self.stream.records
            self.stream = RecordStream(self.spec)  # a new file: a new header, no step yet
            self.stream.records = counted
            self.cap = LineCap()
        data, _ = _split_utf8(data)
        self.offset += len(data)
        return self.stream.feed(self.cap.cut(data).decode("utf-8", errors="replace"))

    def finish(self) -> None:
        """The program has exited: its last line counts even without a newline."""


def final_records(source: Any) -> list[dict[str, Any]]:
    """What a source still gives after the program exited."""
    source.finish()
    records = source.read_new()
    if isinstance(source, FileSource):
        records += source.stream.close()
    return records


def _split_utf8(data: bytes) -> tuple[bytes, bytes]:
    """``data`` cut before an incomplete UTF-8 character at its end (kept for the next read)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:  # a continuation byte: look further back
            continue
        if byte & 0x80 == 0:
            return data, b""
        need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4
        return (data, b"") if back >= need else (data[:-back], data[-back:])
    return data, b""


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte (a pipe or file may take part of a write); a closed log loses it."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        pass

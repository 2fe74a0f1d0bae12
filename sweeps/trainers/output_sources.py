"""Where a command trainer's records come from while it runs (``trainer.metrics.source``):
the ``metrics.jsonl`` it appends to itself (`JsonlSource`), its stdout, stderr or both
merged in the order printed (``output``) read through a pipe and passed on whole to the
trial's logs (`PipeSource`), a file it writes (`FileSource`), or the structured files of
`sweeps.trainers.structured_sources` (TensorBoard event files, a JSON document). Each gives
the records completed since it was last asked; a record whose step cannot be trusted raises
`UnreliableStep` (a `MalformedRecord`: the attempt fails) from `read_new`."""

from __future__ import annotations

import contextlib
import os
import queue
import stat
import sys
import threading
from pathlib import Path
from typing import IO, Any

from stepscale.sweeps.trainers.line_formats import JSON_DOCUMENT, TENSORBOARD, MetricsSpec
from stepscale.sweeps.trainers.metrics_file import MalformedRecord, MetricsTail, read_appended
from stepscale.sweeps.trainers.record_stream import RecordStream
from stepscale.sweeps.trainers.structured_sources import (
    JsonDocumentSource,
    TensorBoardSource,
    check_regular,
)

CHUNK = 65536
READ_LIMIT = 4 * 1024 * 1024  # bytes of a followed file read at one poll: memory stays bounded
_SEAM_BYTES = 64  # the bytes before the offset compared at each poll (`FileSource._rewritten`)


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

    def __init__(
        self, spec: MetricsSpec, pipe: IO[bytes], out_fd: int, where: str, stream: RecordStream
    ) -> None:
        self.stream = stream
        self.where = where
        self.pipe = pipe
        self.out_fd = out_fd
        self.queue: queue.Queue[list[dict[str, Any]] | Exception] = queue.Queue()
        self.failed = False  # a record was refused: the output is still copied, not read
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
            if self.failed:
                continue
            data, decoder_tail = _split_utf8(decoder_tail + data)
            text = data.decode("utf-8", errors="replace")
            self._parse(lambda: self.stream.feed(text))  # noqa: B023 (called at once)
        if not self.failed:
            tail = decoder_tail.decode("utf-8", errors="replace")
            self._parse(lambda: self.stream.feed(tail) + self.stream.close())
        self.queue.put([])

    def _parse(self, read: Any) -> None:
        try:
            records = read()
        except Exception as exc:  # refused, or a pattern past its bound: the attempt fails
            # (the thread goes on copying and draining the pipe, so the program never blocks)
            self.failed = True
            self.queue.put(exc)
            return
        if records:
            self.queue.put(records)

    def read_new(self) -> list[dict[str, Any]]:
        """Records parsed since the last call (`UnreliableStep` once one was refused,
        `PatternTimeout` once a pattern hit its bound)."""
        out: list[dict[str, Any]] = []
        while True:
            try:
                got = self.queue.get_nowait()
            except queue.Empty:
                return out
            if isinstance(got, Exception):
                raise got
            out += got

    def finish(self, timeout: float = 10.0) -> None:
        """Wait for the pipe's end (the program exited; a child of it may hold the pipe
        open a little longer)."""
        self.thread.join(timeout)


class FileSource:
    """A file the script writes (a CSV log, a text log), followed as it grows from where it
    ended when the program started (an earlier attempt's lines are not this run's); a
    file replaced, cut short or rewritten whole in place is read again from its start, and
    of it only the records that do not repeat, in order, the ones the file held before
    (`Replay`)."""

    parsed = True

    def __init__(self, spec: MetricsSpec, path: Path, stream: RecordStream | None = None) -> None:
        self.spec = spec
        self.path = path
        self.where = f"file {path}"
        self.stream = stream = stream or RecordStream(spec)
        self.make_stream = lambda: RecordStream(spec, stream.settings, stream.resumed)
        self.offset = 0
        self.inode: int | None = None
        self.head = b""  # the file's first line: a file rewritten whole changes it
        # the last bytes read, just before the offset: a file rewritten whole with the same
        # first line (a run resumed from a checkpoint whose logger starts its file again)
        # changes them, even when it is as long as before
        self.seam = b""
        self.replay = Replay()
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return
        if not stat.S_ISREG(st.st_mode):  # never opened: a FIFO would block the job
            return  # (read_new refuses it)
        self.inode, self.offset = st.st_ino, st.st_size
        self._header_of_earlier_lines()

    def _header_of_earlier_lines(self) -> None:
        """Read the lines already there without giving their records (nor checking them:
        they are an earlier run's): a CSV appended to keeps its header, and a rewrite that
        writes them again is known to repeat them."""
        with open(self.path, "rb") as f:
            data = f.read(min(self.offset, READ_LIMIT))
            f.seek(max(self.offset - _SEAM_BYTES, 0))
            self.seam = f.read(self.offset - f.tell())
        self.head = data.split(b"\n", 1)[0] + b"\n" if b"\n" in data else b""
        earlier = self.make_stream()
        earlier.checker.check = lambda *a: None  # type: ignore[method-assign]
        with contextlib.suppress(MalformedRecord):  # an earlier run's lines are not checked
            self.replay.held(earlier.feed(data.decode("utf-8", errors="replace")))
        self.stream.format = earlier.format

    def _rewritten(self) -> bool:
        """Was the file rewritten whole in place: its first line changed (a logger that adds a
        column, Lightning's CSVLogger), or the bytes just before where reading stopped (the
        same logger starting its file again in a resumed run, as long as before or longer)?"""
        if not self.head:
            return False
        try:
            with open(self.path, "rb") as f:
                if f.read(len(self.head)) != self.head:
                    return True
                f.seek(self.offset - len(self.seam))
                return f.read(len(self.seam)) != self.seam
        except OSError:
            return False

    def read_new(self) -> list[dict[str, Any]]:
        """Records of the lines completed since the last call; of a file read again from
        its start, only those that do not repeat what it held."""
        check_regular(self.path)
        rewritten = self._rewritten()
        got = read_appended(self.path, self.inode, 0 if rewritten else self.offset, READ_LIMIT)
        if got is None:
            return []
        data, self.inode, restarted = got
        if restarted or rewritten:
            # rewritten in place (a logger that adds a column writes every row again, then
            # more), replaced or cut short (being rewritten, or a run that starts again):
            # read again from the start, the rows it held before skipped while they repeat
            self.offset = 0
            counted = self.stream.records
            self.stream = self.make_stream()  # a new file: a new header, no step yet
            self.stream.records = counted
            self.replay.start(self.stream)
        data, _ = _split_utf8(data)
        if self.offset == 0:
            self.head = data.split(b"\n", 1)[0] + b"\n" if b"\n" in data else b""
            self.seam = b""
        self.offset += len(data)
        self.seam = (self.seam + data)[-_SEAM_BYTES:]
        return self.replay.new(self.stream.feed(data.decode("utf-8", errors="replace")))

    def finish(self) -> None:
        """The program has exited: its last line counts even without a newline."""


class Replay:
    """The records a followed file held, in order (a fingerprint each), so that when it is
    read again from its start the rows it repeats are recognised: they are neither given
    again nor checked again (an earlier attempt's rows up to step 40, then a resumed run's
    from step 31, are not a step going backwards), and the first row that differs ends the
    replay — from there the file is new (a run that starts again gives everything)."""

    def __init__(self) -> None:
        self.keys: list[int] = []  # the fingerprints of the records the file held, in order
        self.at: int | None = None  # while replaying: the index of the next expected record
        self.repeated: set[int] = set()  # ids of the records just recognised as repeats

    @staticmethod
    def key(record: dict[str, Any]) -> int:
        """A record's fingerprint (a NaN equals a NaN)."""
        return hash(tuple(sorted((k, "nan" if v != v else v) for k, v in record.items())))

    def held(self, records: list[dict[str, Any]]) -> None:
        """The file held ``records`` before this run (not given)."""
        self.keys += [self.key(r) for r in records]

    def start(self, stream: RecordStream) -> None:
        """The file is read again from its start through ``stream``: its checker sees only
        the records that do not repeat."""
        self.at = 0
        check = stream.checker.check

        def check_new(record: dict[str, Any], lineno: int, text: str) -> None:
            if self.at is not None:
                if self.at < len(self.keys) and self.key(record) == self.keys[self.at]:
                    self.at += 1
                    self.repeated.add(id(record))
                    return
                del self.keys[self.at :]  # the file differs from here: what it held is gone
                self.at = None
            check(record, lineno, text)

        stream.checker.check = check_new  # type: ignore[method-assign]

    def new(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Of ``records`` (just read), those that do not repeat; remembered in order."""
        out = [r for r in records if id(r) not in self.repeated]
        self.repeated.clear()
        self.keys += [self.key(r) for r in out]
        return out


def final_records(source: Any) -> list[dict[str, Any]]:
    """What a source still gives after the program exited."""
    source.finish()
    if isinstance(source, TensorBoardSource | JsonDocumentSource):
        return source.final()
    records = source.read_new()
    if isinstance(source, FileSource):
        while True:  # read to the end, a bounded piece at a time
            offset = source.offset
            records += source.read_new()
            if source.offset == offset:
                break
        records += source.stream.close()
    return records


def open_source(
    spec: MetricsSpec,
    pipes: dict[str, Any],
    place: Path,
    settings: dict[str, Any],
    resumed: bool,
    copy_to: int | None = None,
) -> Any:
    """The source of a running program's records: ``pipes`` its ``stdout``/``stderr``
    (``output``: stdout carries both), ``place`` the file or folder a file source names
    (placeholders filled), ``settings`` the trial's (for step and value expressions),
    ``resumed`` whether the program resumes (values before its first step are unplaced),
    ``copy_to`` where a pipe's bytes are copied (default: the job's own stdout or stderr,
    the trial's logs)."""
    stream = RecordStream(spec, settings, resumed)
    if spec.source in ("stdout", "stderr", "output"):
        pipe = "stderr" if spec.source == "stderr" else "stdout"
        fd = sys.stderr.fileno() if pipe == "stderr" else sys.stdout.fileno()
        fd = fd if copy_to is None else copy_to
        return PipeSource(spec, pipes[pipe], fd, spec.source, stream)
    if spec.format == TENSORBOARD:
        return TensorBoardSource(spec, place, stream)
    if spec.format == JSON_DOCUMENT:
        return JsonDocumentSource(spec, place, stream)
    return FileSource(spec, place, stream)


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

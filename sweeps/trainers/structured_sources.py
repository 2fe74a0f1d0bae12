"""Structured files the frameworks already write, followed while the trial runs:
TensorBoard event files (`TensorBoardSource`, ``format: tensorboard``) and a JSON document
rewritten in place (`JsonDocumentSource`, ``format: json_document``: a trainer's state file
with a list of logged records). Each gives the records completed since it was last asked,
through the same `RecordStream` rules (names, values, step checks) as printed lines.

What was there when the program started is an earlier attempt's, not this run's: event
files that existed are skipped, a document's records that existed are not repeated.
"""

from __future__ import annotations

import glob
import json
import os
import stat
from pathlib import Path
from typing import Any

from stepscale.sweeps.trainers.line_formats import STEP, MetricsSpec, number
from stepscale.sweeps.trainers.metrics_file import UnreadableSource
from stepscale.sweeps.trainers.record_stream import RecordStream
from stepscale.sweeps.trainers.step_checks import UnreliableStep
from stepscale.sweeps.trainers.tfevents import EventFileError, records, scalars

EVENT_GLOB = "events.out.tfevents.*"
MAX_DOCUMENT = 64 * 1024 * 1024  # a larger json_document is refused, not read
READ_LIMIT = 4 * 1024 * 1024  # bytes of one event file read at one poll


def check_regular(path: Path) -> None:
    """Refuse a source that is not a regular file (a device, a pipe: endless or unseekable)
    with `UnreadableSource`, as a followed metrics.jsonl is refused."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        raise UnreadableSource(path, mode)


class TensorBoardSource:
    """Every ``events.out.tfevents.*`` under a folder (searched recursively, files that
    appear later included), read as they grow. A tag is mapped by ``names`` as
    ``folder/tag`` (its file's folder relative to the source, e.g. ``validation/epoch_loss``)
    or as ``tag``; unmapped tags keep their name. The step is the event's own. Events of
    several files are merged in step order: an event is given once every file has reached
    its step (all are given when the program has exited); a file that appears with steps
    before those already given fails the attempt (two runs in one folder)."""

    parsed = True

    def __init__(self, spec: MetricsSpec, root: Path, stream: RecordStream) -> None:
        self.spec = spec
        self.root = root
        self.where = f"TensorBoard files under {root}"
        self.stream = stream
        self.files: dict[Path, dict[str, Any]] = {}
        self.given = -1  # the last step given
        self.held: list[tuple[int, int, str, dict[str, float]]] = []
        self.events = 0
        for path in self._paths():  # an earlier attempt's files: never read
            self.files[path] = {"offset": None, "last": None}

    def _paths(self) -> list[Path]:
        return sorted(
            Path(p) for p in glob.glob(str(self.root / "**" / EVENT_GLOB), recursive=True)
        )

    def _name(self, path: Path, tag: str) -> str:
        folder = os.path.relpath(path.parent, self.root)
        names = self.spec.names
        if folder != "." and f"{folder}/{tag}" in names:
            return names[f"{folder}/{tag}"]
        return names.get(tag, tag)

    def read_new(self, final: bool = False) -> list[dict[str, Any]]:
        """Records of the events written since the last call."""
        for path in self._paths():
            state = self.files.setdefault(path, {"offset": 0, "last": None, "new": True})
            if state["offset"] is None:
                continue
            check_regular(path)
            try:
                with open(path, "rb") as f:
                    f.seek(state["offset"])
                    data = f.read(READ_LIMIT)
            except OSError:
                continue
            try:
                got, used = records(data)
            except EventFileError as exc:
                raise UnreliableStep(
                    f"{path} is not a TensorBoard event file ({exc})", []
                ) from None
            state["offset"] += used
            for n, event in enumerate(got):
                step, values = scalars(event)
                if step is None or not values:
                    continue
                self.events += 1
                if state.get("new") and step < self.given:
                    raise UnreliableStep(
                        f"the event file {path} appeared with step {step}, before step "
                        f"{self.given} already recorded from other files: point "
                        "trainer.metrics.source at one run's folder",
                        [],
                    )
                state["new"] = False
                state["last"] = step
                fields = {self._name(path, t): v for t, v in values.items()}
                self.held.append((step, self.events, f"{path.name} event {n + 1}", fields))
        ready = [
            s["last"]
            for s in self.files.values()
            if s["offset"] is not None and s["last"] is not None
        ]
        if not ready:
            return []
        mark = None if final else min(ready)
        self.held.sort(key=lambda h: (h[0], h[1]))
        out: list[dict[str, Any]] = []
        keep = []
        for step, count, text, fields in self.held:
            if mark is not None and step > mark:
                keep.append((step, count, text, fields))
                continue
            self.given = max(self.given, step)
            out += self.stream.place({STEP: float(step), **fields}, count, f"{text}: {fields}")
        self.held = keep
        return out

    def finish(self) -> None:
        """Nothing to wait for."""

    def final(self) -> list[dict[str, Any]]:
        """Every event still held, once the program has exited (files read to their end)."""
        out: list[dict[str, Any]] = []
        while True:
            offsets = [s["offset"] for s in self.files.values()]
            out += self.read_new(final=True)
            if [s["offset"] for s in self.files.values()] == offsets:
                return out + self.stream.close()


class JsonDocumentSource:
    """A JSON document the program rewrites in place (Hugging Face's ``trainer_state.json``
    with its ``log_history`` list): read again whenever its size or time changes; the list
    ``records`` names (a dotted key; the document itself when it is a list) gives one record
    per entry, its step the entry's ``step`` field after ``names``; entries already given
    are not repeated (a list that shrinks is a new run, read from its start). A path with
    ``*`` reads the newest file that matches (``checkpoint-*/trainer_state.json``)."""

    parsed = True

    def __init__(self, spec: MetricsSpec, path: Path, stream: RecordStream) -> None:
        self.spec = spec
        self.path = path
        self.where = f"document {path}"
        self.stream = stream
        self.seen = 0
        self.stamp: tuple[str, int, int] | None = None
        entries = self._entries()
        self.seen = len(entries) if entries is not None else 0  # an earlier attempt's

    def _file(self) -> Path | None:
        if "*" not in str(self.path):
            return self.path if self.path.exists() else None
        found = [Path(p) for p in glob.glob(str(self.path))]
        return max(found, key=lambda p: p.stat().st_mtime_ns) if found else None

    def _entries(self) -> list[Any] | None:
        path = self._file()
        if path is None:
            return None
        check_regular(path)
        try:
            st = path.stat()
            stamp = (str(path), st.st_size, st.st_mtime_ns)
            if stamp == self.stamp:
                return None
            if st.st_size > MAX_DOCUMENT:
                raise UnreliableStep(f"{path} is larger than {MAX_DOCUMENT} bytes", [])
            doc = json.loads(path.read_bytes())
        except (OSError, ValueError):
            return None  # being rewritten: read it at the next change
        self.stamp = stamp
        for key in (self.spec.records or "").split(".") if self.spec.records else []:
            doc = doc.get(key) if isinstance(doc, dict) else None
        if not isinstance(doc, list):
            raise UnreliableStep(
                f"{path}: trainer.metrics.records {self.spec.records!r} is not a list in it", []
            )
        return doc

    def read_new(self) -> list[dict[str, Any]]:
        """Records of the entries added since the last call."""
        entries = self._entries()
        if entries is None:
            return []
        if len(entries) < self.seen:
            self.seen = 0
        out: list[dict[str, Any]] = []
        for n in range(self.seen, len(entries)):
            entry = entries[n]
            if not isinstance(entry, dict):
                continue
            fields = {}
            for key, value in entry.items():
                got = (
                    None
                    if isinstance(value, bool)
                    else number(str(value))
                    if value is not None
                    else None
                )
                if got is not None and isinstance(value, int | float | str):
                    fields[self.spec.names.get(key, key)] = got
            if fields:
                out += self.stream.place(
                    fields, n + 1, f"{self.spec.records or 'entry'}[{n}]: {entry}"
                )
        self.seen = len(entries)
        return out

    def finish(self) -> None:
        """Nothing to wait for."""

    def final(self) -> list[dict[str, Any]]:
        """The entries written last, once the program has exited."""
        self.stamp = None
        return self.read_new() + self.stream.close()


__all__ = ["JsonDocumentSource", "TensorBoardSource", "check_regular"]

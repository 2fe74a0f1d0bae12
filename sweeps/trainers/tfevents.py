"""A dependency-free reader of TensorBoard event files (``events.out.tfevents.*``): the
TFRecord framing and the few protobuf fields of an ``Event`` that carry scalars. The job
never imports TensorFlow or the tensorboard package.

TFRecord: each record is ``uint64 length (little-endian) | uint32 masked CRC of length |
data[length] | uint32 masked CRC of data``; a record not yet wholly written (a file still
growing) waits for the rest (`records` returns where it stopped). The CRCs are not checked
(the length is: a length beyond `MAX_RECORD` ends the reading with `EventFileError`).

Event: ``wall_time = 1`` (double), ``step = 2`` (int64), ``summary = 5``; Summary:
``value = 1`` (repeated); Value: ``tag = 1`` (string), ``simple_value = 2`` (float: what
``torch.utils.tensorboard`` and tensorboardX write), ``tensor = 8`` (TensorProto: ``dtype
= 1``, ``tensor_content = 4``, ``float_val = 5``, ``double_val = 6`` — what
``tf.summary.scalar`` writes; a scalar only: one element).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

MAX_RECORD = 64 * 1024 * 1024  # a longer record is not an event file's
DT_FLOAT, DT_DOUBLE = 1, 2


class EventFileError(ValueError):
    """Bytes that are not TFRecord framing (the file is not an event file)."""


def records(data: bytes, offset: int = 0) -> tuple[list[bytes], int]:
    """The whole records of ``data`` from ``offset`` and where the first incomplete one
    starts (the offset to read from when more bytes arrive)."""
    out = []
    while len(data) - offset >= 12:
        (length,) = struct.unpack_from("<Q", data, offset)
        if length > MAX_RECORD:
            raise EventFileError(f"a record of {length} bytes at offset {offset}")
        end = offset + 12 + length + 4
        if end > len(data):
            break
        out.append(data[offset + 12 : offset + 12 + length])
        offset = end
    return out, offset


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise EventFileError("a varint cut short")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise EventFileError("a varint too long")


def _fields(buf: bytes) -> Iterator[tuple[int, int, object]]:
    """(field number, wire type, value) of a protobuf message: an int for varints, bytes
    for length-delimited fields, raw little-endian bytes for fixed 32/64."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, wire, value
        elif wire == 1:
            yield number, wire, buf[pos : pos + 8]
            pos += 8
        elif wire == 2:
            length, pos = _varint(buf, pos)
            yield number, wire, buf[pos : pos + length]
            pos += length
        elif wire == 5:
            yield number, wire, buf[pos : pos + 4]
            pos += 4
        else:
            raise EventFileError(f"wire type {wire}")


def _tensor_scalar(buf: bytes) -> float | None:
    dtype = 0
    values: list[float] = []
    content = b""
    for number, wire, value in _fields(buf):
        if number == 1 and wire == 0:
            dtype = int(value)  # type: ignore[arg-type]
        elif number == 4 and wire == 2:
            content = value  # type: ignore[assignment]
        elif number == 5 and wire in (2, 5):  # float_val, packed or one by one
            values += [v for (v,) in struct.iter_unpack("<f", value)]  # type: ignore[arg-type]
        elif number == 6 and wire in (1, 2):  # double_val
            values += [v for (v,) in struct.iter_unpack("<d", value)]  # type: ignore[arg-type]
    if not values and content:
        if dtype == DT_FLOAT and len(content) == 4:
            values = [struct.unpack("<f", content)[0]]
        elif dtype == DT_DOUBLE and len(content) == 8:
            values = [struct.unpack("<d", content)[0]]
    return values[0] if len(values) == 1 else None


def scalars(event: bytes) -> tuple[int | None, dict[str, float]]:
    """The step and the scalars (tag → value) of one serialized Event (a step of 0 is not
    written: protobuf leaves a field at its default out)."""
    step: int | None = 0
    out: dict[str, float] = {}
    for number, wire, value in _fields(event):
        if number == 2 and wire == 0:
            step = int(value)  # type: ignore[arg-type]
            if step >= 1 << 63:
                step -= 1 << 64
        elif number == 5 and wire == 2:
            for vnum, vwire, summary_value in _fields(value):  # type: ignore[arg-type]
                if vnum != 1 or vwire != 2:
                    continue
                tag, scalar = None, None
                for fnum, fwire, f in _fields(summary_value):  # type: ignore[arg-type]
                    if fnum == 1 and fwire == 2:
                        tag = bytes(f).decode("utf-8", errors="replace")  # type: ignore[arg-type]
                    elif fnum == 2 and fwire == 5:
                        scalar = struct.unpack("<f", f)[0]  # type: ignore[arg-type]
                    elif fnum == 8 and fwire == 2:
                        scalar = _tensor_scalar(f)  # type: ignore[arg-type]
                if tag is not None and scalar is not None:
                    out[tag] = float(scalar)
    return step, out


__all__ = ["EventFileError", "records", "scalars"]

"""Structured files the frameworks write, followed as a trial runs: TensorBoard event files
(written here by the real ``torch.utils.tensorboard.SummaryWriter`` and by the tensorboard
package's own writer with a TF2-style tensor scalar; the job's reader imports neither) and a
JSON document rewritten in place (a trainer state file with a log-history list)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from stepscale.sweeps.trainers.line_formats import read_metrics
from stepscale.sweeps.trainers.record_stream import RecordStream
from stepscale.sweeps.trainers.step_checks import UnreliableStep
from stepscale.sweeps.trainers.structured_sources import JsonDocumentSource, TensorBoardSource
from stepscale.sweeps.trainers.tfevents import records, scalars


def tb_spec(**extra: object) -> object:
    return read_metrics({"source": "{trial_dir}", "format": "tensorboard", **extra})


def test_tensorboard_files_of_torchs_summary_writer_followed_as_they_grow(tmp_path: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    spec = tb_spec(names={"eval/loss": "eval_loss", "train/loss": "train_loss"})
    old = SummaryWriter(str(tmp_path / "runs" / "old"))  # an earlier attempt's file
    old.add_scalar("train/loss", 9.0, 1)
    old.close()
    source = TensorBoardSource(spec, tmp_path, RecordStream(spec))
    writer = SummaryWriter(str(tmp_path / "runs" / "now"))
    for step in (10, 20):
        writer.add_scalar("train/loss", 3.0 / step, step)
    writer.add_scalar("eval/loss", 0.25, 20)
    writer.flush()
    assert source.read_new() == [
        {"step": 10, "train_loss": pytest.approx(0.3)},
        {"step": 20, "train_loss": pytest.approx(0.15)},
        {"step": 20, "eval_loss": 0.25},
    ]
    writer.add_scalar("eval/loss", float("nan"), 30)
    writer.close()
    last = source.final()
    assert [r["step"] for r in last] == [30] and math.isnan(last[0]["eval_loss"])


def test_a_tensor_scalar_of_tf2_style_and_a_record_written_in_two_halves(tmp_path: Path) -> None:
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    class Bytes:
        def __init__(self) -> None:
            self.data = b""

        def write(self, b: bytes) -> None:
            self.data += b

        def flush(self) -> None:
            pass

        def close(self) -> None:
            pass

    sink = Bytes()
    writer = RecordWriter(sink)
    for step, value in ((5, 1.5), (6, 1.25)):
        tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[value])
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="loss", tensor=tensor)])
        writer.write(event_pb2.Event(step=step, wall_time=1.0, summary=summary).SerializeToString())
    got, used = records(sink.data)
    assert [scalars(r) for r in got] == [(5, {"loss": 1.5}), (6, {"loss": 1.25})]
    assert used == len(sink.data)
    # a file still being written: the half record waits for the rest
    path = tmp_path / "events.out.tfevents.1.host"
    half = len(sink.data) - 7
    spec = tb_spec()
    source = TensorBoardSource(spec, tmp_path, RecordStream(spec))
    path.write_bytes(sink.data[:half])
    assert source.read_new() == [{"step": 5, "loss": 1.5}]
    with open(path, "ab") as f:
        f.write(sink.data[half:])
    assert source.final() == [{"step": 6, "loss": 1.25}]


def test_event_files_of_two_folders_are_merged_in_step_order(tmp_path: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    spec = tb_spec(names={"validation/epoch_loss": "eval_loss", "train/epoch_loss": "train_loss"})
    source = TensorBoardSource(spec, tmp_path, RecordStream(spec))
    train, valid = (
        SummaryWriter(str(tmp_path / "train")),
        SummaryWriter(str(tmp_path / "validation")),
    )
    for step in (10, 20, 30):
        train.add_scalar("epoch_loss", 1.0 / step, step)
    train.flush()
    valid.add_scalar("epoch_loss", 0.5, 10)
    valid.flush()
    assert [r["step"] for r in source.read_new()] == [10, 10]  # 20, 30 wait for validation
    valid.add_scalar("epoch_loss", 0.4, 30)
    valid.close()
    train.close()
    assert [(r["step"], sorted(r)) for r in source.final()] == [
        (20, ["step", "train_loss"]),
        (30, ["step", "train_loss"]),
        (30, ["eval_loss", "step"]),
    ]


def test_a_json_document_rewritten_in_place_gives_each_entry_once(tmp_path: Path) -> None:
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"log_history": [{"loss": 9.0, "step": 1}]}))  # earlier attempt
    spec = read_metrics(
        {
            "source": "trainer_state.json",
            "format": "json_document",
            "records": "log_history",
            "names": {"loss": "train_loss"},
        }
    )
    source = JsonDocumentSource(spec, path, RecordStream(spec))
    assert source.read_new() == []
    history = [{"loss": 9.0, "step": 1}, {"loss": 3.0, "step": 10, "epoch": 0.5}]
    path.write_text(json.dumps({"log_history": history}))
    assert source.read_new() == [{"step": 10, "train_loss": 3.0, "epoch": 0.5}]
    history.append({"eval_loss": 2.9, "step": 10})
    history.append({"loss": 2.0, "step": 5})  # a step going back: refused
    path.write_text(json.dumps({"log_history": history}))
    with pytest.raises(UnreliableStep, match="goes backwards, from 10 to 5"):
        source.read_new()


def test_an_endless_source_is_refused_not_read(tmp_path: Path) -> None:
    from stepscale.sweeps.trainers.metrics_file import UnreadableSource
    from stepscale.sweeps.trainers.output_sources import FileSource

    (tmp_path / "metrics.csv").symlink_to("/dev/zero")
    spec = read_metrics({"source": "metrics.csv", "format": "csv"})
    with pytest.raises(UnreadableSource, match="is a character device, not a regular file"):
        FileSource(spec, tmp_path / "metrics.csv").read_new()
    (tmp_path / "events.out.tfevents.1.x").symlink_to("/dev/zero")
    source = TensorBoardSource(tb_spec(), tmp_path, RecordStream(tb_spec()))
    source.files = {}
    with pytest.raises(UnreadableSource, match="is a character device, not a regular file"):
        source.read_new()

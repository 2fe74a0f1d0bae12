"""The reader of a command trainer's printed output (docs/trainers.md, section 2b): the
seven classes of failure of issue 40 (each test here fails on the reader before it), the
step checks that refuse a step sequence that is not an optimizer-step sequence, carriage
returns, thousands separators, Python-literal dicts, bounded lines, both streams as one
source, and the suggestion from a log. Pure functions and tiny processes: the fast tier."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stepscale.errors import UsageError
from stepscale.sweeps.trainers.line_formats import read_metrics
from stepscale.sweeps.trainers.output_sources import final_records, open_source
from stepscale.sweeps.trainers.record_stream import MAX_LINE, RecordStream, parse_text
from stepscale.sweeps.trainers.step_checks import UnreliableStep


def read(block: dict, text: str, **settings: float) -> list[dict]:
    return parse_text(read_metrics({"source": "stdout", **block}), text, settings)[0]


def refused(block: dict, text: str, **settings: float) -> str:
    with pytest.raises(UnreliableStep) as info:
        read(block, text, **settings)
    return str(info.value)


# ------------------------------------------------------------------ the seven classes


def test_class_1_a_step_derived_from_epoch_and_batch_and_the_trials_settings() -> None:
    log = (
        "Epoch 1/2\n"
        "epoch: 1  batch: 50  loss: 2.0\n"
        "epoch: 1  batch: 100  loss: 1.5  val_loss: 1.6\n"
        "epoch: 2  batch: 50  loss: 1.2\n"
        "epoch: 2  batch: 100  loss: 1.0  val_loss: 1.1\n"
    )
    block = {
        "format": "kv_colon",
        "step": "(epoch - 1) * steps_per_epoch + batch",
        "names": {"val_loss": "eval_loss"},
    }
    assert read(block, log, steps_per_epoch=100) == [
        {"step": 50, "loss": 2.0},
        {"step": 100, "loss": 1.5, "eval_loss": 1.6},
        {"step": 150, "loss": 1.2},
        {"step": 200, "loss": 1.0, "eval_loss": 1.1},
    ]
    # a dotted trial setting, and a counter printed on a line of its own before its batches
    log2 = "epoch: 3\nbatch: 10  loss: 0.5\n"
    block2 = {"format": "kv_colon", "step": "epoch * data.steps + batch"}
    assert read(block2, log2, **{"data.steps": 20}) == [{"step": 70, "loss": 0.5}]


def test_class_1_a_step_counted_from_records_when_none_is_printed() -> None:
    log = "{'loss': 2.5}\nwarming up\n{'loss': 2.0}\n{'loss': 1.5}\n"
    assert read({"format": "json", "step_every": 10}, log) == [
        {"step": 10, "loss": 2.5},
        {"step": 20, "loss": 2.0},
        {"step": 30, "loss": 1.5},
    ]


def test_class_2_a_per_epoch_counter_taken_as_the_step_is_refused_naming_the_lines() -> None:
    log = "batch=1 loss=2.0\nbatch=2 loss=1.8\nbatch=3 loss=1.7\nbatch=1 loss=1.5\n"
    message = refused({"format": "kv_equals", "names": {"batch": "step"}}, log)
    assert "goes backwards, from 3 to 1" in message
    assert "line 3: batch=3 loss=1.7" in message and "line 4: batch=1 loss=1.5" in message
    # the epoch number of a per-epoch summary written twice: repeated with another value
    csv = "epoch,loss\n0,2.0\n0,1.9\n"
    message = refused({"format": "csv", "names": {"epoch": "step"}}, csv)
    assert "step 0 is given twice with different values of loss (2 and 1.9)" in message


def test_class_3_a_value_printed_before_its_step_line_belongs_to_the_next_one() -> None:
    log = "val loss 3.0\niter 1: loss 3.1\nval loss 2.0\niter 2: loss 2.1\n"
    block = {
        "format": "regex",
        "pattern": [r"^iter (?P<step>\d+): loss (?P<loss>\S+)", r"^val loss (?P<eval_loss>\S+)"],
        "unstepped": "next",
    }
    assert read(block, log) == [
        {"step": 1, "eval_loss": 3.0},
        {"step": 1, "loss": 3.1},
        {"step": 2, "eval_loss": 2.0},
        {"step": 2, "loss": 2.1},
    ]
    # read with the default (last), an eval one step off a grid of train steps is refused
    grid = "step 10 loss 3.0\nstep 20 loss 2.5\nstep 29 val 2.4\nstep 30 loss 2.2\n"
    block = {
        "format": "regex",
        "pattern": [
            r"step (?P<step>\d+) loss (?P<loss>\S+)",
            r"step (?P<step>\d+) val (?P<eval_loss>\S+)",
        ],
    }
    assert "one step off the train records' grid of 10 steps" in refused(block, grid)
    # … but not at the trial's last step, nor off the grid by more than one
    ok = "step 10 loss 3.0\nstep 20 loss 2.5\nstep 25 val 2.4\nstep 29 val 2.3\n"
    assert len(read(block, ok, max_steps=29)) == 4


def test_class_4_values_before_the_first_step_line_are_at_step_0_from_scratch() -> None:
    log = "eval_loss: 4.2\nstep: 10  loss: 3.0\n"
    spec = read_metrics({"source": "stdout", "format": "kv_colon"})
    assert parse_text(spec, log)[0] == [{"step": 0, "eval_loss": 4.2}, {"step": 10, "loss": 3.0}]
    records, stream = parse_text(spec, log, resumed=True)  # resumed: their step is unknown
    assert records == [{"step": 10, "loss": 3.0}] and stream.unplaced == 1
    assert "1 value lines had no step" in stream.notes()[0]


def test_class_5_a_step_printed_rounded_is_refused() -> None:
    log = "epoch: 0.33  loss: 2.0\n"
    message = refused(
        {"format": "kv_colon", "step": "epoch * steps_per_epoch"}, log, steps_per_epoch=30
    )
    assert "gives 9.9, not a whole number" in message and "line 1" in message
    # derived exactly: fine
    assert read({"format": "kv_colon", "step": "epoch * n"}, "epoch: 0.25 loss: 2\n", n=40) == [
        {"step": 10, "loss": 2.0}
    ]


def test_class_6_an_eval_metric_in_other_units_is_transformed() -> None:
    log = "step: 100  ppl: 20.0855369\nstep: 200  ppl: inf\n"
    records = read({"format": "kv_colon", "values": {"eval_loss": "log(ppl)"}}, log)
    assert records[0]["eval_loss"] == pytest.approx(3.0, abs=1e-7)
    assert records[0]["ppl"] == pytest.approx(20.0855369) and math.isnan(records[1]["eval_loss"])
    with pytest.raises(
        UsageError, match=r"trainer.metrics.values.eval_loss: 'log\(ppl': syntax error"
    ):
        read_metrics({"source": "stdout", "format": "kv_colon", "values": {"eval_loss": "log(ppl"}})


def test_class_7_two_patterns_on_one_line_are_both_applied() -> None:
    log = "step 5 | loss 2.5 | val_loss 2.7\n"
    block = {
        "format": "regex",
        "pattern": [
            r"step (?P<step>\d+)",
            r"val_loss (?P<eval_loss>\S+)",
            r"\| loss (?P<loss>\S+)",
        ],
    }
    assert read(block, log) == [{"step": 5, "eval_loss": 2.7, "loss": 2.5}]
    # two patterns that disagree on one line: refused, not a guess
    clash = {
        "format": "regex",
        "pattern": [
            r"step (?P<step>\d+)",
            r"loss (?P<eval_loss>\S+)",
            r"val_loss (?P<eval_loss>\S+)",
        ],
    }
    assert "two values for 'eval_loss'" in refused(clash, log)


# ------------------------------------------------------------ what the docs promise


def test_only_the_text_after_a_lines_last_carriage_return_is_read() -> None:
    bar = "".join(f"\rstep: {i}  loss: 9.{i}" for i in range(1, 6))  # redraws of one line
    log = bar + "\rstep: 6  loss: 1.0\nstep: 7  loss: 0.9\r\n"
    assert read({"format": "kv_colon"}, log) == [{"step": 6, "loss": 1.0}, {"step": 7, "loss": 0.9}]


def test_thousands_separators_are_read_whole_in_every_format() -> None:
    assert read({"format": "kv_colon"}, "step: 1,000  tps: 13,352  loss: 2.5\n") == [
        {"step": 1000, "tps": 13352.0, "loss": 2.5}
    ]
    assert read({"format": "kv_equals"}, "step=2,000 tokens=1,234,567.5\n") == [
        {"step": 2000, "tokens": 1234567.5}
    ]
    csv = 'step,tokens,loss\n10,"13,352",2.5\n20,14000,2.4\n'  # quoted: one cell
    assert read({"format": "csv"}, csv) == [
        {"step": 10, "tokens": 13352.0, "loss": 2.5},
        {"step": 20, "tokens": 14000.0, "loss": 2.4},
    ]
    assert read({"format": "json"}, '{"step": 3, "tokens": "13,352"}\n') == [
        {"step": 3, "tokens": 13352.0}
    ]


def test_python_literal_dicts_are_read_safely() -> None:
    log = (
        "{'loss': 2.3, 'epoch': 0.5, 'step': 10}\n"
        "{'eval_loss': nan, 'step': 20, 'lr': np.float64(1e-3), 'x': -inf}\n"
        "{'step': 30, 'loss': __import__('os').system('echo pwned')}\n"  # not a literal
    )
    records = read({"format": "json"}, log)
    assert records[0] == {"step": 10, "loss": 2.3, "epoch": 0.5}
    assert math.isnan(records[1]["eval_loss"]) and records[1]["lr"] == 1e-3
    assert records[1]["x"] == -math.inf and len(records) == 2


def test_a_line_too_long_is_read_up_to_the_bound_and_counted() -> None:
    spec = read_metrics({"source": "stdout", "format": "kv_colon"})
    stream = RecordStream(spec)
    out = stream.feed("step: 1 loss: 2.0 " + "x" * 1000)
    for _ in range(80):  # a 5 MB line arriving in pieces: memory stays bounded
        out += stream.feed("y" * 65536)
        assert len(stream.partial) <= MAX_LINE
    out += stream.feed("\nstep: 2 loss: 1.0\n") + stream.close()
    assert out == [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.0}]
    assert stream.cut_lines == 1 and "cut" in stream.notes()[0]
    # 100,000 redraws on one line: only the last is kept, nothing is cut
    stream = RecordStream(spec)
    redraws = "".join(f"\rstep: {i} loss: 0.5" for i in range(100_000))
    assert stream.feed(redraws + "\n") == [{"step": 99_999, "loss": 0.5}]
    assert stream.cut_lines == 0


def test_both_streams_merged_in_the_order_printed(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "print('step: 1', flush=True)\n"
        "print('loss: 2.0', file=sys.stderr, flush=True)\n"
        "print('step: 2', flush=True)\n"
        "print('loss: 1.0', file=sys.stderr, flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    spec = read_metrics({"source": "output", "format": "kv_colon"})
    log = tmp_path / "log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT)  # the trial's log
    try:
        pipes = {"stdout": proc.stdout, "stderr": None}
        source = open_source(spec, pipes, tmp_path, {}, False, copy_to=fd)
        proc.wait(10)
        records = final_records(source)
    finally:
        os.close(fd)
    assert records == [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.0}]
    assert log.read_text() == "step: 1\nloss: 2.0\nstep: 2\nloss: 1.0\n"


def test_a_refused_step_fails_the_source_while_the_output_is_still_copied(tmp_path: Path) -> None:
    script = "for s in (3, 2, 1): print(f'step: {s} loss: 1.0', flush=True)\nprint('end')"
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    spec = read_metrics({"source": "stdout", "format": "kv_colon"})
    fd = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT)
    try:
        source = open_source(spec, {"stdout": proc.stdout}, tmp_path, {}, False, copy_to=fd)
        proc.wait(10)
        deadline = time.monotonic() + 10
        with pytest.raises(UnreliableStep, match="goes backwards, from 3 to 2"):
            while time.monotonic() < deadline:
                source.read_new()
                time.sleep(0.01)
        source.finish()
    finally:
        os.close(fd)
    assert (tmp_path / "log").read_text().endswith("end\n")


def test_bad_reader_settings_are_refused_naming_the_key() -> None:
    cases = {
        "trainer.metrics.step: 'epoch \\*'": {"format": "kv_colon", "step": "epoch *"},
        "trainer.metrics.step_every: expected a whole number": {
            "format": "kv_colon",
            "step_every": 0,
        },
        "trainer.metrics.step_every: give step or step_every": {
            "format": "kv_colon",
            "step": "a",
            "step_every": 2,
        },
        "trainer.metrics.unstepped: expected last or next": {
            "format": "kv_colon",
            "unstepped": "x",
        },
        "trainer.metrics.records: the key": {"format": "kv_colon", "records": "log_history"},
        "trainer.metrics.preset: unknown preset 'nope'": {"preset": "nope"},
        "trainer.metrics.source: the tensorboard format reads files": {"format": "tensorboard"},
    }
    for message, block in cases.items():
        with pytest.raises(UsageError, match=message):
            read_metrics({"source": "stdout", **block})


# ------------------------------------------------------------------ --sample-log


def command_trainer(metrics: dict | None) -> object:
    from stepscale.sweeps.trainers.spec import read_trainer

    value = {"command": [sys.executable, "-c", "pass"], "config": {"steps_per_epoch": 100}}
    if metrics is not None:
        value["metrics"] = metrics
    return read_trainer(value)


def test_sample_log_shows_the_same_verdict_as_a_trial(tmp_path: Path) -> None:
    from stepscale.cli.sample_log import check_sample_log

    log = tmp_path / "train.log"
    log.write_bytes(b"batch=1 loss=2.0\nbatch=2 loss=1.8\nbatch=1 loss=1.5\n")
    trainer = command_trainer(
        {"source": "stdout", "format": "kv_equals", "names": {"batch": "step"}}
    )
    with pytest.raises(UsageError, match="goes backwards, from 2 to 1"):
        check_sample_log(trainer, str(log))


def test_sample_log_without_a_metrics_block_suggests_one(tmp_path: Path, capsys) -> None:
    from stepscale.cli.sample_log import check_sample_log

    log = tmp_path / "train.log"
    log.write_bytes(
        b"step 0: train loss 4.1740, val loss 4.1751\n"
        b"iter 0: loss 4.1723, time 312.08ms, mfu -100.00%\n"
        b"iter 10: loss 3.2116, time 21.90ms, mfu 0.01%\n"
        b"step 20: train loss 3.0112, val loss 3.0524\n"
    )
    assert check_sample_log(command_trainer(None), str(log)) == 0
    out, err = capsys.readouterr()
    assert "preset: nanogpt" in err and '"eval_loss":3.0524' in out
    log.write_bytes(b"Iter 10: Train loss 2.345, Learning Rate 1.000e-05\n")  # no usable step
    with pytest.raises(UsageError, match=r"no preset .* nor built-in format reads a usable step"):
        check_sample_log(command_trainer(None), str(log))


def test_the_eval_hint_says_a_mapped_eval_loss_gave_no_line(tmp_path: Path, capsys) -> None:
    from stepscale.cli.sample_log import check_sample_log

    log = tmp_path / "train.log"
    log.write_bytes(b"step 1 loss 2.0\nstep 2 loss 1.5\n")
    block = {
        "source": "stdout",
        "format": "regex",
        "pattern": [r"step (?P<step>\d+) loss (?P<loss>\S+)", r"val (?P<val>\S+)"],
        "names": {"val": "eval_loss"},
    }
    assert check_sample_log(command_trainer(block), str(log)) == 0
    assert "names an eval loss, but no line of this log gave it" in capsys.readouterr().err


def test_a_csv_rewritten_in_place_with_a_new_column_repeats_no_record(tmp_path: Path) -> None:
    from stepscale.sweeps.trainers.output_sources import FileSource

    path = tmp_path / "metrics.csv"
    spec = read_metrics({"source": "metrics.csv", "format": "csv"})
    source = FileSource(spec, path)
    path.write_text("epoch,step,train_loss\n0,9,3.9\n")
    assert source.read_new() == [{"step": 9, "epoch": 0.0, "train_loss": 3.9}]
    # Lightning's CSVLogger rewrites the whole file when a metric appears: the rows it held
    # again (with an empty cell), then the new ones — the val loss at the step already given
    # among them, which is new, not a repeat
    path.write_text("epoch,step,train_loss,val_loss\n0,9,3.9,\n0,9,,3.8\n0,19,3.2,\n")
    assert source.read_new() == [
        {"step": 9, "epoch": 0.0, "val_loss": 3.8},
        {"step": 19, "epoch": 0.0, "train_loss": 3.2},
    ]
    # cut short while it is rewritten, then written again: still nothing repeated
    path.write_text("")
    assert source.read_new() == []
    path.write_text("epoch,step,train_loss,val_loss\n0,9,3.9,\n0,9,,3.8\n0,19,3.2,\n0,19,,3.1\n")
    assert source.read_new() == [{"step": 19, "epoch": 0.0, "val_loss": 3.1}]
    # a run that starts again: what differs from the first row on is new
    path.write_text("epoch,step,train_loss\n0,9,4.0\n")
    assert source.read_new() == [{"step": 9, "epoch": 0.0, "train_loss": 4.0}]


def test_a_resumed_runs_csv_started_again_as_long_as_before_is_read_whole(
    tmp_path: Path,
) -> None:
    """A trial resumed from its checkpoint at step 10: the new job finds the killed run's
    file, then Lightning's CSVLogger starts it again with the same header and rows of later
    steps — as long as before or longer, so neither a new inode nor a shorter file says so
    (seen in CI: the eval at step 20 was never recorded)."""
    from stepscale.sweeps.trainers.output_sources import FileSource

    path = tmp_path / "metrics.csv"
    path.write_text("epoch,step,train_loss,val_loss\n0,9,3.8715,\n0,9,,3.7677\n")
    source = FileSource(read_metrics({"source": "metrics.csv", "format": "csv"}), path)
    assert source.read_new() == []  # the earlier run's rows: already recorded
    with open(path, "r+") as f:  # rewritten in place (the same inode), a little longer
        f.write("epoch,step,train_loss,val_loss\n0,19,3.4244,\n0,19,,3.1981\n")
    assert source.read_new() == [
        {"step": 19, "epoch": 0.0, "train_loss": 3.4244},
        {"step": 19, "epoch": 0.0, "val_loss": 3.1981},
    ]
    with open(path, "a") as f:
        f.write("0,29,3.1179,\n")
    assert source.read_new() == [{"step": 29, "epoch": 0.0, "train_loss": 3.1179}]


# ------------------------------------------------------------- inside a trial's job

RESETTING = """import sys, time
print("epoch 1", file=sys.stderr, flush=True)
for epoch in (1, 2):
    for batch in (1, 2, 3):
        print(f"batch={batch} loss={3 - epoch - batch / 10}", flush=True)
time.sleep(30)  # still running when the job refuses its steps: the job ends it
"""


def test_a_trial_whose_steps_go_backwards_fails_its_attempt(tmp_path: Path) -> None:
    from stepscale.sweeps.job.spec import TrialSpec
    from stepscale.sweeps.job.trial_job import run_trial
    from stepscale.sweeps.study.storage import StorageSpec
    from stepscale.sweeps.trainers.spec import read_trainer

    (tmp_path / "train.py").write_text(RESETTING)
    folder = tmp_path / "trial"
    folder.mkdir()
    metrics = {"source": "output", "format": "kv_equals", "names": {"batch": "step"}}
    trainer = read_trainer(
        {"command": ["{python}", "train.py"], "args": "none", "metrics": metrics}, [tmp_path]
    )
    spec = TrialSpec(
        trial="p/0", study_name="s/p", trial_id=0, number=0, trial_dir=str(folder), config={},
        storage=StorageSpec("journal", str(folder / "unused.journal")), trainer=trainer, seed=0,
        target_loss=None, pruner=None, horizon=20, attempt=1, settings={},
    )  # fmt: skip
    saved = dict(os.environ)
    start = time.monotonic()
    try:
        with pytest.raises(
            UnreliableStep, match=r"(?s)from 3 to 1.*line 4: batch=3.*line 5: batch=1"
        ):
            run_trial(spec)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert time.monotonic() - start < 25  # the script was ended, not waited for
    steps = [json.loads(x)["step"] for x in (folder / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps)) and set(steps) <= {1, 2, 3}  # nothing after the reset


def test_a_suggestion_for_event_files_says_when_presets_disagree_on_steps(capsys) -> None:
    from stepscale.cli.sample_log import check_sample_log

    folder = Path(__file__).parent / "logs" / "built" / "pytorch_tb"
    assert check_sample_log(command_trainer(None), str(folder)) == 0
    err = capsys.readouterr().err
    assert "preset: hf_trainer" in err and "Check the steps: preset lightning" in err

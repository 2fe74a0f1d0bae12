"""An existing script, unmodified (docs/trainers.md): its metrics read from realistic logs in
every built-in line format and a regex (progress bars, warnings, ``nan``, a step printed on
another line than its loss), its settings passed in its own argument style with floats kept
floats, the placeholders of its command, and the trainer settings refused before anything
runs. Pure functions: the fast tier."""

from __future__ import annotations

import math
import signal
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from stepscale.errors import UsageError
from stepscale.sweeps.job.command import command_line
from stepscale.sweeps.trainers.arg_styles import STYLES, ArgsSpec, fill, read_args
from stepscale.sweeps.trainers.line_formats import FORMATS, read_metrics
from stepscale.sweeps.trainers.output_sources import FileSource, _split_utf8
from stepscale.sweeps.trainers.record_stream import RecordStream, parse_text
from stepscale.sweeps.trainers.spec import read_trainer

BAR = "\r  3%|▎         | 3/100 [00:00<00:05, 17.9it/s, loss=9.99]"


def parse(metrics: dict, text: str) -> list[dict]:
    return parse_text(read_metrics(metrics), text)[0]


def nan_at(records: list[dict], step: int, key: str) -> bool:
    return any(r["step"] == step and math.isnan(r.get(key, 0.0)) for r in records)


# ------------------------------------------------------------------------ line formats

GPT_LOG = (
    "number of parameters: 0.01M\n"
    "/usr/lib/python3/site-packages/torch/nn/modules/module.py:1511: UserWarning: "
    "step 7: something is deprecated\n"  # a warning with a number in it: not the format
    "step 0: train loss 4.1740, val loss 4.1751\n"
    "iter 0: loss 4.1723, time 312.08ms, mfu -100.00%\n" + BAR * 3 + "\n"
    "iter 10: loss 3.2116, time 21.90ms, mfu 0.01%\n"
    "step 10: train loss 3.0112, val loss 3.0524\n"
    "saving checkpoint to out\n"
    "step 20: train loss nan, val loss nan\n"
)


def test_a_regex_reads_a_gpt_scripts_log_and_maps_val_loss_to_the_eval_loss() -> None:
    metrics = {
        "source": "stdout",
        "format": "regex",
        "pattern": r"^step (?P<step>\d+): train loss (?P<train_loss>\S+), val loss (?P<val_loss>\S+)",
        "names": {"val_loss": "eval_loss"},
    }
    records = parse(metrics, GPT_LOG)
    assert [r["step"] for r in records] == [0, 10, 20]
    assert records[0] == {"step": 0, "train_loss": 4.1740, "eval_loss": 4.1751}
    assert records[1]["eval_loss"] == 3.0524
    assert nan_at(records, 20, "eval_loss") and nan_at(records, 20, "train_loss")


def test_several_patterns_and_a_step_on_its_own_line() -> None:
    metrics = {
        "source": "stdout",
        "format": "regex",
        "pattern": [r"=== iteration (?P<step>\d+) ===", r"eval loss (?P<eval_loss>[-+.\deEnaif]+)"],
    }
    log = "eval loss 9.0\n=== iteration 5 ===\nWARNING: slow\neval loss 2.5\n" + BAR + "\n"
    # before any step: step 0 on a run from scratch, not recorded on a resumed run
    assert parse(metrics, log) == [{"step": 0, "eval_loss": 9.0}, {"step": 5, "eval_loss": 2.5}]
    records, stream = parse_text(read_metrics(metrics), log, resumed=True)
    assert records == [{"step": 5, "eval_loss": 2.5}] and stream.unplaced == 1


def test_key_colon_pairs_a_step_on_another_line_than_its_losses() -> None:
    log = (
        "Epoch 1/3\n"
        "step: 100\n"
        "  loss: 2.3100\n"
        "WARNING:tensorflow: 5 out of the last 5 calls triggered tf.function retracing\n"
        "  val_loss: 2.4000  acc: 0.31\n"
        + BAR
        + "\r100%|██████████| 100/100 [00:05<00:00, 18.1it/s]\n"
        "step: 200 loss: 1.9 val_loss: inf\n"
        "12:30:45 step: 300\n"
        "val_loss: NaN\n"
    )
    records = parse(
        {"source": "stdout", "format": "kv_colon", "names": {"val_loss": "eval_loss"}}, log
    )
    assert records[:3] == [
        {"step": 100, "loss": 2.31},
        {"step": 100, "eval_loss": 2.4, "acc": 0.31},
        {"step": 200, "loss": 1.9, "eval_loss": math.inf},
    ]
    assert nan_at(records, 300, "eval_loss") and len(records) == 4


def test_key_equals_pairs_and_a_progress_bars_redraws_are_never_read() -> None:
    log = (
        "2024-05-01 10:00:00 INFO step=0 eval_loss=3.5\n"
        "UserWarning: lr=0.1 is large\n"  # belongs to step 0: a metric `lr`
        + BAR * 4
        + "\rstep=50 train_loss=2.0 eval_loss=2.25\n"  # printed over a bar: the line kept
        + BAR
        + "\n"  # the bar's final state, loss=9.99 in its postfix, is what the terminal keeps
        "step=60 eval_loss=-nan\r\n"
    )
    records = parse({"source": "stdout", "format": "kv_equals"}, log)
    assert records[0] == {"step": 0, "eval_loss": 3.5}
    assert records[1] == {"step": 0, "lr": 0.1}
    assert records[2] == {"step": 50, "train_loss": 2.0, "eval_loss": 2.25}
    assert records[3] == {"step": 50, "loss": 9.99}
    assert nan_at(records, 60, "eval_loss") and len(records) == 5


def test_json_lines_among_other_output() -> None:
    log = (
        "Loading data...\n"
        '{"step": 0, "eval_loss": 4.0, "phase": "eval"}\n'
        "[rank0]: {not json}\n"
        '{"iteration": 10, "loss": 3.1}\n'
        '[INFO] {"iteration": 20, "loss": 2.0, "val": null, "ok": true}\n' + BAR + "\n"
        '{"iteration": 30, "val": NaN}\n'
        "{'acc': 0.75}\n"  # no step: it belongs to step 30; a Python dict reads too
    )
    names = {"iteration": "step", "val": "eval_loss"}
    records = parse({"source": "stderr", "format": "json", "names": names}, log)
    assert records[0] == {"step": 0, "eval_loss": 4.0}
    assert records[1] == {"step": 10, "loss": 3.1}
    assert records[2]["step"] == 20 and records[2]["loss"] == 2.0 and "ok" not in records[2]
    assert nan_at(records, 20, "eval_loss") and nan_at(records, 30, "eval_loss")
    assert records[-1] == {"step": 30, "acc": 0.75} and len(records) == 5


def test_csv_with_a_header_row_empty_cells_and_a_repeated_header() -> None:
    log = (
        "/tmp/x.py:3: FutureWarning: something, with, commas\n"
        "epoch,step,train_loss,val_loss\n"
        "0,0,,4.2\n"
        "0,10,3.0,\n"
        "0,20,2.5,\n" + BAR + "\n"
        "0,,,2.6\n"  # the validation row of step 20, without its step
        "epoch,step,train_loss,val_loss\n"  # a resumed logger writes its header again
        "1,30,nan,nan\n"
        "garbage,row\n"
    )
    records = parse(
        {"source": "metrics.csv", "format": "csv", "names": {"val_loss": "eval_loss"}}, log
    )
    assert records[:4] == [
        {"step": 0, "epoch": 0.0, "eval_loss": 4.2},
        {"step": 10, "epoch": 0.0, "train_loss": 3.0},
        {"step": 20, "epoch": 0.0, "train_loss": 2.5},
        {"step": 20, "epoch": 0.0, "eval_loss": 2.6},
    ]
    assert nan_at(records, 30, "eval_loss") and len(records) == 5


def test_text_arrives_in_pieces_and_the_last_line_needs_no_newline(tmp_path: Path) -> None:
    stream = RecordStream(read_metrics({"source": "stdout", "format": "kv_equals"}))
    assert stream.feed("step=1 eval_lo") == []
    assert stream.feed("ss=2.0\nstep=2 eval") == [{"step": 1, "eval_loss": 2.0}]
    assert stream.close() == []  # "step=2 eval": a step alone
    assert stream.step == 2 and stream.records == 1
    assert "eval" in stream.last_lines[-1]
    # a file the script writes, followed as it grows; a character cut in two waits
    path = tmp_path / "log.txt"
    follow = FileSource(read_metrics({"source": "log.txt", "format": "kv_equals"}), path)
    assert follow.read_new() == []
    path.write_bytes("step=3 eval_loss=1.5 note=é\n".encode()[:-2])
    assert follow.read_new() == [] and follow.offset == len(b"step=3 eval_loss=1.5 note=")
    with open(path, "ab") as f:
        f.write("é\n".encode()[1:])
    assert follow.read_new() == [{"step": 3, "eval_loss": 1.5}]
    assert _split_utf8("aé".encode()) == ("aé".encode(), b"")


def test_formats_are_registered_plug_ins() -> None:
    assert set(FORMATS) == {"kv_colon", "kv_equals", "kv_pipes", "json", "csv", "regex"}
    assert set(STYLES) == {
        "key=value",
        "--key=value",
        "--key value",
        "-key value",
        "-key=value",
        "none",
    }


# ------------------------------------------------------------------------ arguments


def spec(
    settings: dict, trainer: dict, tmp_path: Path, config: dict | None = None
) -> SimpleNamespace:
    script = tmp_path / "train.py"
    script.write_text("")
    t = read_trainer({"command": ["{python}", "train.py"], **trainer}, [tmp_path])
    return SimpleNamespace(
        trainer=t,
        settings=settings,
        config=config or {},
        trial_dir=str(tmp_path / "trial"),
        seed=3,
        horizon=200,
    )


def test_settings_reach_a_script_in_its_own_style_with_floats_as_floats(tmp_path: Path) -> None:
    settings = {"optim.lr": 1.0, "batch_size": 32, "compile": False, "name": "a b", "decay": 1e-05}
    args = {"style": "--key=value", "names": {"optim.lr": "learning_rate"}}
    argv = command_line(spec(settings, {"args": args}, tmp_path))
    assert argv[2:] == [
        "--learning_rate=1.0",
        "--batch_size=32",
        "--compile=False",
        "--name=a b",
        "--decay=1e-05",
    ]
    argv = command_line(
        spec(
            {"lr": 2.0, "flag": True},
            {"args": {"style": "--key value", "booleans": "lower"}},
            tmp_path,
        )
    )
    assert argv[2:] == ["--lr", "2.0", "--flag", "true"]
    argv = command_line(spec({"optim.lr": 1.0, "flag": True}, {}, tmp_path))
    assert argv[2:] == ["optim.lr=1.0", "flag=true"]  # Hydra's style, as before
    assert command_line(spec({"lr": 1.0}, {"args": "none"}, tmp_path))[2:] == []
    assert command_line(spec({"lr": 1.0}, {"overrides": False}, tmp_path))[2:] == []


def test_placeholders_in_the_command_resume_args_and_string_values(tmp_path: Path) -> None:
    trainer = {
        "command": [
            "{python}",
            "train.py",
            "--out_dir={trial_dir}/out",
            "--max_iters={max_steps}",
            "--lr={optim.lr}",
            "{{x}}",
        ],
        "args": "--key=value",
        "config": {"optim": {"lr": 0.5}, "tag": "x"},
        "resume_args": ["--init_from=resume", "--seed={seed}"],
    }
    s = spec({"tag": "run-{seed}"}, trainer, tmp_path, config={"optim": {"lr": 2.0}, "tag": "x"})
    argv = command_line(s, resuming=True)
    trial = tmp_path / "trial"
    assert argv == [
        sys.executable,
        str(tmp_path / "train.py"),
        f"--out_dir={trial}/out",
        "--max_iters=200",
        "--lr=2.0",
        "{x}",
        "--tag=run-3",
        "--init_from=resume",
        "--seed=3",
    ]
    assert "--init_from=resume" not in command_line(s, resuming=False)
    assert fill("{a}", {"a": 2.0}) == "2.0"


# ------------------------------------------------------------------------ bad settings


def test_bad_trainer_settings_are_refused_naming_the_key(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    base = {"command": ["{python}", "train.py"]}
    regex = {"source": "stdout", "format": "regex"}
    cases = {
        r"trainer\.metrics\.pattern: .* does not compile": {
            "metrics": {**regex, "pattern": "step (?P<step>\\d+"}
        },
        r"trainer\.metrics\.pattern: .* no named group 'step'": {
            "metrics": {**regex, "pattern": "loss (?P<eval_loss>\\S+)"}
        },
        r"trainer\.metrics\.pattern: no pattern gives the eval loss": {
            "metrics": {**regex, "pattern": "(?P<step>\\d+) (?P<loss>\\S+)"}
        },
        r"trainer\.metrics\.format: unknown format 'yaml'": {
            "metrics": {"source": "stdout", "format": "yaml"}
        },
        r"trainer\.metrics\.format: say how": {"metrics": {"source": "stdout"}},
        r"trainer\.args\.style: unknown argument style '-k v'": {"args": {"style": "-k v"}},
        r"trainer\.args\.booleans": {"args": {"style": "--key=value", "booleans": "yes"}},
        r"trainer\.cwd: 'nowhere' .* does not exist": {"cwd": "nowhere"},
        r"trainer\.stop_signal: unknown signal 'SIGFOO'": {"stop_signal": "SIGFOO"},
        r"trainer\.command: unknown placeholder \{nosuch\}": {
            "command": ["{python}", "train.py", "--x={nosuch}"],
            "config": {"a": 1},
        },
        r"trainer: metrics belong to a command trainer": {
            "command": None,
            "target": "a:b",
            "metrics": "stdout",
        },
    }
    for message, extra in cases.items():
        with pytest.raises(UsageError, match=message):
            read_trainer({**base, **extra}, [tmp_path])
    ok = read_trainer(
        {
            **base,
            "cwd": ".",
            "stop_signal": "INT",
            "metrics": {
                **regex,
                "pattern": "(?P<step>\\d+) (?P<val>\\S+)",
                "names": {"val": "eval_loss"},
            },
        },
        [tmp_path],
    )
    assert ok.cwd == str(tmp_path) and ok.stop_signal == signal.SIGINT
    assert read_args(None, None) == ArgsSpec()


def test_a_file_source_starts_where_the_file_ended_and_keeps_its_csv_header(tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    path.write_text("step,val_loss\n0,4.0\n10,3.0\n")  # an earlier attempt's lines
    spec = read_metrics({"source": "log.csv", "format": "csv", "names": {"val_loss": "eval_loss"}})
    follow = FileSource(spec, path)
    assert follow.read_new() == [] and follow.stream.records == 0
    with open(path, "a") as f:
        f.write("20,2.0\n")  # appended: the header read before still names the columns
    assert follow.read_new() == [{"step": 20, "eval_loss": 2.0}]
    path.write_text("step,val_loss\n0,4.5\n")  # rewritten by a run that starts again
    assert follow.read_new() == [{"step": 0, "eval_loss": 4.5}]

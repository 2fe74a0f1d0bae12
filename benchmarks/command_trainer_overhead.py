"""What does running a command trainer as a trial cost, per trial, over running it by hand,
and what does reading its metrics from its own printed lines cost beside the JSON path?

Three paths, each measured the same way: ``jsonl`` (the trainer appends stepscale's records
to metrics.jsonl through `stepscale.client`), ``stdout`` (an unmodified script prints
``step N: eval loss X t T`` lines among progress lines; the job reads its stdout through a
pipe with a ``trainer.metrics`` regex and writes metrics.jsonl itself) and ``tensorboard``
(the script writes TensorBoard event files with tensorboard's own writer; the job follows
them with ``preset: tensorboard``). Beside them, reading TensorBoard files against parsing
stdout, per record, in-process (``tensorboard_reading``: at most 2x). Beside them, the
line formats' own speed: lines parsed per second by each registered format on a realistic
log (one line in ten a metric line, the rest progress bars and warnings).

For the jsonl path: a tiny Python command trainer (stdlib + `stepscale.client`; it records `time.time()` on its
first line, before any import, then trains 20 trivial steps with no sleeps and reports an
eval loss and the time every 5 steps) runs

1. as ~12 trials of one study (`sweep run`, local launcher, parallelism 1: per trial a
   submitit job that starts the program and follows its metrics.jsonl; the orchestrator
   tells Optuna the result), and
2. by hand, ``python trainer.py`` in a plain folder without the STEPSCALE_* environment,
   half of the runs before the study and half after it (so both see the same load).

Per trial, from the files the study leaves (events.jsonl, metrics.jsonl, the submitit
pickles' and status.json's mtimes, the Optuna journal), the phases between

    asked     Optuna trial's datetime_start (the orchestrator asked the sampler)
    job       the job's "start" event, written just before it launches the program
    program   the program's own first line (its time.time())
    first / last report   the `t` of its first / last record
    told      Optuna trial's datetime_complete (the orchestrator told the result)

and the orchestration overhead: (told - asked) - (last report - program) - the program's
own start-up (by hand: a run's wall time minus its program→last-report span, i.e. the
interpreter's start before the first line and its exit after the last report).

The acceptance figure, ``overhead_above_startup_s``, is the median (told - asked) minus the
median wall time of a run by hand (goal: at most 1.5 s). For reference it also times a bare
``python -c pass``, ``import submitit`` and ``import stepscale.sweeps.job.trial_job`` (what a trial's
job process imports before it can start the program). Ends with one JSON line.

    python benchmarks/command_trainer_overhead.py [--points 6] [--trials-per-point 2]
        [--by-hand 10] [--poll-s S] [--paths jsonl,stdout,tensorboard] [--parse-lines 200000]
        # S: the study's launcher.poll_s (default: its own)
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from stepscale.sweeps.study.schema import LauncherConfig

STEPS = 20
REPORT_EVERY = 5
NOISE = 20  # progress lines a step of the printing trainer prints

TRAINER = f"""import time; T0 = time.time()  # first line: when this program began to run
from stepscale import client

train = client.config().get("train", {{}})
steps = client.max_steps(default={STEPS})
lr = float(train.get("lr", 0.1))
client.begin(0)
w, first = 0.0, {{"t0": T0}}
for step in range(1, steps + 1):
    w -= lr * 2.0 * (w - 1.0)  # the "training": gradient descent on (w - 1)^2
    if step % {REPORT_EVERY} == 0 or step == steps:
        loss = (w - 1.0) ** 2 + 0.01
        if not client.report(step, eval_loss=loss, t=time.time(), **first):
            break
        first = {{}}
"""

# The same training printed as an unmodified script would: its settings from config.json
# (no stepscale import), a progress line every step, a metric line every REPORT_EVERY steps.
PRINTER = f"""import time; T0 = time.time()  # first line: when this program began to run
import json, os, sys

train = json.load(open(os.environ["STEPSCALE_CONFIG"])).get("train", {{}}) if "STEPSCALE_CONFIG" in os.environ else {{}}
steps = int(train.get("steps", {STEPS}))
lr = float(train.get("lr", 0.1))
w, first = 0.0, " t0 %r" % T0
print("UserWarning: nothing to see", file=sys.stderr)
for step in range(1, steps + 1):
    w -= lr * 2.0 * (w - 1.0)
    for k in range({NOISE}):
        print(f"\\r{{step}}/{{steps}} [{{k}}] it/s", end="")
    if step % {REPORT_EVERY} == 0 or step == steps:
        loss = (w - 1.0) ** 2 + 0.01
        print(f"\\nstep {{step}}: eval loss {{loss!r}} t {{time.time()!r}}{{first}}", flush=True)
        first = ""
"""
PATTERN = r"step (?P<step>\d+): eval loss (?P<eval_loss>\S+) t (?P<t>\S+)(?: t0 (?P<t0>\S+))?"
# The same training writing TensorBoard event files (tensorboard's own writer, no TF), as a
# framework that logs to TensorBoard does; the times are doubles (a float32 loses seconds).
TB_WRITER = f"""import time; T0 = time.time()  # first line: when this program began to run
import json, os
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

train = json.load(open(os.environ["STEPSCALE_CONFIG"])).get("train", {{}}) if "STEPSCALE_CONFIG" in os.environ else {{}}
steps = int(train.get("steps", {STEPS}))
lr = float(train.get("lr", 0.1))
writer = EventFileWriter("tb")
def scalar(tag, value):
    t = tensor_pb2.TensorProto(dtype=types_pb2.DT_DOUBLE, double_val=[value])
    return summary_pb2.Summary.Value(tag=tag, tensor=t)
w, first = 0.0, [scalar("t0", T0)]
for step in range(1, steps + 1):
    w -= lr * 2.0 * (w - 1.0)
    if step % {REPORT_EVERY} == 0 or step == steps:
        loss = (w - 1.0) ** 2 + 0.01
        values = [scalar("eval/loss", loss), scalar("t", time.time()), *first]
        writer.add_event(event_pb2.Event(step=step, wall_time=time.time(), summary=summary_pb2.Summary(value=values)))
        writer.flush()
        first = []
writer.close()
"""
TB_METRICS = """  metrics:
    preset: tensorboard
    names: {eval/loss: eval_loss}
  args: none
"""
METRICS = f"""  metrics:
    source: stdout
    format: regex
    pattern: '{PATTERN}'
  args: none
"""

STUDY = """# @package _global_
# Benchmark: a trivial command trainer, {n} trials; only the per-trial overhead matters.
trainer:
  command: ["{{python}}", {script}]
  config:
    train: {{steps: {steps}, lr: 0.1, width: 1, seed: 0}}
  keys:
    max_steps: train.steps
    seed: train.seed
{metrics}scientific:
  width:
    path: train.width
    values: {values}
nuisance:
  lr:
    path: train.lr
    type: float
    low: 1.0e-3
    high: 0.5
    scale: log
budget:
  trials_per_point: {per_point}
  max_steps: {steps}
objective:
  kind: final_eval_loss
parallelism: 1
"""


def clean_env() -> dict[str, str]:
    """This environment without stepscale's trial variables."""
    return {k: v for k, v in os.environ.items() if not k.startswith("STEPSCALE_")}


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    """Wall seconds of a command (which must succeed)."""
    start = time.perf_counter()
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{cmd[:4]} failed:\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}")
    return time.perf_counter() - start


def records(path: Path) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def printed_records(text: str) -> list[dict[str, Any]]:
    """The records of the printing trainer's output, read as a trial's job reads them."""
    from stepscale.sweeps.trainers.line_formats import read_metrics
    from stepscale.sweeps.trainers.record_stream import parse_text

    spec = read_metrics({"source": "stdout", "format": "regex", "pattern": PATTERN})
    return parse_text(spec, text)[0]


def tensorboard_records(folder: Path) -> list[dict[str, Any]]:
    """The records of the event files under ``folder``, read as a trial's job reads them."""
    from stepscale.sweeps.trainers.line_formats import read_metrics
    from stepscale.sweeps.trainers.record_stream import RecordStream
    from stepscale.sweeps.trainers.structured_sources import TensorBoardSource

    spec = read_metrics({"preset": "tensorboard", "names": {"eval/loss": "eval_loss"}})
    source = TensorBoardSource(spec, folder, RecordStream(spec))
    source.files = {}  # every file is this run's
    return source.final()


def by_hand(script: Path, folder: Path, env: dict[str, str]) -> dict[str, float]:
    """One run of the trainer by hand: its wall time and its own spans."""
    start = time.time()
    res = subprocess.run(
        [sys.executable, str(script)], cwd=folder, env=env, capture_output=True, text=True
    )
    wall = time.time() - start
    if res.returncode != 0:
        raise SystemExit(f"{script} failed:\n{res.stderr[-3000:]}")
    if script.name == "printer.py":
        recs = printed_records(res.stdout)
    elif script.name == "tb_writer.py":
        recs = tensorboard_records(folder / "tb")
        shutil.rmtree(folder / "tb")
    else:
        recs = records(folder / "metrics.jsonl")
    t0 = recs[0]["t0"]
    return {
        "wall": wall,
        "interpreter_start": t0 - start,  # process start to the program's first line
        "program_to_first": recs[0]["t"] - t0,
        "program_to_last": recs[-1]["t"] - t0,
    }


def trial_phases(run_dir: Path) -> list[dict[str, float]]:
    """Per finished trial: timestamps (epoch s) read from the run dir and the journal."""
    import optuna
    from optuna.trial import TrialState

    from stepscale.rundir import trial_dir

    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(run_dir / "study.journal"))
    )
    rows = []
    for study in storage.get_all_studies():
        label = study.user_attrs["point"]
        for trial in storage.get_all_trials(study._study_id, deepcopy=False):
            if trial.state != TrialState.COMPLETE:
                raise SystemExit(f"trial {label}/{trial.number} ended {trial.state.name}")
            folder = trial_dir(run_dir, label, trial.number)
            events = [
                json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()
            ]
            recs = records(folder / "metrics.jsonl")  # the job's, for either path
            logs = folder / "logs"
            rows.append(
                {
                    "asked": trial.datetime_start.timestamp(),
                    # submitit's pickles: a process per trial only (warm workers have none)
                    "submitted": _mtime(logs, "*_submitted.pkl"),
                    "job": next(e["time"] for e in events if e["event"] == "start"),
                    "program": recs[0]["t0"],
                    "first": recs[0]["t"],
                    "last": recs[-1]["t"],
                    "status": (folder / "status.json").stat().st_mtime,
                    "result": _mtime(logs, "*_result.pkl"),
                    "told": trial.datetime_complete.timestamp(),
                }
            )
    return sorted(rows, key=lambda r: r["asked"])


def _mtime(folder: Path, pattern: str) -> float | None:
    """The modification time of the file ``pattern`` names in ``folder``, if there is one."""
    found = next(folder.glob(pattern), None)
    return found.stat().st_mtime if found is not None else None


def summary(values: list[float]) -> dict[str, float]:
    """Median and max, in seconds (rounded to ms)."""
    return {"median": round(statistics.median(values), 3), "max": round(max(values), 3)}


def measure(path: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run the study of one path (jsonl or stdout) and the runs by hand; its figures."""
    sweep = str(Path(sys.executable).with_name("sweep"))
    env = clean_env()
    n_trials = args.points * args.trials_per_point
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp).resolve()
        name, text, metrics = {
            "stdout": ("printer.py", PRINTER, METRICS),
            "tensorboard": ("tb_writer.py", TB_WRITER, TB_METRICS),
        }.get(path, ("trainer.py", TRAINER, ""))
        script = root / name
        script.write_text(text)
        (root / "conf").mkdir()
        (root / "conf" / "bench_cmd.yaml").write_text(
            STUDY.format(
                n=n_trials,
                script=json.dumps(str(script)),
                steps=STEPS,
                values=list(range(1, args.points + 1)),
                per_point=args.trials_per_point,
                metrics=metrics,
            )
        )
        hand_dir = root / "by_hand"
        hand_dir.mkdir()
        refs: dict[str, list[float]] = {"python": [], "submitit": [], "job": []}
        ref_cmds = {
            "python": [sys.executable, "-c", "pass"],
            "submitit": [sys.executable, "-c", "import submitit"],
            "job": [sys.executable, "-c", "import stepscale.sweeps.job.trial_job"],
        }

        def hand_and_refs(runs: int, ref_runs: int) -> list[dict[str, float]]:
            for _ in range(ref_runs):
                for key, cmd in ref_cmds.items():
                    refs[key].append(timed(cmd, root, env))
            return [by_hand(script, hand_dir, env) for _ in range(runs)]

        by_hand(script, hand_dir, env)  # warm the file cache (and .pyc) once, untimed
        hand = hand_and_refs(args.by_hand // 2, args.reference_runs // 2)
        cmd = [sweep, "run", "conf=bench_cmd", "--config-dir", str(root)]
        cmd.append(f"run_dir={root / 'run'}")
        if args.poll_s is not None:
            cmd.append(f"launcher.poll_s={args.poll_s}")
        sweep_start = time.time()
        sweep_wall = timed(cmd, root, env)
        sweep_end = sweep_start + sweep_wall
        print(f"sweep run ({path}): {n_trials} trials in {sweep_wall:.2f} s", file=sys.stderr)
        hand += hand_and_refs(
            args.by_hand - args.by_hand // 2, args.reference_runs - args.reference_runs // 2
        )
        rows = trial_phases(root / "run")

    hand_wall = statistics.median(h["wall"] for h in hand)
    # The program's own start-up outside the measured program→last-report span.
    own_startup = statistics.median(h["wall"] - h["program_to_last"] for h in hand)
    spans = {
        "asked_to_job_start": [r["job"] - r["asked"] for r in rows],
        "asked_to_submitted": [r["submitted"] - r["asked"] for r in rows if r["submitted"]],
        "submitted_to_job_start": [r["job"] - r["submitted"] for r in rows if r["submitted"]],
        "job_start_to_program_start": [r["program"] - r["job"] for r in rows],
        "program_start_to_first_report": [r["first"] - r["program"] for r in rows],
        "program_start_to_last_report": [r["last"] - r["program"] for r in rows],
        "last_report_to_told": [r["told"] - r["last"] for r in rows],
        "last_report_to_status_written": [r["status"] - r["last"] for r in rows],
        "status_written_to_result_pickled": [
            r["result"] - r["status"] for r in rows if r["result"]
        ],
        "result_pickled_to_told": [r["told"] - r["result"] for r in rows if r["result"]],
        "asked_to_told": [r["told"] - r["asked"] for r in rows],
        "told_to_next_asked": [b["asked"] - a["told"] for a, b in itertools.pairwise(rows)],
        "orchestration_overhead": [
            (r["told"] - r["asked"]) - (r["last"] - r["program"]) - own_startup for r in rows
        ],
    }
    asked_to_told = statistics.median(spans["asked_to_told"])
    above = asked_to_told - hand_wall
    return {
        "path": path,
        "n_trials": len(rows),
        "steps_per_trial": STEPS,
        "poll_s": args.poll_s if args.poll_s is not None else LauncherConfig().poll_s,
        "per_trial_s": {k: summary(v) for k, v in spans.items() if v},
        "by_hand_s": {
            "runs": len(hand),
            "wall": summary([h["wall"] for h in hand]),
            "interpreter_start": summary([h["interpreter_start"] for h in hand]),
            "program_start_to_first_report": summary([h["program_to_first"] for h in hand]),
            "program_start_to_last_report": summary([h["program_to_last"] for h in hand]),
            "own_startup": round(own_startup, 3),
        },
        "reference_s": {f"{k}_median": round(statistics.median(v), 3) for k, v in refs.items()},
        "sweep_wall_s": round(sweep_wall, 2),
        "sweep_wall_per_trial_s": round(sweep_wall / len(rows), 3),
        "sweep_start_to_first_ask_s": round(rows[0]["asked"] - sweep_start, 3),
        "last_told_to_sweep_end_s": round(sweep_end - rows[-1]["told"], 3),
        "asked_to_told_median_s": round(asked_to_told, 3),
        "by_hand_wall_median_s": round(hand_wall, 3),
        "overhead_above_startup_s": round(above, 3),
        "goal_s": 1.5,
        "meets_goal": bool(above <= 1.5),
    }


def realistic_log(n_lines: int) -> dict[str, str]:
    """A log of ``n_lines`` per format: one line in ten a metric line, the rest progress
    bars (redrawn with carriage returns) and warnings."""
    noise = ["\r 45%|████▌     | 45/100 [00:01<00:02, 30.1it/s]" * 3, "UserWarning: x is slow"]
    metric = {
        "kv_colon": "step: {s}  loss: 2.{s}  val_loss: 2.5",
        "kv_equals": "step={s} loss=2.{s} val_loss=2.5",
        "json": '{{"step": {s}, "loss": 2.{s}, "val_loss": 2.5}}',
        "csv": "{s},2.{s},2.5",
        "regex": "step {s}: train loss 2.{s}, val loss 2.5",
    }
    logs = {}
    for name, line in metric.items():
        rows = ["step,loss,val_loss"] if name == "csv" else []
        for i in range(n_lines - len(rows)):
            rows.append(line.format(s=i) if i % 10 == 0 else noise[i % 2])
        logs[name] = "\n".join(rows) + "\n"
    return logs


def parse_speed(n_lines: int) -> dict[str, dict[str, float]]:
    """Lines per second each registered format reads (in-process, best of 3)."""
    from stepscale.sweeps.trainers.line_formats import read_metrics
    from stepscale.sweeps.trainers.record_stream import RecordStream

    pattern = r"step (?P<step>\d+): train loss (?P<loss>\S+), val loss (?P<val_loss>\S+)"
    out = {}
    for name, text in realistic_log(n_lines).items():
        spec = {"source": "stdout", "format": name, "names": {"val_loss": "eval_loss"}}
        if name == "regex":
            spec["pattern"] = pattern
        best = math.inf
        for _ in range(3):
            stream = RecordStream(read_metrics(spec))
            start = time.perf_counter()
            records = stream.feed(text)
            best = min(best, time.perf_counter() - start)
        assert len(records) == n_lines // 10, (name, len(records))
        out[name] = {"lines_per_s": round(n_lines / best), "records": len(records)}
    return out


def tensorboard_speed(n_records: int) -> dict[str, float]:
    """Seconds per record of reading TensorBoard event files (the job's own reader) against
    parsing the same records printed among progress lines on stdout (nine noise lines a
    record, as `realistic_log`): the acceptance asks for at most 2x."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    from stepscale.sweeps.trainers.line_formats import read_metrics
    from stepscale.sweeps.trainers.record_stream import RecordStream
    from stepscale.sweeps.trainers.structured_sources import TensorBoardSource

    with tempfile.TemporaryDirectory() as tmp:
        writer = EventFileWriter(tmp)
        for step in range(n_records):
            values = [
                summary_pb2.Summary.Value(tag="train/loss", simple_value=2.0 + step * 1e-6),
                summary_pb2.Summary.Value(tag="eval/loss", simple_value=2.5),
            ]
            writer.add_event(event_pb2.Event(step=step, summary=summary_pb2.Summary(value=values)))
        writer.close()
        spec = read_metrics({"preset": "hf_trainer"})
        best_tb = math.inf
        for _ in range(3):
            source = TensorBoardSource(spec, Path(tmp), RecordStream(spec))
            source.files = {}
            start = time.perf_counter()
            got = source.final()
            best_tb = min(best_tb, time.perf_counter() - start)
        assert len(got) == n_records, len(got)
    text = realistic_log(n_records * 10)["kv_colon"]
    stdout_spec = read_metrics({"source": "stdout", "format": "kv_colon"})
    best_text = math.inf
    for _ in range(3):
        stream = RecordStream(stdout_spec)
        start = time.perf_counter()
        assert len(stream.feed(text)) == n_records
        best_text = min(best_text, time.perf_counter() - start)
    return {
        "records": n_records,
        "tensorboard_us_per_record": round(best_tb / n_records * 1e6, 2),
        "stdout_us_per_record": round(best_text / n_records * 1e6, 2),
        "tensorboard_over_stdout": round(best_tb / best_text, 2),
        "meets_2x": bool(best_tb <= 2 * best_text),
    }


def main() -> None:
    """Measure each path and the formats' speed; print the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=int, default=6, help="values of the scientific axis")
    parser.add_argument("--trials-per-point", type=int, default=2)
    parser.add_argument("--by-hand", type=int, default=10, help="runs of the trainer by hand")
    parser.add_argument("--reference-runs", type=int, default=5, help="of each import timing")
    parser.add_argument("--poll-s", type=float, default=None, help="launcher.poll_s override")
    parser.add_argument(
        "--paths", default="jsonl,stdout,tensorboard", help="which paths to measure"
    )
    parser.add_argument("--parse-lines", type=int, default=200_000, help="log lines per format")
    args = parser.parse_args()
    paths = {p: measure(p, args) for p in args.paths.split(",")}
    result: dict[str, Any] = {"paths": paths, "parse": parse_speed(args.parse_lines)}
    result["tensorboard_reading"] = tensorboard_speed(max(1000, args.parse_lines // 10))
    if {"tensorboard", "stdout"} <= set(paths):
        result["tensorboard_minus_stdout_overhead_s"] = round(
            paths["tensorboard"]["overhead_above_startup_s"]
            - paths["stdout"]["overhead_above_startup_s"],
            3,
        )
    if {"jsonl", "stdout"} <= set(paths):
        result["stdout_minus_jsonl_asked_to_told_s"] = round(
            paths["stdout"]["asked_to_told_median_s"] - paths["jsonl"]["asked_to_told_median_s"], 3
        )
        result["stdout_minus_jsonl_overhead_s"] = round(
            paths["stdout"]["overhead_above_startup_s"]
            - paths["jsonl"]["overhead_above_startup_s"],
            3,
        )
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()

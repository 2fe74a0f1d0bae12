"""Trial paths any parser can take (docs/run-dir.md, "aliases/"): ``{trial_dir}`` gives
``RUN_DIR/aliases/<point alias>/<n>``, a path without ``=`` or ``,``, so a script that splits
``--key=value`` on every ``=`` runs as a study; the trial's id and folder stay
``trials/<point label>/<n>``; a run dir whose own path holds such characters is refused
before anything runs (exit 2), naming the path and the placeholder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import read_jsonl, run_sweep, trials_of

from stepscale import rundir
from stepscale.errors import UsageError
from stepscale.sweeps.trainers.spec import read_trainer
from stepscale.sweeps.trainers.trial_paths import check_trial_paths, placeholder_trial_dir

# Exactly the naive parsing of a widely used configurator: `key, val = arg.split('=')`
# fails with "too many values to unpack" on a value that holds another '='.
NAIVE = """import json, os, sys
args = {}
for arg in sys.argv[1:]:
    key, val = arg[2:].split('=')
    args[key] = val
os.makedirs(args["out_dir"], exist_ok=True)
with open(os.path.join(args["out_dir"], "argv.json"), "w") as f:
    json.dump(sys.argv[1:], f)
rate = float(args["lr"]) * int(args["batch"]) / (int(args["batch"]) + 16)  # S(B) falls with B
with open("metrics.jsonl", "a") as f:
    for step in range(int(args["steps"]) + 1):
        f.write(json.dumps({"step": step, "eval_loss": 2.0 * (1 - rate) ** step}) + "\\n")
"""

STUDY = """# @package _global_
trainer:
  command: ["{python}", naive.py, "--out_dir={trial_dir}/out"]
  args: "--key=value"
  config: {lr: 0.1, steps: 40, width: 4, batch: 8}
  keys: {max_steps: steps}
scientific:
  batch: {path: batch, values: [8, 16, 32], quantity: batch_size}
  width: {path: width, values: [4]}
nuisance:
  lr: {path: lr, type: float, low: 0.1, high: 0.2, scale: log, quantity: learning_rate}
budget: {trials_per_point: 1, max_steps: 40}
objective: {kind: steps_to_target, target_loss: 1.0}
parallelism: 2
"""


def write_study(folder: Path) -> None:
    (folder / "naive.py").write_text(NAIVE)
    (folder / "conf").mkdir()
    (folder / "conf" / "naive_study.yaml").write_text(STUDY)


def test_the_alias_of_a_point_label_has_no_equals_or_comma() -> None:
    assert rundir.point_alias("batch_size=32") == "batch_size-32"
    assert rundir.point_alias("batch=8,width=4") == "batch-8+width-4"
    alias = rundir.trial_alias(Path("/r"), "batch=8,lr=-0.5", 3)
    assert alias == Path("/r/aliases/batch-8+lr--0.5/3")
    assert not rundir.unsafe_path_chars(str(alias))
    assert rundir.unsafe_path_chars("/a b/c=d,e=f'") == [" ", "=", ",", "'"]


def test_the_placeholder_gives_a_linked_alias_and_other_layouts_as_they_are(
    tmp_path: Path,
) -> None:
    trial = rundir.trial_dir(tmp_path, "batch=8,width=4", 0)
    trial.mkdir(parents=True)
    (trial / "x").write_text("in the trial")
    given = placeholder_trial_dir(trial)
    assert given == str(tmp_path / "aliases" / "batch-8+width-4" / "0")
    assert (Path(given) / "x").read_text() == "in the trial"  # the same folder
    link = tmp_path / "aliases" / "batch-8+width-4"
    assert os.readlink(link) == os.path.join("..", "trials", "batch=8,width=4")  # relative
    assert placeholder_trial_dir(trial) == given  # again: the link stands
    os.unlink(link)
    os.symlink("elsewhere", link)  # a wrong link is mended
    assert placeholder_trial_dir(trial) == given and (Path(given) / "x").exists()
    assert [p.name for p in (tmp_path / "aliases").iterdir()] == ["batch-8+width-4"]
    odd = tmp_path / "somewhere" / "trial"  # not RUN_DIR/trials/<label>/<n>
    assert placeholder_trial_dir(odd) == str(odd)


def test_an_unsafe_run_dir_or_two_points_sharing_an_alias_are_refused(tmp_path: Path) -> None:
    (tmp_path / "naive.py").write_text(NAIVE)
    trainer = read_trainer(
        {"command": ["{python}", "naive.py", "--out_dir={trial_dir}/out"]}, [tmp_path]
    )
    check_trial_paths(trainer, tmp_path / "run", ["batch=8"])  # a safe path: nothing to say
    with pytest.raises(UsageError, match=r"lr=0\.1 run.*'=' ' '.*\{trial_dir\}"):
        check_trial_paths(trainer, tmp_path / "lr=0.1 run", ["batch=8"])
    with pytest.raises(UsageError, match="would share the folder alias 'mode-a-b'"):
        check_trial_paths(trainer, tmp_path / "run", ["mode=a=b", "mode=a-b"])
    # no path placeholder: the run dir's path reaches no argument, nothing is refused
    plain = read_trainer({"command": ["{python}", "naive.py"]}, [tmp_path])
    check_trial_paths(plain, tmp_path / "lr=0.1 run", ["batch=8"])
    # a file source or a setting's string value with {trial_dir} counts too
    sourced = read_trainer(
        {
            "command": ["{python}", "naive.py"],
            "metrics": {"source": "{trial_dir}/log.csv", "format": "csv"},
        },
        [tmp_path],
    )
    with pytest.raises(UsageError, match=r"\{trial_dir\}"):
        check_trial_paths(sourced, tmp_path / "a,b", [])
    with pytest.raises(UsageError, match=r"\{trial_dir\}"):
        check_trial_paths(plain, tmp_path / "a,b", [], ["--log={trial_dir}/x"])


def test_sweep_run_refuses_an_unsafe_run_dir_before_writing_anything(tmp_path: Path) -> None:
    write_study(tmp_path)
    run_dir = tmp_path / "lr=0.1" / "run"
    res = run_sweep(
        "run", "conf=naive_study", "--config-dir", str(tmp_path), f"run_dir='{run_dir}'",
        cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert str(run_dir) in res.stderr and "{trial_dir}" in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "lr=0.1").exists()


@pytest.mark.slow
def test_a_script_that_splits_on_every_equals_sign_runs_as_a_study(tmp_path: Path) -> None:
    write_study(tmp_path)
    run_dir = tmp_path / "run"
    res = run_sweep(
        "run", "conf=naive_study", "--config-dir", str(tmp_path), f"run_dir={run_dir}",
        cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    trials = trials_of(run_dir)
    assert sorted(trials) == ["batch=16,width=4", "batch=32,width=4", "batch=8,width=4"]
    for label, records in trials.items():
        assert [r["state"] for r in records] == ["complete"], records
        trial = rundir.trial_dir(run_dir, label, 0)
        argv = json.loads((trial / "out" / "argv.json").read_text())
        alias = rundir.trial_alias(run_dir.resolve(), label, 0)
        assert argv[0] == f"--out_dir={alias}/out"
        assert all(a.count("=") == 1 and "," not in a for a in argv), argv
        assert [r["step"] for r in read_jsonl(trial / rundir.METRICS_JSONL)] == list(range(41))
    # the analysis reads trials/ only: the aliases add no trial
    res = run_sweep("report", str(run_dir), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    fits = json.loads((run_dir / "report" / "fits.json").read_text())
    assert fits["steps"]["groups"][0]["batch_sizes"] == [8, 16, 32]

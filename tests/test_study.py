"""`sweep run` end to end: real Optuna storage, real submitit jobs, tiny studies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    TEST_COMPILE_CACHE,
    assert_exact_budget,
    optuna_trials,
    shadowing_packages,
    trials_of,
    user_env,
    wait_for,
)
from optuna.trial import TrialState

from stepscale import rundir
from stepscale.cli.main import main
from stepscale.files import read_json

SWEEP = str(Path(sys.executable).with_name("sweep"))
FAST = ["train.devices=1"]


def _env(cache: str) -> dict[str, str]:
    env = user_env()
    env["STEPSCALE_TEST"] = "1"
    return env


def sweep(
    args: list[str], cwd: Path | None = None, cache: str = "", timeout: float = 600
) -> subprocess.CompletedProcess:
    """Run the real console script."""
    full = (
        [SWEEP, *args, *FAST, f"train.compile_cache_dir={cache or TEST_COMPILE_CACHE}"]
        if args[0] == "run"
        else [SWEEP, *args]
    )
    return subprocess.run(
        full, cwd=cwd, env=_env(cache), capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
def test_smoke_study_local_parallel_from_a_directory_with_its_own_packages(
    tmp_path: Path, compile_cache: str
) -> None:
    shadowing_packages(tmp_path)
    # The user's directory is a git repository of its own.
    git = ["git", "-c", "user.name=u", "-c", "user.email=u@x", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "."], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "user"], cwd=tmp_path, check=True)
    res = sweep(
        ["run", "conf=smoke", "parallelism=2", "run_dir=study"], cwd=tmp_path, cache=compile_cache
    )
    assert res.returncode == 0, res.stderr
    run_dir = tmp_path / "study"
    assert_exact_budget(run_dir, "smoke", per_point=3, points=2)
    for name in ("config.yaml", "space.json", "study.json", "run.json"):
        assert (run_dir / name).exists(), name
    # Provenance names the commit of the stepscale code that ran, not of the directory the
    # command was typed in; that one is recorded beside it.
    recorded = json.loads((run_dir / "run.json").read_text())["git"]
    assert recorded["commit"] == _head(Path(__file__).parent.parent), recorded
    assert recorded["workdir"]["commit"] == _head(tmp_path), recorded
    assert recorded["workdir"]["path"] == str(tmp_path.resolve())
    for folder in (run_dir / "trials").glob("*/*"):
        assert (folder / "metrics.jsonl").exists() and (folder / "status.json").exists()
        assert not (folder / "checkpoints").exists()  # removed once the trial ended
        assert (folder / "logs").is_dir()
        # The orchestrator's records use only keys the run directory's contract names.
        assert set(json.loads((folder / "trial.json").read_text())) <= set(rundir.TRIAL_KEYS)
        events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
        assert events and all(set(e) <= set(rundir.EVENT_KEYS) for e in events), events
    space = json.loads((run_dir / "space.json").read_text())
    assert space["schema"] == "stepscale.search_space/v1"
    status = sweep(["status", str(run_dir), "--json"])
    assert status.returncode == 0
    rows = json.loads(status.stdout)
    assert rows["finished"] and all(
        r["complete"] + r["pruned"] + r["diverged"] == 3 for r in rows["points"]
    )


def _head(folder: Path) -> str:
    out = subprocess.run(
        ["git", "-c", "safe.directory=*", "rev-parse", "HEAD"],
        cwd=folder,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, f"{folder} is not in a git checkout: {out.stderr}"
    return out.stdout.strip()


def user_study(tmp_path: Path, name: str, extra_yaml: str) -> list[str]:
    """A study of the user's own (the smoke study plus ``extra_yaml``) in a --config-dir."""
    folder = tmp_path / "user_conf" / "conf"
    folder.mkdir(parents=True, exist_ok=True)
    body = "# @package _global_\n# A user's study.\ndefaults:\n  - smoke\n  - _self_\n" + extra_yaml
    (folder / f"{name}.yaml").write_text(body)
    return [f"conf={name}", "--config-dir", str(tmp_path / "user_conf")]


def _run_inline(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(
        [
            "run",
            *args,
            "launcher=inline",
            "train.devices=1",
            f"train.compile_cache_dir={TEST_COMPILE_CACHE}",
        ]
    )
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_same_seed_at_parallelism_one_gives_identical_trials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two runs at one seed: the same trials (values, ends, objectives); another seed: other
    draws. Two trials of 10 steps at one batch size each (the whole shrunk demo at
    parallelism 1 and 3 with paused processes: tests/test_ordered.py)."""
    args = ["conf=smoke", "scientific.batch_size.values=[8]", "budget.trials_per_point=2"]
    args += ["budget.max_steps=10", "parallelism=1"]
    results = {}
    for name, seed in (("a", 0), ("b", 0), ("c", 7)):
        run_dir = tmp_path / name
        code, _, err = _run_inline(capsys, *args, f"seed={seed}", f"run_dir={run_dir}")
        assert code == 0, err
        results[name] = {
            label: [(t.params, t.value, t.state) for t in trials]
            for label, trials in optuna_trials(run_dir, "smoke").items()
        }
        assert [len(v) for v in results[name].values()] == [2]
    assert results["a"] == results["b"]

    def params(name: str) -> list[list[dict]]:
        return [[p for p, _, _ in trials] for trials in results[name].values()]

    assert params("c") != params("a")


@pytest.mark.slow
def test_pruning_compares_trials_within_a_point_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Vocabulary 64 has a much higher loss than vocabulary 16 at every step: if trials of both
    # points were compared, the median pruner would stop every vocab-64 trial at once. (16:
    # the smoke study's vocabulary, whose programs at batch 32 other tests compile.)
    study = user_study(
        tmp_path, "vocab", "scientific:\n  vocab: {path: data.vocab_size, values: [16, 64]}\n"
    )
    args = [
        *study, "~scientific.batch_size", "budget.trials_per_point=4", "pruner.n_startup_trials=1",
        "objective.kind=final_eval_loss", f"run_dir={tmp_path / 'p'}",
        "sampler.lag=0",  # each trial's history: every lower-numbered trial of its point
    ]  # fmt: skip
    code, _, err = _run_inline(capsys, *args)
    assert code == 0, err
    by_point = optuna_trials(tmp_path / "p", "vocab")
    assert set(by_point) == {"vocab=16", "vocab=64"}
    assert any(
        t.state == TrialState.PRUNED for trials in by_point.values() for t in trials
    )  # the pruner acted
    for label, trials in by_point.items():
        assert trials[0].state == TrialState.COMPLETE, label  # the start-up trial of each point
        for t in trials:
            if t.state != TrialState.PRUNED:
                continue
            step = max(t.intermediate_values)
            earlier = [
                o.intermediate_values[step]
                for o in trials
                if o.number < t.number and step in o.intermediate_values
            ]
            assert (
                earlier and t.intermediate_values[step] > sorted(earlier)[(len(earlier) - 1) // 2]
            ), label


@pytest.mark.slow
def test_extending_a_finished_study_runs_only_the_new_trials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "e"
    code, _, err = _run_inline(
        capsys, "conf=smoke", "budget.trials_per_point=2", f"run_dir={run_dir}"
    )
    assert code == 0, err
    before = {p: (p / "status.json").read_text() for p in (run_dir / "trials").glob("*/*")}
    # A run dir written before the code moved under `stepscale` recorded the old trainer path.
    study = json.loads((run_dir / "study.json").read_text())
    study["fingerprint"]["trainer"] = "models.train:train"
    (run_dir / "study.json").write_text(json.dumps(study))
    extend = ["budget.trials_per_point=3", "scientific.batch_size.values=[8,16,32]"]
    code, out, err = _run_inline(
        capsys, "conf=smoke", *extend, f"run_dir={run_dir}", "--dry-run", "--json"
    )
    assert code == 0, err  # the dry run reads the run dir: what is done, what would start
    plan = json.loads(out)
    assert {p["point"]: (p["done"], p["new"]) for p in plan["points"]} == {
        "batch_size=8": (2, 1),
        "batch_size=16": (2, 1),
        "batch_size=32": (0, 3),
    }
    assert plan["existing"] and plan["total_new"] == 5
    code, _, err = _run_inline(capsys, "conf=smoke", *extend, f"run_dir={run_dir}")
    assert code == 0, err
    assert_exact_budget(run_dir, "smoke", per_point=3, points=3)
    for folder, text in before.items():
        assert (folder / "status.json").read_text() == text  # finished trials untouched
    code, _, err = _run_inline(
        capsys,
        "conf=smoke",
        "budget.trials_per_point=3",
        "scientific.batch_size.values=[8,16,32]",
        f"run_dir={run_dir}",
    )
    assert code == 0 and len(list((run_dir / "trials").glob("*/*"))) == 9  # nothing more to do


@pytest.mark.slow
def test_killed_orchestrator_resumes_with_exact_budget(tmp_path: Path, compile_cache: str) -> None:
    run_dir = tmp_path / "k"
    args = [
        SWEEP,
        "run",
        "conf=smoke",
        "parallelism=2",
        "budget.max_steps=60",
        f"run_dir={run_dir}",
        *FAST,
    ]
    args.append(f"train.compile_cache_dir={compile_cache}")
    proc = subprocess.Popen(
        args,
        env=_env(compile_cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    wait_for(lambda: len(list((run_dir / "trials").glob("*/*/metrics.jsonl"))) >= 3)
    os.killpg(proc.pid, signal.SIGKILL)  # the orchestrator and its local jobs die at once
    proc.wait()
    res = sweep(
        ["run", "conf=smoke", "parallelism=2", "budget.max_steps=60", f"run_dir={run_dir}"],
        cache=compile_cache,
    )
    assert res.returncode == 0, res.stderr
    assert_exact_budget(run_dir, "smoke", per_point=3, points=2)


@pytest.mark.slow
def test_killed_job_is_retried_as_the_same_trial_from_its_checkpoint(
    tmp_path: Path, compile_cache: str
) -> None:
    run_dir = tmp_path / "j"
    common = [
        "run", "conf=smoke", "scientific.batch_size.values=[8]", "budget.trials_per_point=1",
        "budget.max_steps=300", "train.checkpoint_every=20", "pruner.name=none", "parallelism=1",
        "retries=1", f"run_dir={run_dir}",
    ]  # fmt: skip
    args = [SWEEP, *common, *FAST, f"train.compile_cache_dir={compile_cache}"]
    proc = subprocess.Popen(
        args, env=_env(compile_cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    folder = run_dir / "trials" / "batch_size=8" / "0"
    wait_for(
        lambda: (
            any((folder / "checkpoints").glob("step_*"))
            if (folder / "checkpoints").exists()
            else False
        )
    )
    beat = read_json(folder / "heartbeat.job")
    assert beat is not None
    os.kill(beat["pid"], signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()
    record = read_json(folder / "trial.json")
    status = read_json(folder / "status.json")
    assert record["attempts"] == 2 and record["state"] == "complete"
    assert status["resumed_from_step"] >= 20 and status["steps_done"] == 300
    steps = [
        json.loads(line)["step"] for line in (folder / "metrics.jsonl").read_text().splitlines()
    ]
    assert steps == sorted(set(steps))  # nothing lost or duplicated across the crash
    (trial,) = optuna_trials(run_dir, "smoke")["batch_size=8"]
    assert trial.state == TrialState.COMPLETE and trial.number == 0


def _bad(tmp_path: Path, capsys: pytest.CaptureFixture[str], *overrides: str) -> str:
    code, _, err = _run_inline(capsys, *overrides, f"run_dir={tmp_path / 'bad'}")
    assert code == 2, err
    assert "Traceback" not in err
    return err


GRID_LR = "  lr: {path: optimizer.lr, type: categorical, choices: [0.002, 0.008, 0.03], low: null, high: null}\n"


@pytest.mark.slow
def test_grid_study_runs_every_grid_point_once_per_point(
    tmp_path: Path, compile_cache: str
) -> None:
    """The whole grid at each point, none twice, and the study ends (Optuna's grid sampler
    calls study.stop() once the grid is done, which raised outside study.optimize)."""
    conf = user_study(tmp_path, "grid", "sampler: {name: grid}\nnuisance:\n" + GRID_LR)
    res = sweep(["run", *conf, f"run_dir={tmp_path / 'run'}"], cache=compile_cache)
    assert res.returncode == 0, res.stderr
    assert_exact_budget(tmp_path / "run", "grid", per_point=3, points=2)
    for label, trials in optuna_trials(tmp_path / "run", "grid").items():
        assert sorted(t.params["lr"] for t in trials) == [0.002, 0.008, 0.03], label


BAD_STUDIES = {
    "unknown study": (["conf=no_such_study"], "smoke"),
    "typo'd key": (["conf=smoke", "budget.trials_per_pont=3"], "trials_per_pont"),
    "low >= high": (["conf=smoke", "nuisance.lr.low=0.1", "nuisance.lr.high=0.01"], "nuisance.lr"),
    "log with low <= 0": (["conf=smoke", "nuisance.lr.low=0"], "log scale"),
    "reverse_log outside (0,1)": (
        "nuisance:\n  b2: {path: optimizer.b2, low: 0.9, high: 1.5, scale: reverse_log}\n",
        "reverse_log",
    ),
    "empty choices": (
        "nuisance:\n  opt: {path: optimizer.name, type: categorical, choices: []}\n",
        "nuisance.opt.choices",
    ),
    "int with fractional bounds": (
        "nuisance:\n  warm: {path: schedule.warmup_steps, type: int, low: 0.5, high: 8}\n",
        "whole",
    ),
    "range on a non-scientific axis": (
        "nuisance:\n  lr: {by: optimizer, ranges: {lion: {low: 1.0e-5}}}\n",
        "nuisance.lr.by",
    ),
    "unknown path": (
        ["conf=smoke", "nuisance.lr.path=optimizer.learning_rate"],
        "optimizer.learning_rate",
    ),
    "value the trainer rejects": (
        ["conf=smoke", "scientific.batch_size.values=[8,0]"],
        "batch_size=0",
    ),
    "target below floor": (["conf=smoke", "objective.target_loss=0.1"], "loss floor"),
    "parallelism < 1": (["conf=smoke", "parallelism=0"], "parallelism"),
    "unknown sampler": (["conf=smoke", "sampler.name=cmaes"], "sampler.name"),
    "unknown objective": (["conf=smoke", "objective.kind=accuracy"], "objective.kind"),
    "unreachable storage": (
        ["conf=smoke", "storage.name=sqlite", "storage.url=sqlite:////nonexistent/dir/x.db"],
        "storage",
    ),
    "grid over a continuous range": (["conf=smoke", "sampler.name=grid"], "grid"),
    "unknown launcher": (["conf=smoke", "launcher.name=foo"], "launcher.name"),
    "more trials than grid points": (
        "sampler: {name: grid}\nbudget: {trials_per_point: 4}\n" + "nuisance:\n" + GRID_LR,
        "has only 3 points",
    ),
}


@pytest.mark.parametrize("name", list(BAD_STUDIES))
def test_bad_study_exits_2_before_launching(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    overrides, expected = BAD_STUDIES[name]
    if isinstance(overrides, str):  # a YAML body for a user study in --config-dir
        overrides = user_study(tmp_path, "mine", overrides)
    err = _bad(tmp_path, capsys, *overrides)
    assert expected in err, err
    assert not (tmp_path / "bad").exists()  # every check comes before the run dir is made


def test_unwritable_run_dir_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    code, _, err = _run_inline(capsys, "conf=smoke", f"run_dir={blocker}/sub")
    assert code == 2 and "run_dir" in err and "Traceback" not in err


@pytest.mark.slow  # over 10 s on 2 cores
def test_changed_study_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "c"
    code, _, err = _run_inline(
        capsys, "conf=smoke", "budget.trials_per_point=1", f"run_dir={run_dir}"
    )
    assert code == 0, err
    for change in (
        ["nuisance.lr.high=0.1"],
        ["objective.target_loss=2.2"],
        ["budget.max_steps=50"],
        ["seed=3"],
        ["seed=3", "--dry-run"],  # the dry run refuses what the run would refuse
    ):
        code, _, err = _run_inline(
            capsys, "conf=smoke", "budget.trials_per_point=1", *change, f"run_dir={run_dir}"
        )
        assert code == 2 and "new name" in err, (change, err)
    code, _, err = _run_inline(
        capsys,
        "conf=smoke",
        "budget.trials_per_point=1",
        "scientific.batch_size.values=[8]",
        f"run_dir={run_dir}",
    )
    assert code == 2 and "not removed" in err


def test_dry_run_and_cfg(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = _run_inline(
        capsys, "conf=smoke", "--dry-run", "--json", f"run_dir={tmp_path / 'd'}"
    )
    assert code == 0
    plan = json.loads(out)
    assert plan["n_points"] == 2 and plan["total_trials"] == 6
    assert plan["points"][0]["horizon_tokens"] == plan["points"][0]["horizon_steps"] * 8 * 16
    assert not (tmp_path / "d").exists()
    code, out, _ = _run_inline(
        capsys,
        "conf=smoke",
        "budget.max_tokens=2048",
        "budget.max_steps=null",
        "--dry-run",
        "--json",
    )
    assert code == 0
    steps = {p["point"]: p["horizon_steps"] for p in json.loads(out)["points"]}
    assert steps == {
        "batch_size=8": 16,
        "batch_size=16": 8,
    }  # a token budget gives fewer steps to bigger batches
    code, out, _ = _run_inline(capsys, "conf=smoke", "--cfg")
    assert code == 0 and "scientific:" in out


def test_a_preset_in_a_subfolder_gets_a_plain_default_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "user_conf" / "conf" / "team"
    folder.mkdir(parents=True)
    (folder / "mine.yaml").write_text(
        "# @package _global_\n# A study in a subfolder.\ndefaults:\n  - /conf/smoke\n  - _self_\n"
    )
    monkeypatch.chdir(tmp_path)
    conf = ["conf=team/mine", "--config-dir", str(tmp_path / "user_conf")]
    code, out, err = _run_inline(capsys, *conf, "--dry-run", "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["name"] == "team_mine" and plan["run_dir"] == str(Path("runs") / "team_mine")
    assert main(["train", *conf, "--cfg"]) == 0
    assert "name: team_mine\n" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["user_conf"]  # nothing written


@pytest.mark.slow
def test_ctrl_c_exits_130_and_the_same_command_finishes_the_study(
    tmp_path: Path, compile_cache: str
) -> None:
    run_dir = tmp_path / "i"
    common = ["run", "conf=smoke", "parallelism=2", "budget.max_steps=60", f"run_dir={run_dir}"]
    args = [SWEEP, *common, *FAST, f"train.compile_cache_dir={compile_cache}"]
    proc = subprocess.Popen(
        args,
        env=_env(compile_cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    wait_for(lambda: len(list((run_dir / "trials").glob("*/*/metrics.jsonl"))) >= 2)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err.decode()
    assert b"Traceback" not in err
    res = sweep(common, cache=compile_cache)
    assert res.returncode == 0, res.stderr
    assert_exact_budget(run_dir, "smoke", per_point=3, points=2)


@pytest.mark.slow  # a study of 8 trials: 30 s in the fast tier
def test_confirm_seeds_rerun_the_best_values_with_new_seeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "s"
    code, _, err = _run_inline(
        capsys,
        "conf=smoke",
        "budget.trials_per_point=2",
        "budget.confirm_seeds=2",
        "pruner.name=none",
        f"run_dir={run_dir}",
    )
    assert code == 0, err
    for label, trials in optuna_trials(run_dir, "smoke").items():
        assert len(trials) == 4, label
        tune = [t for t in trials if t.user_attrs["kind"] == "tune"]
        confirm = [t for t in trials if t.user_attrs["kind"] == "confirm"]
        best = min((t for t in tune if t.state == TrialState.COMPLETE), key=lambda t: t.value)
        assert [t.params for t in confirm] == [best.params, best.params]
        assert sorted(t.user_attrs["seed"] for t in confirm) == [1, 2]
    records = [r for rs in trials_of(run_dir).values() for r in rs if r["kind"] == "confirm"]
    assert len(records) == 4 and {r["seed"] for r in records} == {1, 2}


@pytest.mark.slow  # a study's worker process and its compile: over 10 s on 2 cores
def test_a_trial_asked_but_never_submitted_is_submitted_at_once_by_the_next_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C between asking Optuna for a trial and submitting its job: the trial is left
    stopped (not held by a heartbeat for the takeover timeout) and resumes as attempt 1."""
    from stepscale.sweeps.launch.base import Launcher

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    run_dir = tmp_path / "run"
    args = ["conf=smoke", "scientific.batch_size.values=[8]", "budget.trials_per_point=1"]
    args += ["budget.max_steps=10", "parallelism=1", f"run_dir={run_dir}"]
    with monkeypatch.context() as m:
        m.setattr(Launcher, "submit_together", interrupted)
        code, _, _ = _run_inline(capsys, *args)
    assert code == 130
    (folder,) = (run_dir / "trials").glob("*/*")
    assert read_json(folder / "trial.json")["state"] == "stopped"
    assert not (folder / "heartbeat.orch").exists()
    code, _, err = _run_inline(capsys, *args, "heartbeat_timeout_s=3600")
    assert code == 0, err
    assert_exact_budget(run_dir, "smoke", per_point=1, points=1)
    assert read_json(folder / "trial.json")["attempts"] == 1

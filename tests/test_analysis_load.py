"""`analysis.load`: a run directory (docs/run-dir.md) → Dataset (trial × step) → NetCDF."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from run_dirs import Spec, make_run_dir

from stepscale import analysis
from stepscale.analysis.load import RunDirError, open_results, parameters, save

# Records and status exactly as `sweep train conf=train_smoke` writes them (stepscale/reporters.py).
REAL_METRICS = """\
{"step":0,"eval_loss":2.7926979064941406,"tokens":0,"examples":0,"wall_s":0.6995}
{"step":10,"train_loss":2.72392475605011,"lr":0.003000000026077032,"grad_norm":0.8229863822460175,"update_norm":0.33934900164604187,"param_norm":18.87006187438965,"tokens":5120,"examples":160,"wall_s":5.6153,"steps_per_s":1.781}
{"step":20,"train_loss":2.643440842628479,"lr":0.003000000026077032,"grad_norm":0.7003048837184906,"update_norm":0.2542272388935089,"param_norm":19.09608268737793,"tokens":10240,"examples":320,"wall_s":5.6948,"steps_per_s":125.809,"eval_loss":2.6467647552490234}
{"step":30,"train_loss":2.6366244316101075,"lr":0.003000000026077032,"grad_norm":0.6913817286491394,"update_norm":0.22068365514278412,"param_norm":19.253864288330078,"tokens":15360,"examples":480,"wall_s":5.791,"steps_per_s":103.912}
"""
REAL_STATUS = {
    "accum_steps": 1,
    "best_eval_loss": 2.6467647552490234,
    "devices": 1,
    "diverged_step": None,
    "examples_done": 480,
    "examples_per_step": 16,
    "final_eval_loss": 2.6467647552490234,
    "flops_done": 10074193920.0,
    "flops_per_step": 335806464.0,
    "global_batch": 16,
    "horizon_steps": 30,
    "params": 104192,
    "reason": "horizon reached",
    "state": "complete",
    "steps_done": 30,
    "steps_to_target": None,
    "steps_to_target_interp": None,
    "target_loss": None,
    "tokens_done": 15360,
    "tokens_per_step": 512,
    "wall_s": 6.099,
}


@pytest.fixture
def study(tmp_path: Path) -> Path:
    return make_run_dir(tmp_path / "run", Spec(horizon=2000, horizons={16: 300}, confirm_seeds=1))


def test_netcdf_round_trip_is_identical(study: Path, tmp_path: Path) -> None:
    ds = analysis.load(study)
    path = save(ds, tmp_path / "results.nc")
    xr.testing.assert_identical(ds, open_results(path))
    # Written twice, the file has the same bytes.
    again = save(analysis.load(study), tmp_path / "again.nc")
    assert path.read_bytes() == again.read_bytes()


def test_dims_coords_and_attributes(study: Path) -> None:
    ds = analysis.load(study)
    assert ds["trial"].values[0] == "batch_size=16/0"
    assert list(dict.fromkeys(ds["point"].values)) == [
        f"batch_size={b}" for b in Spec().batches
    ]  # study.json order, not alphabetical
    for name in (
        "point",
        "number",
        "kind",
        "seed",
        "state",
        "running",
        "objective",
        "steps_done",
        "steps_to_target",
        "steps_to_target_interp",
        "tokens_per_step",
        "examples_per_step",
        "flops_per_step",
        "status_wall_s",
        "tokens",
        "examples",
        "batch_size",
        "param_lr",
        "warmup",
        "model_size",
    ):
        assert name in ds.coords, name
    assert ds["tokens"].dims == ("trial", "step")
    assert set(ds["kind"].values) == {"tune", "confirm"}
    for var in ("eval_loss", "train_loss", "lr", "grad_norm", "wall_s", "noise_scale"):
        assert ds[var].dims == ("trial", "step"), var
    assert ds.attrs["study"] == "synthetic"
    assert ds.attrs["objective_kind"] == "steps_to_target" and ds.attrs["target_loss"] == 2.0
    assert ds.attrs["partial"] == 0
    lr = next(p for p in parameters(ds) if p["name"] == "lr")
    assert lr == {
        "name": "lr",
        "coord": "param_lr",
        "role": "nuisance",
        "path": "optimizer.lr",
        "quantity": "learning_rate",  # what the built-in trainer's optimizer.lr measures
    }
    assert ds["param_lr"].attrs["path"] == "optimizer.lr"
    assert ds["batch_size"].attrs["role"] == "scientific"
    # tokens = step × tokens per step (batch 16, sequence length 64)
    i = 0
    np.testing.assert_array_equal(ds["tokens"].values[i], ds["step"].values * 16 * 64)


def test_steps_are_the_union_and_missing_records_are_nan(study: Path) -> None:
    ds = analysis.load(study)
    steps = ds["step"].values
    assert steps[0] == 0 and np.all(np.diff(steps) > 0)
    ev = ds["eval_loss"].sel(trial="batch_size=64/2")
    tr = ds["train_loss"].sel(trial="batch_size=64/2")
    assert math.isnan(float(ev.sel(step=10))) and math.isfinite(float(tr.sel(step=10)))
    assert math.isfinite(float(ev.sel(step=20)))
    assert math.isnan(float(tr.sel(step=0))) and math.isfinite(float(ev.sel(step=0)))
    # Batch size 16 ran only 300 steps: NaN beyond.
    assert np.isnan(ds["eval_loss"].sel(trial="batch_size=16/2", step=2000))
    # status.json values come through unchanged.
    status = json.loads((study / "trials" / "batch_size=64" / "2" / "status.json").read_text())
    assert float(ds["steps_to_target"].sel(trial="batch_size=64/2")) == status["steps_to_target"]
    assert float(ds["steps_to_target_interp"].sel(trial="batch_size=64/2")) == pytest.approx(
        status["steps_to_target_interp"]
    )


def test_running_trials_are_included_and_marked(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "run", Spec(horizon=600, running=2))
    ds = analysis.load(run)
    running = ds["running"].values
    assert running.sum() == 2 and set(ds["state"].values[running]) == {"running"}
    assert np.isnan(ds["steps_to_target"].values[running]).all()
    assert np.isfinite(ds["eval_loss"].values[running]).any(axis=1).all()  # curves so far
    # Per-step counts are inferred from the logged totals while status.json lacks them.
    assert (ds["tokens_per_step"].values[running] == 1024 * 64).all()
    assert ds.attrs["partial"] == 1 and ds.attrs["n_running"] == 2


def _one_trial(root: Path, metrics: str, status: dict | None, info: dict | None) -> Path:
    tdir = root / "trials" / "batch_size=16" / "0"
    tdir.mkdir(parents=True)
    (tdir / "metrics.jsonl").write_text(metrics)
    if status is not None:
        (tdir / "status.json").write_text(json.dumps(status))
    if info is not None:
        (tdir / "trial.json").write_text(json.dumps(info))
    return tdir


def test_real_trainer_records(tmp_path: Path) -> None:
    info = {
        "trial": "batch_size=16/0",
        "point": "batch_size=16",
        "number": 0,
        "kind": "tune",
        "seed": 0,
        "scientific": {"batch_size": 16},
        "nuisance": {"lr": 0.003},
        "fixed": {},
        "state": "complete",
        "objective": 60.0,
    }
    _one_trial(tmp_path, REAL_METRICS, REAL_STATUS, info)
    ds = analysis.load(tmp_path)
    assert ds["step"].values.tolist() == [0, 10, 20, 30]
    assert float(ds["flops_per_step"][0]) == 335806464.0
    assert float(ds["status_wall_s"][0]) == 6.099
    assert float(ds["wall_s"][0, 2]) == 5.6948
    assert (
        ds["status_state"].values[0] == "complete" and ds["reason"].values[0] == "horizon reached"
    )
    assert ds["tokens"].values[0].tolist() == [0, 5120, 10240, 15360]
    assert np.isnan(ds["steps_to_target"].values[0])
    assert "partial" in ds.attrs and ds.attrs["study"] == tmp_path.name


def test_a_cut_short_last_line_is_skipped_but_a_bad_middle_line_is_an_error(
    tmp_path: Path,
) -> None:
    lines = REAL_METRICS.splitlines()
    _one_trial(tmp_path / "a", "\n".join(lines) + '\n{"step":40,"train_lo', None, None)
    ds = analysis.load(tmp_path / "a")
    assert ds["step"].values.tolist() == [0, 10, 20, 30]
    assert ds["state"].values[0] == "running" and bool(ds["running"][0])
    _one_trial(tmp_path / "b", lines[0] + "\nnot json\n" + "\n".join(lines[1:]), None, None)
    with pytest.raises(RunDirError, match="line 2"):
        analysis.load(tmp_path / "b")


def test_bad_run_dirs(tmp_path: Path) -> None:
    with pytest.raises(RunDirError, match="does not exist"):
        analysis.load(tmp_path / "missing")
    with pytest.raises(RunDirError, match="no trials"):
        analysis.load(tmp_path)
    _one_trial(tmp_path, REAL_METRICS, None, None)
    (tmp_path / "study.json").write_text("{not json")
    with pytest.raises(RunDirError, match=r"study\.json"):
        analysis.load(tmp_path)


def test_package_exports() -> None:
    from stepscale.analysis import load, load_table

    assert callable(load) and callable(load_table)


def test_parallel_parse_gives_the_same_dataset(study: Path) -> None:
    # In a fresh process without JAX (forking is refused once JAX's threads exist).
    script = (
        "import sys, xarray as xr\nfrom stepscale import analysis\n"
        "module = sys.modules['stepscale.analysis.trial_files']\n"
        "sequential = analysis.load(sys.argv[1])\n"
        "module._PARALLEL_MIN_TRIALS = 1\n"
        "assert 'jax' not in sys.modules\n"
        "xr.testing.assert_identical(analysis.load(sys.argv[1]), sequential)\n"
        "print('identical')\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", script, str(study)], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0 and "identical" in res.stdout, res.stderr


def test_a_metric_named_with_a_slash_is_saved(tmp_path: Path) -> None:
    # TensorBoard tags (`eval/runtime`, from a framework's event files) reach metrics.jsonl
    # as they are; NetCDF takes '/' for a group separator.
    metrics = '{"step": 0, "eval_loss": 4.0, "eval/runtime": 0.1}\n'
    metrics += '{"step": 10, "eval_loss": 3.0, "eval/runtime": 0.2}\n'
    _one_trial(tmp_path, metrics, None, None)
    ds = analysis.load(tmp_path)
    assert ds["eval_runtime"].attrs["metric"] == "eval/runtime"
    assert float(ds["eval_runtime"].isel(trial=0).sel(step=10)) == 0.2
    xr.testing.assert_identical(ds, open_results(save(ds, tmp_path / "results.nc")))

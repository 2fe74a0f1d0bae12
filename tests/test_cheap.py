"""The critical batch size for less compute: the adaptive rule against a hand computation,
transfer between points against a known η*(B), `sweep replay` of a synthetic study with
known curves, bad input, and one tiny adaptive + transfer study end to end."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from helpers import TEST_COMPILE_CACHE, user_env
from run_dirs import Spec, make_run_dir

from stepscale.analysis.analyze import analyze
from stepscale.analysis.fits.design import NextBatch, cover_choice, initial_batches, next_batch
from stepscale.analysis.fits.transfer import transfer_order
from stepscale.analysis.health import health_checks
from stepscale.analysis.load import load
from stepscale.analysis.replay import ReplayError, parse_protocol, replay
from stepscale.cli.main import main
from stepscale.sweeps.run.transfer import TransferRun
from stepscale.sweeps.study.schema import NuisanceParam, ScientificParam, StudyConfig
from stepscale.sweeps.study.space import Point, build_space

ROOT = Path(__file__).resolve().parents[1]
GRID = [4, 8, 16, 32, 64, 128, 256]


# ------------------------------------------------------------------ the adaptive rule


def _spread(s: list[float]) -> float:
    """Σ (s − mean)² by hand."""
    mean = sum(s) / len(s)
    return sum((v - mean) ** 2 for v in s)


def test_the_adaptive_rule_adds_the_batch_size_a_hand_computation_says() -> None:
    # S(B) = 100 (1 + 20/B) exactly: the fit gives B_crit = 20.
    exact = {b: 100 * (1 + 20 / b) for b in GRID}

    def decide(measured: list[int], **kw: float) -> NextBatch:
        return next_batch(measured, [exact[b] for b in measured], GRID, max_points=7, **kw)

    d = decide([4, 32, 256])
    assert d.b_crit == pytest.approx(20, rel=1e-6) and d.s_min == pytest.approx(100, rel=1e-6)
    # 32 lies within a factor 2 above B_crit = 20, nothing within [10, 20] below: 16 first;
    # then two batch sizes at or below 10 (4 and 8) and two at or above 40 (256 and 64, the
    # cheapest there): each asymptote of S(B) rests on two measurements.
    assert (d.batch, d.rule) == (16, "cover")
    assert (decide([4, 16, 32, 256]).batch, decide([4, 16, 32, 256]).rule) == (8, "cover")
    d = decide([4, 8, 16, 32, 256])
    assert d.batch == 64 and "fewer than 2 batch sizes fitted beyond a factor 2 above" in d.reason
    # Covered, five or more exact points: the interval has collapsed, so the rule stops.
    d = decide([4, 8, 16, 32, 64, 256])
    assert d.batch is None and d.rule == "interval" and "both sides" in d.reason
    # max_points ends it first; with S(B) flat (B_crit unidentified) the widest gap is bisected.
    four = [4, 32, 128, 256]
    assert next_batch(four, [100.0] * 4, GRID, max_points=4).rule == "max_points"
    gap = next_batch([4, 256, 8], [100.0, 100.0, 100.0], GRID, max_points=6)
    assert (gap.batch, gap.rule) == (32, "gap")  # middle of the widest gap 8…256
    assert initial_batches(GRID, 3) == (4, 32, 256)


def test_past_the_cover_the_rule_adds_what_narrows_b_crit_most_per_example() -> None:
    # Covered (4, 8 | 16 | 32 | 64, 128 around B_crit ≈ 20), S(B) off the hyperbola by a few
    # percent so that the interval stays wider than ci_ratio = 1.01: rule 5 chooses among
    # 2, 256, 512 and 1024. Each candidate c contributes σ(log B_crit − log c) to the Jacobian,
    # and a run there costs S_min (c + B_crit) examples by the fit.
    measured = [4, 8, 16, 32, 64, 128]
    wobble = [1.03, 0.97, 1.02, 0.98, 1.03, 0.97]
    steps = [100 * (1 + 20 / b) * w for b, w in zip(measured, wobble, strict=True)]
    grid = [2, *GRID, 512, 1024]
    d = next_batch(measured, steps, grid, max_points=8, ci_ratio=1.01)
    assert d.rule == "variance"
    sig = {b: 1 / (1 + b / d.b_crit) for b in grid}
    now = 1 / _spread([sig[b] for b in measured])
    after = {c: 1 / _spread([*(sig[b] for b in measured), sig[c]]) for c in (2, 256, 512, 1024)}
    cost = {c: d.s_min * (c + d.b_crit) for c in after}
    gain = {c: (now - v) / cost[c] for c, v in after.items()}
    assert {int(b): v for b, v in d.scores.items()} == pytest.approx(after, rel=1e-9)
    assert {int(b): v for b, v in d.costs.items()} == pytest.approx(cost, rel=1e-9)
    assert d.batch == max(gain, key=gain.get) == 2
    # Without the cost the batch size far above B_crit would win: it pins S_min best.
    assert min(after, key=after.get) == 1024
    row = d.to_dict()["scores"][0]
    assert set(row) == {"batch", "variance", "examples"} and row["batch"] == 2


def test_the_cover_rule_looks_within_a_factor_2_on_each_side_then_at_both_asymptotes() -> None:
    assert cover_choice([4, 32, 256], [8, 16, 64, 128], 20.0) == 16  # below open
    assert cover_choice([4, 16, 256], [8, 32, 64, 128], 20.0) == 32  # above open
    assert cover_choice([4, 256], [8, 16, 32, 64, 128], 20.0) == 16  # both: the nearer (log)
    assert cover_choice([4, 256], [8, 16, 32, 64, 128], 23.0) == 32
    assert cover_choice([4, 16, 32, 256], [8, 64, 128], 20.0) == 8  # one at ≤ 10: the largest
    assert cover_choice([4, 8, 16, 32, 256], [64, 128], 20.0) == 64  # one at ≥ 40: the cheapest
    assert cover_choice([4, 8, 16, 32, 64, 256], [128], 20.0) is None  # covered
    assert cover_choice([4, 8, 20, 64, 256], [16, 32], 20.0) is None  # B_crit itself: both sides
    assert cover_choice([64, 128, 256], [], 300.0) is None  # nothing left to cover with


# ------------------------------------------------------------------ transfer


def _eta(b: float) -> float:
    return 1e-3 * (b / 16) ** 0.5


def test_transfer_enqueues_the_predicted_optimal_lr(tmp_path: Path) -> None:
    cfg = StudyConfig(name="t")
    cfg.scientific = {"batch_size": ScientificParam(path="data.global_batch", values=[16, 64, 256])}
    cfg.nuisance = {
        "lr": NuisanceParam(path="optimizer.lr", low=1e-5, high=1.0, scale="log"),
        "warmup": NuisanceParam(path="schedule.warmup_steps", type="int", low=0, high=100),
    }
    cfg.budget.trials_per_point = 5
    cfg.sampler.transfer = True
    space = build_space(cfg, known=None)
    storage = optuna.storages.InMemoryStorage()
    studies = {
        p.label: optuna.create_study(storage=storage, study_name=p.label) for p in space.points
    }
    b16, b64, b256 = space.points

    def trials_of(p: Point) -> list[optuna.trial.FrozenTrial]:
        return studies[p.label].get_trials(deepcopy=False)

    run = TransferRun(cfg, tmp_path)
    # The anchors (the smallest and the middle) are tuned: objective 100 (1 + ln(lr/η*)²)
    # with η*(B) = 1e-3 (B/16)^0.5.
    for p, warmup in ((b16, 10), (b64, 40)):
        run.start(space, p, studies[p.label], trials_of, tmp_path)  # anchors: nothing enqueued
        assert not studies[p.label].get_trials()
        dists = space.distributions(p.label)
        for mult in (0.25, 0.5, 1.0, 2.0, 4.0):
            lr = _eta(p.values["batch_size"]) * mult
            studies[p.label].add_trial(
                optuna.trial.create_trial(
                    params={"lr": lr, "warmup": warmup if mult == 1.0 else 90},
                    distributions=dists,
                    value=100 * (1 + math.log(mult) ** 2),
                    user_attrs={"kind": "tune", "state": "complete"},
                )
            )
    # The largest batch size comes third, extrapolated along the anchors' η*(B).
    assert run.rank(space.points, b256) == 2 and run.ready(space.points, b256, trials_of)
    run.start(space, b256, studies[b256.label], trials_of, tmp_path)
    (waiting,) = studies[b256.label].get_trials(states=(optuna.trial.TrialState.WAITING,))
    enqueued = waiting.system_attrs["fixed_params"]
    assert enqueued["lr"] == pytest.approx(_eta(256), rel=1e-6)  # 4e-3
    assert enqueued["warmup"] == 40  # the nearest tuned batch size's best
    dists = run.distributions(b256.label, space.distributions(b256.label))
    assert (dists["lr"].low, dists["lr"].high) == pytest.approx((_eta(256) / 3, _eta(256) * 3))
    trial = studies[b256.label].ask(fixed_distributions=dists)
    assert trial.params["lr"] == pytest.approx(_eta(256), rel=1e-6)  # the first trial asked
    record = json.loads((tmp_path / "transfer.json").read_text())
    assert record["points"][b16.label]["prediction"] is None  # an anchor
    assert record["points"][b64.label]["prediction"] is None  # the other anchor
    assert "extrapolated" in record["points"][b256.label]["prediction"]["how"]["lr"]
    run.start(space, b256, studies[b256.label], trials_of, tmp_path)  # once only
    assert len(studies[b256.label].get_trials()) == 1
    # Transfer order in log B: the smallest and the middle, the largest, then the gaps.
    assert transfer_order([16, 32, 64, 128, 256]) == [0, 2, 4, 1, 3]
    assert transfer_order([8, 16, 32, 64, 128, 256]) == [0, 2, 5, 1, 3, 4]  # middle tie: 32
    assert transfer_order([16, 256]) == [0, 1]


# ------------------------------------------------------------------ replay

# Defaults of tests/run_dirs.py: B = 16…1024, S(B) = 500 (1 + 128/B) at L = 2, trials at
# 0.25…16 × η*(B) need m = 1 + 0.25 ln(mult)² times the steps (16 diverges at step 50),
# evaluations every 20 steps, a horizon of 6000.
SPEC = Spec()


def _crossing(batch: int, mult: float) -> float:
    """The first evaluated step past m·S(B): the known steps to target of a trial (or the
    horizon it ran to without getting there)."""
    tau = (1 + 0.25 * math.log(mult) ** 2) * 500 * (1 + 128 / batch)
    return min(20 * (math.floor(tau / 20) + 1), 6000)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run_dir(tmp_path_factory.mktemp("replay") / "run", SPEC)


def _by(result: dict, protocol: str) -> dict:
    return next(p for p in result["protocols"] if p["protocol"] == protocol)


def test_replay_of_a_synthetic_study_gives_the_known_compute_and_bcrit(synthetic: Path) -> None:
    out = replay(
        load(synthetic), ["full", "first:3", "first:2", "deadline:3", "batches:16,64,256,1024"]
    ).to_dict()
    total = sum(b * (5 * 6000 + 50) for b in SPEC.batches)
    assert out["study_compute"]["all"]["examples"] == total
    full, first3, first2 = _by(out, "full"), _by(out, "first:3"), _by(out, "first:2")
    assert full["b_crit"] == pytest.approx(128, rel=0.1)
    assert full["s_min"] == pytest.approx(500, rel=0.05)
    # The first 3 trials hold the best (η* itself): same answer for 3/5 of the horizons.
    assert first3["compute_fraction"]["examples"] == pytest.approx(3 * 6000 / (5 * 6000 + 50))
    assert first3["b_crit"] == full["b_crit"] and first3["b_crit_error"]["median"] == 0
    # The first 2 miss η* by a factor 2: m = 1 + 0.25 ln(2)² times the steps, same B_crit.
    assert first2["s_min"] / full["s_min"] == pytest.approx(1 + 0.25 * math.log(2) ** 2, rel=0.03)
    assert first2["b_crit"] == pytest.approx(full["b_crit"], rel=0.1)
    # Deadline: no trial passes 3× the best so far before it ends (at the target, or at the
    # horizon at B = 16, where 0.25 and 4 × η* need 6662 steps).
    known = sum(
        b * (sum(_crossing(b, m) for m in (0.25, 0.5, 1.0, 2.0, 4.0)) + 50) for b in SPEC.batches
    )
    deadline = _by(out, "deadline:3")
    assert deadline["compute_fraction"]["examples"] == pytest.approx(known / total, rel=1e-3)
    assert deadline["b_crit"] == full["b_crit"]
    batches = _by(out, "batches:16,64,256,1024")
    assert batches["batch_sizes"] == [16, 64, 256, 1024]
    assert batches["compute_fraction"]["examples"] == pytest.approx(
        sum(b * 30050 for b in (16, 64, 256, 1024)) / total
    )
    # Random subsets: the spread over draws, and the adaptive rule's own choice of batches.
    rnd = replay(load(synthetic), ["random:2", "adaptive:5"], draws=30).to_dict()
    r2 = _by(rnd, "random:2")
    assert r2["draws"] == 30 and r2["spread_q10_q90"]["b_crit"][0] <= r2["b_crit"]
    assert len(_by(rnd, "adaptive:5")["batch_sizes"]) <= 5


def test_a_transfer_replay_runs_the_predicted_lr_first_and_the_narrowed_range(
    synthetic: Path,
) -> None:
    # η*(B) = lr0 (B/16)^0.5 exactly: the anchors (16 and the middle, 128) run all 6 trials
    # (0.25 … 16 × η*), and η* predicted at every other batch size is exact (1024:
    # extrapolated, the others interpolated), so each runs its η* trial first and then the
    # two inside [η*/3, 3 η*] (0.5 and 2 × η*) — 3 trials.
    out = replay(load(synthetic), ["transfer", "transfer+first:2", "full"]).to_dict()
    total = sum(b * (5 * 6000 + 50) for b in SPEC.batches)
    anchors = (16, 128)
    known = sum(b * (5 * 6000 + 50) if b in anchors else b * 3 * 6000 for b in SPEC.batches)
    t = _by(out, "transfer")
    assert t["compute_fraction"]["examples"] == pytest.approx(known / total)
    assert t["b_crit"] == _by(out, "full")["b_crit"]  # every point still runs its η* trial
    # K = 2: the ends run 0.25 and 0.5 × η* (the first two), so η* is predicted low; the
    # points between still get the trial nearest the prediction and one more in range.
    t2 = _by(out, "transfer+first:2")
    assert t2["compute_fraction"]["examples"] == pytest.approx(
        sum(b * 2 * 6000 for b in SPEC.batches) / total
    )
    with pytest.raises(ReplayError, match=r"bad 'transfer:0\.5'"):
        parse_protocol("transfer:0.5")
    assert parse_protocol("adaptive:5+random:4+transfer").transfer == 3.0


def test_spread_draws_weigh_each_trial_by_its_share_of_the_log_lr_range(synthetic: Path) -> None:
    from stepscale.analysis.replay import _groups, _spread_weights

    (group,) = _groups(load(synthetic), 2.0)
    trials = group.of(16.0)
    # 0.25, 0.5, 1, 2, 4, 16 × η*: in log2 cells of 1, 1, 1, 1, 1.5 and 2 (the ends mirrored).
    w = _spread_weights(trials)
    assert w is not None
    assert w.tolist() == pytest.approx([1 / 7.5, 1 / 7.5, 1 / 7.5, 1 / 7.5, 1.5 / 7.5, 2 / 7.5])
    # Six of six is every trial, whatever the weights: the full study's answer, each draw.
    out = replay(load(synthetic), ["spread:6", "full"], draws=20).to_dict()
    assert _by(out, "spread:6")["draws"] == 20
    assert _by(out, "spread:6")["b_crit_error"]["max"] == 0
    with pytest.raises(ReplayError, match="given twice or with first/random/spread"):
        parse_protocol("random:2+spread:2")


def _cut(run: Path) -> None:
    """Make ``run`` a stop_at_target study: curves end at the first evaluation below 2."""
    for tdir in sorted((run / "trials").glob("*/*")):
        status = json.loads((tdir / "status.json").read_text())
        if status.get("steps_to_target") is None:
            continue
        keep = []
        for line in (tdir / "metrics.jsonl").read_text().splitlines():
            rec = json.loads(line)
            keep.append(line)
            if rec["step"] >= status["steps_to_target"] and rec.get("eval_loss") is not None:
                break
        (tdir / "metrics.jsonl").write_text("\n".join(keep) + "\n")
        status.update(steps_done=status["steps_to_target"], reason="target reached")
        (tdir / "status.json").write_text(json.dumps(status))


def test_replay_bad_input_exits_2_with_a_clear_message(
    tmp_path: Path, synthetic: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def fails(*argv: str) -> str:
        assert main(["replay", *argv]) == 2
        err = capsys.readouterr()
        assert err.out == "" and "Traceback" not in err.err
        return err.err

    assert "does not exist" in fails(str(tmp_path / "missing"))
    running = make_run_dir(tmp_path / "running", Spec(batches=(16,), running=6))
    assert "no tune trial in a final state" in fails(str(running))
    assert "unknown part 'fast:2'" in fails(str(synthetic), "--protocol", "fast:2")
    assert "adaptive:N[:I] needs 3" in fails(str(synthetic), "--protocol", "adaptive:2")
    cut = make_run_dir(tmp_path / "cut", Spec(batches=(16, 64, 256)))
    _cut(cut)
    assert "evals:3 keeps every 60th step" in fails(str(cut), "--protocol", "evals:3")
    assert "curves were cut at the target" in fails(str(cut), "--target", "1.5")
    with pytest.raises(ReplayError, match="stands alone"):
        parse_protocol("full+first:2")
    assert main(["replay", str(cut), "--protocol", "first:2", "--draws", "5"]) == 0
    assert json.loads(capsys.readouterr().out)["protocols"][0]["protocol"] == "first:2"


# ------------------------------------------------------------------ config checks


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["low=64", "high=16"], "scientific.batch_size.adaptive: needs low < high"),
        (["low=4", "high=64", "max_points=2"], "scientific.batch_size.adaptive.max_points"),
        (["low=4", "high=8"], "initial=3 needs more"),
    ],
)
def test_bad_adaptive_axes_exit_2_naming_the_key(
    overrides: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [f"scientific.batch_size.adaptive.{o}" for o in overrides]
    code = main(
        ["run", "conf=smoke", "scientific.batch_size.values=[]", *args, f"run_dir={tmp_path}/r"]
    )
    assert code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_transfer_and_deadline_settings_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            ["run", "conf=smoke", "sampler.transfer=true", "sampler.transfer_width=1", "--dry-run"]
        )
        == 2
    )
    assert "sampler.transfer_width: must be > 1" in capsys.readouterr().err
    bracket = ["run", "conf=smoke", "sampler.transfer=true", "sampler.transfer_bracket=0.5"]
    assert main([*bracket, "--dry-run"]) == 2
    assert "sampler.transfer_bracket: 0 (off) or a factor > 1" in capsys.readouterr().err
    assert (
        main(["run", "conf=smoke", "sampler.transfer=true", "sampler.name=grid", "--dry-run"]) == 2
    )
    assert "sampler.transfer: not with sampler=grid" in capsys.readouterr().err
    assert main(["run", "conf=smoke", "pruner.name=deadline", "--dry-run"]) == 2
    assert "objective.stop_at_target=true" in capsys.readouterr().err


# ------------------------------------------------------------------ end to end


@pytest.mark.slow
def test_an_adaptive_study_with_transfer_records_each_point_and_why(tmp_path: Path) -> None:
    run = tmp_path / "fast"
    axis = "scientific.batch_size.adaptive"
    cmd = [
        sys.executable, "-m", "stepscale.cli.main", "run", "conf=smoke",
        "scientific.batch_size.values=[]", f"{axis}.low=4", f"{axis}.high=32",
        f"{axis}.max_points=4", "budget.trials_per_point=1", "budget.max_steps=20",
        "sampler.transfer=true", "objective.stop_at_target=true", "pruner.name=deadline",
        "train.eval_every=5", "train.devices=1", f"run_dir={run}",
        # the session's programs (tests/test_ordered.py trains the same shapes)
        f"train.compile_cache_dir={TEST_COMPILE_CACHE}",
    ]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=user_env())
    assert res.returncode == 0, res.stderr[-3000:]
    record = json.loads((run / "adaptive.json").read_text())
    assert record["initial"] == [4, 16, 32] and record["candidates"] == [4, 8, 16, 32]
    first, last = record["decisions"]
    assert first["batch"] == 8 and first["point"] == "batch_size=8" and first["reason"]
    assert last["batch"] is None and last["rule"] == "max_points" and record["stopped"]
    study = json.loads((run / "study.json").read_text())
    labels = [p["label"] for p in study["points"]]
    assert labels == ["batch_size=4", "batch_size=8", "batch_size=16", "batch_size=32"]
    assert sorted(p.name for p in (run / "trials").iterdir()) == sorted(labels)
    transfer = json.loads((run / "transfer.json").read_text())
    # The anchors are the smallest and the middle of the initial batch sizes; the largest is
    # extrapolated, and the one the rule added comes after them, between tuned neighbours.
    points = transfer["points"]
    assert {k: v["rank"] for k, v in points.items()} == {
        "batch_size=4": 0,
        "batch_size=16": 1,
        "batch_size=32": 2,
        "batch_size=8": 3,
    }
    anchors = {k for k, v in points.items() if v["prediction"] is None}
    assert anchors == {"batch_size=4", "batch_size=16"}
    assert "extrapolated" in points["batch_size=32"]["prediction"]["how"]["lr"]
    assert "interpolated" in points["batch_size=8"]["prediction"]["how"]["lr"]
    for label in ("batch_size=32", "batch_size=8"):
        first_trial = json.loads((run / "trials" / label / "0" / "trial.json").read_text())
        # the prediction, inside the declared range (32's extrapolation is clipped to it)
        assert first_trial["nuisance"]["lr"] == pytest.approx(points[label]["enqueued"]["lr"])
    assert main(["report", str(run)]) == 0
    md = (run / "report" / "report.md").read_text()
    for section in ("Adaptive batch sizes", "Transfer between points", "Health checks"):
        assert f"## {section}" in md
    assert main(["status", str(run), "--json"]) == 0
    # The same command again resumes a finished study: nothing more runs.
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=user_env())
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((run / "adaptive.json").read_text()) == record
    assert len(list((run / "trials").glob("*/*/trial.json"))) == 4


def test_health_checks_flag_an_optimum_at_a_range_edge_and_too_few_batch_sizes_above(
    synthetic: Path, tmp_path: Path
) -> None:
    ds = load(synthetic)
    space = json.loads((synthetic / "space.json").read_text())
    rep = replay(ds, ["random:2", "random:4"], draws=20)
    checks = {c.name: c for c in health_checks(analyze(ds), ds, space, rep)}
    assert all(c.ok for c in checks.values()), checks
    # B_crit = 128 has 3 fitted batch sizes on either side; η* is inside [1e-5, 1].
    assert "3 fitted batch size(s) below" in checks["batch sizes around B_crit"].message
    # η*(1024) = 1e-3·8 = 0.008: with a range ending there, that optimum is at its edge.
    lr = next(p for p in space["parameters"] if p["name"] == "lr")
    lr["high"] = 0.008
    checks = {c.name: c for c in health_checks(analyze(ds), ds, space, rep)}
    edge = checks["range edge"]
    assert not edge.ok and "batch_size=1024: best lr = 0.008 is at the high end" in edge.message
    # Batch sizes only up to 128 leave at most one above B_crit ≈ 128.
    few = load(make_run_dir(tmp_path / "few", Spec(batches=(16, 32, 64, 128))))
    checks = {c.name: c for c in health_checks(analyze(few), few)}
    around = checks["batch sizes around B_crit"]
    assert not around.ok and "too few above B_crit" in around.message

"""`sweep branch RUN_DIR [--trial POINT/N] [--steps …] [--factors …] [--window-examples W]
[--lr-rule none|sqrt|linear] [--lr-multipliers …] [--tolerance F]`: the critical batch size
over the course of training, measured by branching (Merrill et al. 2025).

From the checkpoints of a finished trial of the study (the *base*, batch B at step t), a
branch continues at k·B for a window of W examples with the learning rate rescaled by a
stated rule (``lr × k^p``; p = 0, ½, 1 for ``none``, ``sqrt``, ``linear``), optionally times
each of a few multipliers. Every branch is an ordinary trial — the study's launcher,
storage, retries, heartbeats and resume — of a small study of its own in
``RUN_DIR/branches/<base>/`` (its Optuna studies are ``<name>/branches/<base>/<label>`` in
the study's storage); the study itself and its report's fits are untouched. Running the
same command again resumes it; new steps or factors add branches. ``branch.json`` there
records the measurement; `stepscale.analysis.branching` judges it (B_crit(t) = the largest
k·B whose branch keeps up with the base per example, within ``--tolerance``).

Branches need the base's checkpoints, which a trial deletes when it ends unless the study
keeps them: run the base study with ``keep_checkpoints=true``, ``train.checkpoint_every``
at the steps to branch from and ``train.keep_checkpoints`` large enough to keep them all.
Step 0 needs no checkpoint (the initial state is the seed's). A branch holds its batch
constant (any ramp of the base is off), and its LR schedule goes on at the base's step, so
the base's schedule must not decay towards its horizon (``constant`` or
``warmup_constant``), and a branch starts after the warmup.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from stepscale.errors import UsageError
from stepscale.files import read_json, write_json_atomic
from stepscale.rundir import (
    BRANCH_JSON,
    BRANCHES_DIR,
    CHECKPOINTS_DIR,
    COMPLETE,
    CONFIG_JSON,
    CONFIG_YAML,
    STATUS_JSON,
    STUDY_JSON,
    TRIAL_JSON,
    TRIALS_DIR,
)
from stepscale.sweeps.launch.launchers import launcher_class
from stepscale.sweeps.run.branch_request import BranchRequest
from stepscale.sweeps.study.launcher_schema import launcher_from_mapping
from stepscale.sweeps.study.schema import (
    BudgetConfig,
    ObjectiveConfig,
    PrunerConfig,
    SamplerConfig,
    StudyConfig,
)
from stepscale.sweeps.study.space import Point, SearchSpace
from stepscale.sweeps.trainers import builtin

LR_RULES = {"none": 0.0, "sqrt": 0.5, "linear": 1.0}
# Schedules whose LR at a step does not depend on the horizon (a branch changes it).
FLAT_SCHEDULES = ("constant", "warmup_constant")
# The trainer keys a branch sets (the rest is the base trial's config).
BRANCH_PATHS = {
    "batch_size": "data.global_batch",
    "lr": "optimizer.lr",
    "init_from": "train.init_from",
    "max_steps": "train.max_steps",
}
_SLUG = re.compile(r"[^A-Za-z0-9_.=,-]")


def branch_dir(run_dir: Path, trial: str) -> Path:
    """``RUN_DIR/branches/<trial id, / as _>/``: where the branches of one base trial live."""
    return run_dir / BRANCHES_DIR / _SLUG.sub("_", trial.replace("/", "_"))


def run_branch(run_dir_text: str, request: BranchRequest, argv: list[str]) -> str:
    """The `sweep branch` command: check everything, write ``branch.json`` and run the
    branches to the end (the study's launcher); returns the base trial's id."""
    run_dir = Path(run_dir_text)
    cfg = study_config(run_dir)
    from stepscale.sweeps.trainers.kinds import kind_of, study_trainer

    trainer, _ = study_trainer(cfg, None)
    if not kind_of(trainer).branches:
        raise UsageError(
            "sweep branch starts branches from the built-in trainer's checkpoints "
            "(train.init_from); this study has its own trainer"
        )
    _check_request(request)
    base_id, base_dir = _base_trial(run_dir, request.trial)
    tree = _read_tree(base_dir)
    status = read_json(base_dir / STATUS_JSON, lenient=True) or {}
    facts0 = _facts(tree, 0)
    rule = request.lr_rule or ("linear" if facts0["optimizer"] in ("sgd", "lars") else "sqrt")
    if rule not in LR_RULES:
        raise UsageError(f"--lr-rule: unknown {rule!r}; choose one of {', '.join(LR_RULES)}")
    if facts0["schedule"] not in FLAT_SCHEDULES:
        raise UsageError(
            f"the base trial's schedule is {facts0['schedule']}, whose LR depends on the "
            f"horizon a branch changes; branch from a study with schedule.name in "
            f"{', '.join(FLAT_SCHEDULES)}"
        )
    window = _window(request, facts0)
    done_examples = int(status.get("examples_done") or 0)
    steps = _steps(request, base_dir, facts0["warmup_steps"], tree, window, done_examples)
    out = branch_dir(run_dir, base_id)
    points, plan = _points(tree, base_dir, steps, request, rule, window)
    record = {
        "base": base_id,
        "base_dir": str(base_dir.resolve()),
        "window_examples": window,
        "lr_rule": rule,
        "lr_multipliers": list(request.lr_multipliers),
        "factors": sorted(set(request.factors)),
        "tolerance": request.tolerance,
        "points": plan,
    }
    record = _merged(out, record)
    derived, space = _branch_study(cfg, tree, out, base_id, points)
    from stepscale.sweeps.study.plan import plan_points, plan_summary

    here = launcher_class(cfg.launcher.name).on_this_machine
    sizes = plan_points(derived, space, trainer, here=here)
    _run(cfg, derived, space, run_dir, out, sizes, trainer, record, plan_summary, argv)
    return base_id


def study_config(run_dir: Path) -> StudyConfig:
    """The study config of a run dir (its ``config.yaml``); not a study → `UsageError`."""
    if not (run_dir / STUDY_JSON).is_file() or not (run_dir / CONFIG_YAML).is_file():
        raise UsageError(f"{run_dir}: not a study run dir (no study.json and config.yaml)")
    try:
        saved = OmegaConf.load(run_dir / CONFIG_YAML)
        # The launcher's keys are its schema's (a run dir from before per-launcher schemas
        # holds every launcher's keys): typed apart, by its name.
        section = saved.pop("launcher", None)
        section = OmegaConf.to_container(section) if section is not None else {}
        cfg: StudyConfig = OmegaConf.to_object(  # type: ignore[assignment]
            OmegaConf.merge(OmegaConf.structured(StudyConfig), saved)
        )
        cfg.launcher = launcher_from_mapping(section)  # type: ignore[arg-type]
        return cfg
    except Exception as exc:  # an edited or foreign config.yaml
        raise UsageError(f"{run_dir}/{CONFIG_YAML} cannot be read as a study: {exc}") from None


def _check_request(r: BranchRequest) -> None:
    if not r.factors or any(not math.isfinite(k) or k < 1 for k in r.factors):
        raise UsageError(f"--factors: batch multiples ≥ 1, got {list(r.factors)}")
    if not r.lr_multipliers or any(not math.isfinite(m) or m <= 0 for m in r.lr_multipliers):
        raise UsageError(f"--lr-multipliers: numbers > 0, got {list(r.lr_multipliers)}")
    if not 0 <= r.tolerance < 1:
        raise UsageError(f"--tolerance: a fraction in [0, 1), got {r.tolerance}")
    if r.window_examples is not None and r.window_tokens is not None:
        raise UsageError("give only one of --window-examples and --window-tokens")
    for name, value in (("examples", r.window_examples), ("tokens", r.window_tokens)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise UsageError(f"--window-{name}: must be > 0, got {value}")
    if r.steps is not None and any(s < 0 for s in r.steps):
        raise UsageError(f"--steps: steps ≥ 0, got {list(r.steps)}")


def _base_trial(run_dir: Path, trial: str | None) -> tuple[str, Path]:
    """The base trial's id and folder: ``--trial``, else the best complete trial of the
    study's first point (its lowest objective)."""
    if trial is not None:
        point, _, number = trial.rpartition("/")
        folder = run_dir / TRIALS_DIR / point / number
        if not point or not number.isdigit() or not (folder / CONFIG_JSON).is_file():
            raise UsageError(f"--trial: no trial {trial!r} in {run_dir} (give POINT/N)")
        _check_complete(trial, folder)
        return trial, folder
    study = read_json(run_dir / STUDY_JSON, lenient=True) or {}
    labels = [p.get("label") for p in study.get("points", [])]
    best: tuple[float, str, Path] | None = None
    for label in labels[:1]:
        for folder in sorted((run_dir / TRIALS_DIR / str(label)).glob("*")):
            record = read_json(folder / TRIAL_JSON, lenient=True) or {}
            value = record.get("objective")
            complete = record.get("state") == COMPLETE and isinstance(value, int | float)
            if complete and (best is None or value < best[0]):
                best = (float(value), f"{label}/{folder.name}", folder)
    if best is None:
        raise UsageError(
            f"{run_dir}: its first point has no complete trial to branch from; give --trial"
        )
    return best[1], best[2]


def _check_complete(trial: str, folder: Path) -> None:
    status = read_json(folder / STATUS_JSON, lenient=True) or {}
    if status.get("state") != COMPLETE:
        raise UsageError(
            f"--trial {trial}: its state is {status.get('state', 'unknown')}; branch from a "
            "complete trial"
        )


def _read_tree(folder: Path) -> dict[str, Any]:
    tree = read_json(folder / CONFIG_JSON, lenient=True)
    if not isinstance(tree, dict):
        raise UsageError(f"{folder}/{CONFIG_JSON} is missing or unreadable")
    return tree


def _facts(tree: dict[str, Any], step: int) -> dict[str, Any]:
    try:
        return builtin.branch_point(tree, step)
    except builtin.RejectedConfig as exc:
        raise UsageError(f"the base trial's config is refused by the trainer: {exc}") from None


def _window(r: BranchRequest, facts: dict[str, Any]) -> int:
    """The window in examples: given, or 4 steps of the largest branch at the first batch."""
    if r.window_tokens is not None:
        return math.ceil(r.window_tokens / facts["tokens_per_example"])
    if r.window_examples is not None:
        return math.ceil(r.window_examples)
    return math.ceil(4 * max(r.factors) * facts["batch"])


def _checkpoints(base_dir: Path) -> list[int]:
    folder = base_dir / CHECKPOINTS_DIR
    found = []
    for p in folder.glob("step_*") if folder.is_dir() else []:
        tail = p.name.removeprefix("step_")
        if tail.isdigit() and (p / "host.json").is_file() and (p / "arrays.npz").is_file():
            found.append(int(tail))
    return sorted(found)


def _steps(
    r: BranchRequest,
    base_dir: Path,
    warmup: int,
    tree: dict[str, Any],
    window: int,
    done_examples: int,
) -> list[int]:
    """The branch steps: given (each checked), or every kept checkpoint (and step 0 when
    there is no warmup) whose window the base's own run covers."""
    kept = _checkpoints(base_dir)
    available = sorted({*kept, *([0] if warmup == 0 else [])})

    def covered(step: int) -> bool:
        return _facts(tree, step)["examples"] + window <= done_examples

    if r.steps is None:
        steps = [s for s in available if s >= warmup and covered(s)]
        if not steps:
            raise UsageError(
                f"the base trial {base_dir} has no checkpoint to branch from (kept: "
                f"{kept or 'none'}) whose window of {window} examples its own run covers. "
                "A trial's checkpoints are deleted when it ends unless the study keeps them: "
                "run the base study with keep_checkpoints=true, train.checkpoint_every=N and "
                "train.keep_checkpoints=M (enough to keep them all), or give a shorter window"
            )
        return steps
    for step in sorted(set(r.steps)):
        if step not in available:
            raise UsageError(
                f"--steps: the base trial has no checkpoint at step {step} (kept: "
                f"{kept or 'none'}; step 0 needs no checkpoint when there is no warmup). Run "
                "the base study with keep_checkpoints=true, train.checkpoint_every and "
                "train.keep_checkpoints large enough to keep them"
            )
        if step < warmup:
            raise UsageError(
                f"--steps: step {step} is inside the base's warmup ({warmup} steps); branch "
                "after it"
            )
        if not covered(step):
            raise UsageError(
                f"--steps: the base trial's run ends ({done_examples} examples) before the "
                f"window of {window} examples from step {step}; pick an earlier step or a "
                "shorter window"
            )
    return sorted(set(r.steps))


def _points(
    tree: dict[str, Any],
    base_dir: Path,
    steps: list[int],
    r: BranchRequest,
    rule: str,
    window: int,
) -> tuple[list[Point], list[dict[str, Any]]]:
    """One point per (step, factor, LR multiplier): its trainer values and its record."""
    points, plan = [], []
    for step in steps:
        f = _facts(tree, step)
        for k in sorted(set(r.factors)):
            batch = round(k * f["batch"])
            if batch != k * f["batch"]:
                raise UsageError(
                    f"--factors: {k} × the base batch {f['batch']} is not a whole batch"
                )
            n_steps = math.ceil(window / batch)
            for m in r.lr_multipliers:
                lr = f["lr"] * k ** LR_RULES[rule] * m
                label = f"step={step},batch_size={batch}"
                if len(r.lr_multipliers) > 1:
                    label += f",lr_mult={m:g}"
                ckpt = base_dir / CHECKPOINTS_DIR / f"step_{step:09d}"
                values = {
                    "batch_size": batch,
                    "lr": lr,
                    "init_from": str(ckpt.resolve()) if step > 0 else None,
                    "max_steps": step + n_steps,
                }
                points.append(Point(len(points), label, values))
                plan.append({
                    "label": label, "step": step, "factor": k, "batch": batch,
                    "base_batch": f["batch"], "base_examples": f["examples"], "lr": lr,
                    "lr_multiplier": m, "steps": n_steps, "examples": n_steps * batch,
                })  # fmt: skip
    return points, plan


def _merged(out: Path, record: dict[str, Any]) -> dict[str, Any]:
    """``record`` joined with an earlier measurement of the same base: its branches stay,
    as long as they meant the same (window, LR rule and multipliers); else `UsageError`."""
    old = read_json(out / BRANCH_JSON, lenient=True)
    if not isinstance(old, dict):
        return record
    for key in ("window_examples", "lr_rule"):
        if old.get(key) != record[key]:
            raise UsageError(
                f"{out} holds branches of {record['base']} with {key} = {old.get(key)}; these "
                f"would have {record[key]}. Branches of different settings do not mix: move "
                f"{out} away to measure anew"
            )
    labels = {p["label"] for p in record["points"]}
    kept = [p for p in old.get("points", []) if p.get("label") not in labels]
    record["points"] = kept + record["points"]
    record["factors"] = sorted({*old.get("factors", []), *record["factors"]})
    multipliers = {*old.get("lr_multipliers", []), *record["lr_multipliers"]}
    record["lr_multipliers"] = sorted(multipliers)
    return record


def _branch_study(
    cfg: StudyConfig,
    tree: dict[str, Any],
    out: Path,
    base_id: str,
    points: list[Point],
) -> tuple[StudyConfig, SearchSpace]:
    """The study that runs the branches: the base trial's trainer config (its ramp off, no
    stop at the target, a checkpoint only at the end), one trial per point, the study's
    launcher, storage, retries and parallelism."""
    common = copy.deepcopy(tree)
    common.setdefault("data", {})["rampup"] = {"samples": 0, "schedule": []}
    train = common.setdefault("train", {})
    train.update(max_tokens=None, max_examples=None, stop_at_target=False, checkpoint_every=0)
    train.update(init_from=None)
    sections = builtin.to_trainer_config(common)
    derived = dataclasses.replace(
        cfg,
        name=f"{cfg.name}/{BRANCHES_DIR}/{out.name}",
        run_dir=str(out),
        **{k: getattr(sections, k) for k in builtin.SECTIONS},
        scientific={},
        nuisance={},
        fixed={},
        budget=BudgetConfig(trials_per_point=1, confirm_seeds=0),
        objective=ObjectiveConfig(kind="final_eval_loss"),
        sampler=SamplerConfig(name="random"),
        pruner=PrunerConfig(name="none"),
        keep_checkpoints=False,
        seed=int(train.get("seed", cfg.seed)),
        description=f"branches of {base_id}",
    )
    space = SearchSpace(
        points=tuple(points),
        nuisance={p.label: () for p in points},
        fixed={},
        scientific_paths=dict(BRANCH_PATHS),
    )
    return derived, space


def _run(
    cfg: StudyConfig,
    derived: StudyConfig,
    space: SearchSpace,
    run_dir: Path,
    out: Path,
    sizes: dict[str, dict[str, Any]],
    trainer: Any,
    record: dict[str, Any],
    plan_summary: Any,
    argv: list[str],
) -> None:
    """Write the branch directory's files (``run.json`` the provenance of its runs) and run
    its trials with the study's launcher."""
    from stepscale.sweeps.launch.checks import check_run_dir, check_submission
    from stepscale.sweeps.run.runlock import RunLock
    from stepscale.sweeps.study.files import make_run_dir
    from stepscale.sweeps.study.provenance import finish_provenance, write_provenance
    from stepscale.sweeps.study.storage import check_storage, open_storage, resolve

    here = launcher_class(cfg.launcher.name).on_this_machine
    if here:
        try:
            builtin.configure_compile_cache(derived.train.compile_cache_dir)
        except builtin.RejectedConfig as exc:
            raise UsageError(str(exc)) from None
    storage_spec = resolve(cfg.storage, run_dir)  # the study's own storage
    check_storage(storage_spec, run_dir)  # both answer before anything is written
    check_submission(cfg.launcher)
    check_run_dir(cfg.launcher, out)
    make_run_dir(out)
    with RunLock(out) as lock:
        storage = open_storage(storage_spec)
        write_json_atomic(out / BRANCH_JSON, record)
        write_json_atomic(out / STUDY_JSON, _study_json(derived, record))
        write_provenance(out, storage_spec, argv, jax_devices=here)
    lock.close()
    from stepscale.sweeps.run.display import StudyProgress
    from stepscale.sweeps.run.scheduler import Scheduler

    plan = plan_summary(derived, space, sizes)
    with StudyProgress(derived.name, plan) as progress:
        scheduler = Scheduler(derived, space, out, storage_spec, storage, sizes, trainer, progress)
        try:
            scheduler.run()
        except BaseException:  # Ctrl-C, a crash: the runs so far stay recorded
            finish_provenance(out, complete=False)
            raise
    finish_provenance(out, complete=not scheduler.stopped)
    if scheduler.stopped:
        print(
            f"sweep: stopped on request; run the same `sweep branch` again to resume ({out})",
            file=sys.stderr,
        )


def _study_json(derived: StudyConfig, record: dict[str, Any]) -> dict[str, Any]:
    """study.json of the branch directory (``sweep status`` / ``sweep stop`` read it): every
    branch of the measurement so far is a point."""
    return {
        "name": derived.name,
        "kind": "branches",
        "points": [
            {"label": p["label"], "values": json.loads(json.dumps(p)), "index": i}
            for i, p in enumerate(record["points"])
        ],
        "scientific": [{"name": a, "path": path} for a, path in BRANCH_PATHS.items()],
        "nuisance": [],
        "objective": dataclasses.asdict(derived.objective),
        "budget": dataclasses.asdict(derived.budget),
    }

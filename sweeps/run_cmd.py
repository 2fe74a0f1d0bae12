"""`sweep run conf=NAME [overrides] [--dry-run] [--cfg] [--json]`: run, resume or extend a study.

Everything is validated before anything launches: the space, the sampler and pruner,
every point's trainer config (at the ends of the nuisance ranges), the storage, the run
dir, and — when the run dir exists — that the study did not change in a way that would
mix incompatible trials (exit 2: use a new `name`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from stepscale.models.reporter import write_json_atomic
from stepscale.sweeps.compose import UsageError, compose_config, to_object
from stepscale.sweeps.objective import OBJECTIVES
from stepscale.sweeps.runlock import RunLock
from stepscale.sweeps.samplers import check_pruner, check_sampler, grid_size
from stepscale.sweeps.schema import StudyConfig
from stepscale.sweeps.space import Point, SearchSpace, build_space
from stepscale.sweeps.space_doc import dumps_stable, space_document
from stepscale.sweeps.storage import StorageSpec, open_storage, redact, resolve
from stepscale.sweeps.trials import now_iso, read_json, to_trainer_config, trial_config

# Keys that may change between runs of one study: they change how or how much is run,
# not what a trial means. Adding scientific values is handled separately.
_MUTABLE = {
    "name", "run_dir", "description", "parallelism", "retries", "keep_checkpoints",
    "heartbeat_timeout_s", "launcher", "storage", "budget.trials_per_point",
    "budget.confirm_seeds", "train.compile_cache_dir", "train.devices", "data.max_microbatch",
    "train.distributed", "train.coordinator_address", "train.num_processes", "train.process_id",
    "train.distributed_timeout_s",
}  # fmt: skip


def _check_study(cfg: StudyConfig) -> None:
    if cfg.objective.kind not in OBJECTIVES:
        raise UsageError(
            f"objective.kind: unknown {cfg.objective.kind!r}; choose one of {', '.join(OBJECTIVES)}"
        )
    if cfg.objective.kind == "steps_to_target" and cfg.objective.target_loss is None:
        raise UsageError("objective.target_loss: steps_to_target needs a target loss")
    if cfg.parallelism < 1:
        raise UsageError(f"parallelism: must be ≥ 1, got {cfg.parallelism}")
    if cfg.retries < 0:
        raise UsageError(f"retries: must be ≥ 0, got {cfg.retries}")
    if cfg.budget.trials_per_point < 1:
        raise UsageError(f"budget.trials_per_point: must be ≥ 1, got {cfg.budget.trials_per_point}")
    if cfg.budget.confirm_seeds < 0:
        raise UsageError(f"budget.confirm_seeds: must be ≥ 0, got {cfg.budget.confirm_seeds}")
    horizons = [
        x
        for x in (cfg.budget.max_steps, cfg.budget.max_tokens, cfg.budget.max_examples)
        if x is not None
    ]
    if len(horizons) > 1:
        raise UsageError("budget: give the horizon once: max_steps, max_tokens or max_examples")
    if cfg.heartbeat_timeout_s <= 0:
        raise UsageError(f"heartbeat_timeout_s: must be > 0, got {cfg.heartbeat_timeout_s}")
    check_sampler(cfg.sampler)
    check_pruner(cfg.pruner)


def _range_ends(space: SearchSpace, point: Point) -> list[dict[str, Any]]:
    """Nuisance values at the low and at the high end of every range."""
    ends: list[dict[str, Any]] = [{}, {}]
    for n in space.nuisance[point.label]:
        if n.type == "categorical":
            ends[0][n.name], ends[1][n.name] = n.choices[0], n.choices[-1]
        else:
            cast = int if n.type == "int" else float
            ends[0][n.name], ends[1][n.name] = cast(n.low), cast(n.high)
    return ends


def _plan_points(cfg: StudyConfig, space: SearchSpace) -> dict[str, dict[str, Any]]:
    """Validate every point's trainer config; returns per-point horizons and sizes."""
    from stepscale.models.errors import ConfigError
    from stepscale.models.plan import prepare

    out = {}
    for point in space.points:
        plans = []
        for values in _range_ends(space, point):
            tree = trial_config(cfg, space, point, values, cfg.seed, None)
            if cfg.launcher.name == "slurm":
                # The jobs' devices (GPUs, several tasks) are not this machine's: the job
                # checks train.devices against what it gets.
                tree["train"]["devices"] = None
            try:
                plans.append(prepare(to_trainer_config(tree)))
            except ConfigError as exc:
                raise UsageError(
                    f"point {point.label} (nuisance {values}) is rejected by the trainer: {exc}"
                ) from None
            except Exception as exc:  # e.g. a value of the wrong type for its path
                raise UsageError(f"point {point.label}: invalid trainer config: {exc}") from None
        plan = plans[0]
        out[point.label] = {
            "horizon_steps": plan.horizon,
            "tokens_per_step": plan.tokens_per_step,
            "examples_per_step": plan.examples_per_step,
            "params": plan.n_params,
            "flops_per_step": plan.flops_per_step,
            "loss_floor": plan.info.loss_floor,
        }
    return out


def _fingerprint(cfg: StudyConfig) -> dict[str, Any]:
    """The parts of a study that may not change once trials exist."""
    tree = dataclasses.asdict(cfg)
    for key in _MUTABLE:
        node = tree
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.get(p, {})
        node.pop(leaf, None)
    for axis in tree["scientific"].values():
        axis.pop("values", None)
    return json.loads(json.dumps(tree, default=str))


def _diff(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [
            d for k in sorted(set(a) | set(b)) for d in _diff(a.get(k), b.get(k), f"{prefix}{k}.")
        ]
    return [] if a == b else [prefix.rstrip(".")]


def _check_unchanged(run_dir: Path, cfg: StudyConfig) -> None:
    saved = read_json(run_dir / "study.json")
    if saved is None:
        if (run_dir / "study.json").exists():
            raise UsageError(f"{run_dir}/study.json is unreadable; pass run_dir=… for a new study")
        return
    changed = _diff(saved.get("fingerprint"), _fingerprint(cfg))
    if changed:
        raise UsageError(
            f"the study in {run_dir} was run with different settings (changed: {', '.join(changed)}). "
            "Trials of different settings must not be mixed: give the study a new name= (or run_dir=). "
            "Only scientific values may be added and trials_per_point raised."
        )
    old = {a: s["values"] for a, s in saved.get("scientific_values", {}).items()}
    for alias, values in old.items():
        new = [json.loads(json.dumps(v, default=str)) for v in cfg.scientific[alias].values]
        missing = [v for v in values if v not in new]
        if missing:
            raise UsageError(
                f"scientific.{alias}.values: {missing} were part of this study; values may be added, "
                "not removed (use a new name= for a different grid)"
            )


def _git(cwd: Path, trusted: bool = False) -> dict[str, Any]:
    """The commit (and whether the tree is dirty) of the git checkout holding ``cwd``.
    ``trusted``: read it even when another user owns it (git's safe.directory), as for the
    checkout of the code that is running anyway."""
    git = ["git", "-c", f"safe.directory={cwd}"] if trusted else ["git"]
    try:
        head = subprocess.run(
            [*git, "rev-parse", "--show-toplevel", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
        )
        if head.returncode != 0:
            return {"commit": None, "dirty": None}
        toplevel, commit = head.stdout.split()[:2]
        dirty = subprocess.run(
            [*git, "status", "--porcelain"], cwd=cwd, capture_output=True, text=True, timeout=5
        )
        return {"commit": commit, "dirty": bool(dirty.stdout.strip()), "path": toplevel}
    except (OSError, subprocess.SubprocessError, ValueError):
        return {"commit": None, "dirty": None}


def _provenance_git() -> dict[str, Any]:
    """run.json's ``git``: the checkout of the stepscale code that ran (wherever the
    command was typed), and under ``workdir`` the user's own repository (their configs)
    when the command ran inside a different one."""
    code = _git(Path(__file__).resolve().parent.parent, trusted=True)
    workdir = _git(Path.cwd())
    if workdir["commit"] is not None and workdir.get("path") != code.get("path"):
        code["workdir"] = workdir
    return code


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in (
        "stepscale",
        "jax",
        "jaxlib",
        "flax",
        "optax",
        "optuna",
        "numpy",
        "hydra-core",
        "submitit",
    ):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            continue
    return out


def _write_provenance(run_dir: Path, storage: StorageSpec, argv: list[str]) -> dict[str, Any]:
    import jax

    path = run_dir / "run.json"
    record = read_json(path) or {}
    command = ["sweep", *(redact(a) for a in argv)]
    session = {"started": now_iso(), "ended": None, "command": command}
    record.update(
        command=command,
        started=record.get("started", session["started"]),
        ended=None,
        versions=_versions(),
        devices=[f"{d.platform}:{d.id}" for d in jax.devices()],
        platform=jax.devices()[0].platform,
        host=socket.gethostname(),
        git=_provenance_git(),
        storage=storage.display(),
    )
    record["sessions"] = [*record.get("sessions", []), session]
    write_json_atomic(path, record)
    return record


def _finish_provenance(run_dir: Path, complete: bool) -> None:
    path = run_dir / "run.json"
    record = read_json(path) or {}
    stamp = now_iso()
    if record.get("sessions"):
        record["sessions"][-1]["ended"] = stamp
    record["ended"] = stamp if complete else None
    write_json_atomic(path, record)


def _plan_summary(
    cfg: StudyConfig, space: SearchSpace, sizes: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    trials = cfg.budget.trials_per_point + cfg.budget.confirm_seeds
    points = []
    for p in space.points:
        s = sizes[p.label]
        steps = s["horizon_steps"]
        points.append({
            "point": p.label,
            "trials": trials,
            "horizon_steps": steps,
            "tokens_per_step": s["tokens_per_step"],
            "horizon_tokens": steps * s["tokens_per_step"],
            "horizon_examples": steps * s["examples_per_step"],
            "budget_steps": steps * trials,
            "budget_tokens": steps * trials * s["tokens_per_step"],
            "params": s["params"],
            "loss_floor": s["loss_floor"],
        })  # fmt: skip
    return {
        "name": cfg.name,
        "points": points,
        "n_points": len(points),
        "trials_per_point": cfg.budget.trials_per_point,
        "confirm_seeds": cfg.budget.confirm_seeds,
        "total_trials": trials * len(points),
        "total_budget_steps": sum(p["budget_steps"] for p in points),
        "total_budget_tokens": sum(p["budget_tokens"] for p in points),
        "objective": dataclasses.asdict(cfg.objective),
        "sampler": cfg.sampler.name,
        "pruner": cfg.pruner.name,
        "launcher": cfg.launcher.name,
        "parallelism": cfg.parallelism,
    }


def _print_plan(plan: dict[str, Any], run_dir: Path, storage: StorageSpec) -> None:
    print(
        f"study {plan['name']}: {plan['n_points']} points × {plan['trials_per_point']} trials",
        end="",
    )
    print(f" (+{plan['confirm_seeds']} confirm seeds)" if plan["confirm_seeds"] else "")
    print(f"  objective {plan['objective']['kind']}", end="")
    target = plan["objective"]["target_loss"]
    print(f" (target loss {target})" if target is not None else "")
    print(
        f"  sampler {plan['sampler']}, pruner {plan['pruner']}, launcher {plan['launcher']}, parallelism {plan['parallelism']}"
    )
    print(f"  run dir {run_dir}, storage {storage.display()}")
    print(f"  {'point':32s} {'steps/trial':>11s} {'tokens/trial':>13s} {'budget steps':>12s}")
    for p in plan["points"]:
        print(
            f"  {p['point']:32s} {p['horizon_steps']:11d} {p['horizon_tokens']:13d} {p['budget_steps']:12d}"
        )
    print(
        f"  total: {plan['total_trials']} trials, {plan['total_budget_steps']} steps ({plan['total_budget_tokens']} tokens)"
    )


def prepare_study(
    overrides: list[str], config_dir: str | None
) -> tuple[Any, StudyConfig, dict[str, Any]]:
    """Compose and type the config; fills the default name from the conf preset."""
    raw, choices = compose_config(overrides, config_dir)
    if raw.name is None:
        raw.name = choices["conf"]
    return raw, to_object(raw), choices


def run_study(
    overrides: list[str],
    config_dir: str | None,
    *,
    dry_run: bool,
    print_cfg: bool,
    as_json: bool,
    argv: list[str],
    detach: bool = False,
) -> int:
    """The `sweep run` command; returns the exit code."""
    raw, cfg, _ = prepare_study(overrides, config_dir)
    if print_cfg:
        print(OmegaConf.to_yaml(raw), end="")
        return 0
    _check_study(cfg)
    space = build_space(cfg)
    sizes = _plan_points(cfg, space)
    if cfg.sampler.name == "grid":
        for p in space.points:
            n = grid_size(space.distributions(p.label))  # continuous params → UsageError
            if cfg.budget.trials_per_point > n:
                raise UsageError(
                    f"budget.trials_per_point={cfg.budget.trials_per_point}: the grid at "
                    f"{p.label} has only {n} points, and further trials would repeat them; set "
                    f"budget.trials_per_point={n} (or fewer, for a random subset of the grid)"
                )
    run_dir = Path(cfg.run_dir) if cfg.run_dir else Path("runs") / cfg.name
    storage_spec = resolve(cfg.storage, run_dir)
    plan = _plan_summary(cfg, space, sizes)
    if dry_run:
        if as_json:
            print(
                json.dumps(
                    plan | {"run_dir": str(run_dir), "storage": storage_spec.display()},
                    indent=2,
                    sort_keys=True,
                )
            )
        else:
            _print_plan(plan, run_dir, storage_spec)
        return 0
    _check_unchanged(run_dir, cfg)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"run_dir {run_dir}: cannot write there ({exc.strerror})") from None
    # The study's files exist before anything runs, so `sweep status` answers at once.
    # Another orchestrator of the same study may be starting too: one at a time (two
    # processes creating Optuna's tables in a fresh database at once would collide).
    with RunLock(run_dir) as lock:
        storage = open_storage(storage_spec)
        _check_unchanged(run_dir, cfg)
        _write_run_files(run_dir, raw, cfg, space, storage_spec, argv, provenance=not detach)
    lock.close()
    if detach:
        from stepscale.sweeps.detach import submit_orchestrator

        job = submit_orchestrator(cfg, run_dir, overrides, config_dir)
        _print_detached(job, run_dir)
        return 0

    from stepscale.models.train import configure_compile_cache
    from stepscale.sweeps.display import StudyProgress
    from stepscale.sweeps.scheduler import Scheduler

    configure_compile_cache(cfg.train.compile_cache_dir)
    horizons = {label: s["horizon_steps"] for label, s in sizes.items()}
    with StudyProgress(cfg.name, plan) as progress:
        scheduler = Scheduler(cfg, space, run_dir, storage_spec, storage, horizons, progress)
        try:
            stats = scheduler.run()
        except BaseException:  # Ctrl-C, a requeue of a detached orchestrator, a crash
            _finish_provenance(run_dir, complete=False)
            raise
    _finish_provenance(run_dir, complete=not scheduler.stopped)
    if scheduler.stopped:
        print(
            f"sweep: stopped on request (sweep stop); running trials were checkpointed. "
            f"Run the same command again to resume (run dir {run_dir}).",
            file=sys.stderr,
        )
        return 0
    summary = _summary(stats, run_dir)
    print(f"run dir: {run_dir}", file=sys.stderr)
    print(json.dumps(summary, indent=2, sort_keys=True) if as_json else _summary_text(summary))
    return 0


def _print_detached(job: dict[str, Any], run_dir: Path) -> None:
    print(f"submitted orchestrator as SLURM job {job['job_id']} (run dir {run_dir})")
    print(f"  follow:  sweep status {run_dir}    (log: {job['log']})")
    print(f"  stop:    sweep stop {run_dir}")
    print(f"  report:  sweep report {run_dir}")


def _write_run_files(
    run_dir: Path,
    raw: Any,
    cfg: StudyConfig,
    space: SearchSpace,
    storage: StorageSpec,
    argv: list[str],
    provenance: bool = True,
) -> None:
    config_yaml = redact(OmegaConf.to_yaml(raw, resolve=True))
    (run_dir / "config.yaml").write_text(config_yaml)
    (run_dir / "space.json").write_text(dumps_stable(space_document(cfg)))
    saved = read_json(run_dir / "study.json") or {}
    study = {
        "name": cfg.name,
        "fingerprint": _fingerprint(cfg),
        "created": saved.get("created", now_iso()),
        "points": [
            {"label": p.label, "values": _plain(p.values), "index": p.index} for p in space.points
        ],
        "scientific": [{"name": a, "path": s.path} for a, s in cfg.scientific.items()],
        "scientific_values": {
            a: {"values": _plain(list(s.values))} for a, s in cfg.scientific.items()
        },
        "nuisance": [{"name": a, "path": n.path} for a, n in cfg.nuisance.items()],
        "objective": dataclasses.asdict(cfg.objective),
        "budget": dataclasses.asdict(cfg.budget),
    }
    write_json_atomic(run_dir / "study.json", study)
    if provenance:
        _write_provenance(run_dir, storage, argv)


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _summary(stats: list[Any], run_dir: Path) -> dict[str, Any]:
    points = []
    totals: dict[str, int] = {}
    for st in stats:
        points.append(
            {
                "point": st.label,
                "budget": st.budget,
                "best": st.best,
                "steps": st.steps,
                **st.counts,
            }
        )
        for k, v in st.counts.items():
            totals[k] = totals.get(k, 0) + v
    return {"run_dir": str(run_dir), "points": points, "trials": totals}


def _summary_text(summary: dict[str, Any]) -> str:
    lines = [f"study finished: {summary['run_dir']}"]
    for p in summary["points"]:
        best = (
            "—"
            if p["best"] is None
            else (f"{p['best']:.6g}" if math.isfinite(p["best"]) else str(p["best"]))
        )
        lines.append(
            f"  {p['point']:32s} complete {p['complete']:3d}  pruned {p['pruned']:3d}  diverged {p['diverged']:3d}  "
            f"failed {p['failed']:3d}  best {best}  steps {p['steps']}"
        )
    failed = summary["trials"].get("failed", 0)
    if failed:
        lines.append(f"  {failed} trial(s) failed: see trials/*/*/trial.json and logs/")
    return "\n".join(lines)

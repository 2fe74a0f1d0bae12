"""`sweep train conf=NAME [overrides]`: one training run at fixed values.

Writes ``runs/<name>-train/`` (or ``run_dir=``): ``config.yaml``, ``metrics.jsonl``,
``status.json`` and ``checkpoints/``; prints the final status as JSON on stdout.
Re-running the same command resumes from the latest checkpoint; a run dir holding a
different configuration is refused (exit 2) unless ``train.resume=false``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from stepscale.errors import UsageError
from stepscale.loggers import (
    LoggerUnavailable,
    LoggingReporter,
    MetricLoggers,
    RunInfo,
    check_loggers,
    flat_params,
)
from stepscale.redact import redact
from stepscale.reporters import JsonlReporter
from stepscale.rundir import (
    CHECKPOINTS_DIR,
    CONFIG_YAML,
    METRICS_JSONL,
    STATUS_JSON,
    TRAINER_FINAL_STATES,
)
from stepscale.sweeps.run.progress import StepProgress
from stepscale.sweeps.study.compose import compose_config, study_name, to_object


def default_run_dir(name: str) -> Path:
    """``runs/<name>-train`` under the working directory."""
    return Path("runs") / f"{name}-train"


# Keys that change where or how fast a run computes, not what it computes: a run may be
# resumed with other values of them.
_LAYOUT_KEYS = (
    ("run_dir",),
    ("loggers",),
    ("train", "resume"),
    ("train", "compile_cache_dir"),
    ("train", "devices"),
    ("train", "sharding"),
    ("train", "distributed"),
    ("train", "coordinator_address"),
    ("train", "num_processes"),
    ("train", "process_id"),
    ("train", "distributed_timeout_s"),
    ("data", "max_microbatch"),
)


def _comparable(container: Any) -> Any:
    if not isinstance(container, dict):
        raise ValueError("not a mapping")
    # Training does not use the launcher; a run dir from before per-launcher schemas holds
    # every launcher's keys there.
    container.pop("launcher", None)
    for path in _LAYOUT_KEYS:
        node = container
        for key in path[:-1]:
            node = node.get(key, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node.pop(path[-1], None)
    return container


def _check_run_dir(run_dir: Path, config_yaml: str, resume: bool) -> None:
    saved = run_dir / CONFIG_YAML
    if not saved.exists():
        return
    if not resume:
        for stale in (CHECKPOINTS_DIR, METRICS_JSONL, STATUS_JSON):
            path = run_dir / stale
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
        return
    try:
        old = _comparable(OmegaConf.to_container(OmegaConf.create(saved.read_text())))
    except Exception:  # any parse failure: the file is not ours to trust
        raise UsageError(
            f"{saved} is unreadable, so this run dir cannot be resumed safely; pass run_dir=… "
            "for a new run or train.resume=false to start this one over"
        ) from None
    new = _comparable(OmegaConf.to_container(OmegaConf.create(config_yaml)))
    if old != new:
        diff = sorted(_diff_keys(old, new))
        raise UsageError(
            f"{run_dir} holds a run with a different configuration (differs at: {', '.join(diff)}). "
            "Re-run with the same settings to resume it, pass run_dir=… for a new run, "
            "or train.resume=false to start this one over."
        )


def _diff_keys(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        keys = set(a) | set(b)
        return [k for key in keys for k in _diff_keys(a.get(key), b.get(key), f"{prefix}{key}.")]
    return [] if a == b else [prefix.rstrip(".")]


def _run_info(name: str, config_yaml: str) -> RunInfo:
    """How the loggers name a training run: its name, its trainer keys as hyperparameters."""
    tree = OmegaConf.to_container(OmegaConf.create(config_yaml))
    trainer = {k: tree[k] for k in ("model", "data", "optimizer", "schedule", "train") if k in tree}
    return RunInfo(name=name, group=name, tags={"run": name}, params=flat_params(trainer))


def run_train(overrides: list[str], config_dir: str | None, print_cfg: bool) -> int:
    """Compose, validate, train and print the final status; returns the exit code."""
    cfg, choices = compose_config(overrides, config_dir, command="train")
    cfg.name = study_name(cfg.name, choices, "runs/<name>-train")
    if print_cfg:
        print(redact(OmegaConf.to_yaml(cfg)), end="")
        return 0
    if cfg.scientific or cfg.nuisance:
        raise UsageError(
            f"conf={choices['conf']} is a study preset (it has scientific or nuisance "
            f"parameters): run it with `sweep run conf={choices['conf']}`; `sweep train` "
            "trains one config at fixed values (a training preset, e.g. conf=train_smoke)"
        )
    trainer_cfg = to_object(cfg)
    try:
        logger_names = check_loggers(trainer_cfg.loggers)
    except LoggerUnavailable as exc:
        raise UsageError(str(exc)) from None

    from stepscale.sweeps.trainers import builtin  # heavy imports only once the config composed

    try:
        plan = builtin.plan_run(trainer_cfg)
        builtin.configure_compile_cache(trainer_cfg.train.compile_cache_dir)
    except builtin.RejectedConfig as exc:
        raise UsageError(str(exc)) from None
    run_dir = (
        Path(trainer_cfg.run_dir) if trainer_cfg.run_dir else default_run_dir(trainer_cfg.name)
    )
    config_yaml = redact(OmegaConf.to_yaml(cfg, resolve=True))
    _check_run_dir(run_dir, config_yaml, trainer_cfg.train.resume)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / CONFIG_YAML).write_text(config_yaml)
    except OSError as exc:
        raise UsageError(f"run_dir {run_dir}: cannot write there ({exc.strerror})") from None
    loggers = MetricLoggers(logger_names, run_dir, _run_info(trainer_cfg.name, config_yaml))
    with StepProgress(trainer_cfg.name) as progress, loggers:
        reporter = LoggingReporter(JsonlReporter(run_dir), loggers)
        status = builtin.train_config(trainer_cfg, reporter, run_dir, progress=progress, plan=plan)
    print(f"run dir: {run_dir}", file=sys.stderr)
    print(json.dumps(json.loads((run_dir / STATUS_JSON).read_text()), indent=2, sort_keys=True))
    return 0 if status["state"] in TRAINER_FINAL_STATES else 1


def command(args: argparse.Namespace) -> int:
    """`sweep train`."""
    return run_train(args.overrides, args.config_dir, args.cfg)

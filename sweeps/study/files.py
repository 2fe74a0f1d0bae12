"""The study's own files in the run dir (``config.yaml``, ``space.json``, ``study.json``)
and the identity they fix: a study whose settings changed in a way that would mix
incompatible trials is refused (exit 2: use a new ``name``). See docs/run-dir.md.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from stepscale.errors import UsageError
from stepscale.files import BadFileError, read_json, write_json_atomic, write_text_atomic
from stepscale.redact import redact
from stepscale.rundir import ADAPTIVE_JSON, CONFIG_YAML, SPACE_JSON, STUDY_JSON
from stepscale.sweeps.study.adaptive_axis import adaptive_alias
from stepscale.sweeps.study.adaptive_record import restored_space
from stepscale.sweeps.study.schema import StudyConfig
from stepscale.sweeps.study.space import SearchSpace
from stepscale.sweeps.study.space_doc import dumps_stable, space_document
from stepscale.sweeps.study.trials import now_iso
from stepscale.sweeps.trainers.spec import trainer_identity

# Keys that may change between runs of one study: they change how or how much is run,
# not what a trial means. Adding scientific values is handled separately.
MUTABLE = {
    "name", "run_dir", "description", "parallelism", "retries", "keep_checkpoints",
    "heartbeat_timeout_s", "launcher", "storage", "budget.trials_per_point",
    "budget.confirm_seeds", "train.compile_cache_dir", "train.devices", "data.max_microbatch",
    "train.distributed", "train.coordinator_address", "train.num_processes", "train.process_id",
    "train.distributed_timeout_s", "loggers", "objective.claim_level", "objective.report_targets",
    "budget.no_progress_by", "budget.no_progress_min",
}  # fmt: skip


def fingerprint(cfg: StudyConfig) -> dict[str, Any]:
    """The parts of a study that may not change once trials exist."""
    tree = dataclasses.asdict(cfg)
    for key in MUTABLE:
        node = tree
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.get(p, {})
        node.pop(leaf, None)
    for axis in tree["scientific"].values():
        axis.pop("values", None)
        ad = axis.get("adaptive") or {}
        if ad.get("low") is None and ad.get("high") is None:
            axis.pop("adaptive", None)  # off: studies from before adaptive axes have no key
        else:  # how far it may go, not what a trial means
            axis["adaptive"].pop("max_points", None)
            axis["adaptive"].pop("ci_ratio", None)
    if not tree.get("derived"):
        tree.pop("derived", None)  # none: studies from before derived values have no key
    if not tree["sampler"].get("transfer"):
        tree["sampler"].pop("transfer", None)
        tree["sampler"].pop("transfer_width", None)
    if not tree["sampler"].get("transfer_bracket"):
        tree["sampler"].pop("transfer_bracket", None)  # off: studies from before it have no key
    if tree["sampler"].get("lag") == 1:
        tree["sampler"].pop("lag", None)  # the default: studies from before it have no key
    if tree["pruner"].get("name") != "deadline":
        tree["pruner"].pop("deadline_factor", None)
    tree["trainer"] = trainer_identity(cfg.trainer)
    return _plain(tree)


def _diff(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [
            d for k in sorted(set(a) | set(b)) for d in _diff(a.get(k), b.get(k), f"{prefix}{k}.")
        ]
    return [] if a == b else [prefix.rstrip(".")]


def check_unchanged(run_dir: Path, cfg: StudyConfig) -> None:
    """Refuse (`UsageError`) to run ``cfg`` in a run dir that holds another study (another
    name), whose study differs in what a trial means, or whose scientific values were
    removed; a new run dir passes."""
    # Missing and unreadable are told apart by one read: a second look (exists()) would
    # find the file another orchestrator, starting together on a fresh run dir, has just
    # written (study.json is replaced atomically, so a reader never sees half of it).
    unreadable = f"{run_dir}/study.json is unreadable; pass run_dir=… for a new study"
    try:
        saved = read_json(run_dir / STUDY_JSON)
    except BadFileError:
        raise UsageError(unreadable) from None
    if saved is None:
        return
    if not isinstance(saved, dict):
        raise UsageError(unreadable)
    if saved.get("name", cfg.name) != cfg.name:
        # Optuna's studies are named after the study: a second name would put a second
        # study in the run dir's storage while study.json names the first.
        raise UsageError(
            f"name={cfg.name}: the run dir {run_dir} holds the study {saved['name']!r}, and a "
            "run dir holds one study; give the study its own run_dir= (or no run_dir=: "
            f"runs/{cfg.name}), or name={saved['name']} to go on with that one"
        )
    recorded = saved.get("fingerprint")
    if isinstance(recorded, dict) and "trainer" in recorded:
        recorded = {**recorded, "trainer": trainer_identity(recorded["trainer"])}
    changed = _diff(recorded, fingerprint(cfg))
    if changed:
        raise UsageError(
            f"the study in {run_dir} was run with different settings (changed: {', '.join(changed)}). "
            "Trials of different settings must not be mixed: give the study a new name= (or run_dir=). "
            "Only scientific values may be added and trials_per_point raised."
        )
    old = {
        a: s["values"]
        for a, s in saved.get("scientific_values", {}).items()
        if not s.get("adaptive")  # an adaptive axis's points come from adaptive.json
    }
    for alias, values in old.items():
        new = [json.loads(json.dumps(v, default=str)) for v in cfg.scientific[alias].values]
        missing = [v for v in values if v not in new]
        if missing:
            raise UsageError(
                f"scientific.{alias}.values: {missing} were part of this study; values may be added, "
                "not removed (use a new name= for a different grid)"
            )


def make_run_dir(run_dir: Path) -> None:
    """Create the run dir and make sure this process can write there (else `UsageError`)."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        # A name of its own: two orchestrators starting together on a fresh run dir must
        # not remove each other's probe.
        fd, probe = tempfile.mkstemp(dir=run_dir, prefix=".write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"run_dir {run_dir}: cannot write there ({exc.strerror})") from None


def write_study_files(run_dir: Path, raw: Any, cfg: StudyConfig, space: SearchSpace) -> None:
    """Write the composed config (redacted), the search space and ``study.json`` (points in
    order — with those an adaptive axis added so far —, the fingerprint, the scientific
    values; ``created`` kept from the first run)."""
    space = restored_space(cfg, run_dir, space)
    config_yaml = redact(OmegaConf.to_yaml(raw, resolve=True))
    write_text_atomic(run_dir / CONFIG_YAML, config_yaml)
    write_text_atomic(run_dir / SPACE_JSON, dumps_stable(space_document(cfg)))
    saved = read_json(run_dir / STUDY_JSON, lenient=True) or {}
    study = {
        "name": cfg.name,
        "fingerprint": fingerprint(cfg),
        "created": saved.get("created", now_iso()),
        "points": study_points(space),
        "scientific": [{"name": a, "path": s.path} for a, s in cfg.scientific.items()],
        "scientific_values": {
            a: {"values": _plain(list(s.values))}
            if not s.adaptive.enabled
            else {"values": _plain([p.values[a] for p in space.points]), "adaptive": True}
            for a, s in cfg.scientific.items()
        },
        "nuisance": [{"name": a, "path": n.path} for a, n in cfg.nuisance.items()],
        "objective": dataclasses.asdict(cfg.objective),
        "budget": dataclasses.asdict(cfg.budget),
    }
    if adaptive_alias(cfg) is not None:
        study["adaptive"] = ADAPTIVE_JSON
    write_json_atomic(run_dir / STUDY_JSON, study)


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def study_points(space: SearchSpace) -> list[dict[str, Any]]:
    """study.json's ``points``: label, values and grid index of each point, in order."""
    return [
        {
            "label": p.label,
            "values": json.loads(json.dumps(p.values, default=str)),
            "index": p.index,
        }
        for p in space.points
    ]

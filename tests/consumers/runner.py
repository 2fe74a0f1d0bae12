"""Runs exports through their real consumers, inside the consumers' own virtual
environment (tests/consumers/requirements.txt); never imports stepscale.

Reads a JSON list of jobs on stdin, ``{"consumer": "wandb" | "hydra" | "vizier", "id",
"text", "trials"}``, and prints one JSON object: job id → ``{"samples": [{key: value}]}``
or ``{"error": "..."}``. Keys are what each consumer hands a program: W&B's parameter
names, the Hydra config's dotted keys, Vizier's parameter ids (a conditional child under
its own id, beside its parent's value).

- wandb: W&B's sweep engine (``sweeps.next_run``), the config validated against its
  schema, each run told a metric value so that ``bayes`` fits its model.
- hydra: Hydra's Optuna sweeper plugin runs a real multirun of a task that records its
  config, with the sampler the file's defaults list chooses.
- vizier: OSS Vizier parses the StudySpec (``StudyConfig.from_proto``); values are drawn
  from the parameter configs Vizier built (its designers need JAX and take no conditional
  spaces) and each is checked by Vizier's own ``ParameterConfig.contains``.
"""

from __future__ import annotations

import json
import math
import random
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any


def _plain(x: Any) -> Any:
    """numpy scalars and arrays as Python values."""
    if hasattr(x, "tolist"):
        return x.tolist()
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def run_wandb(text: str, trials: int) -> list[dict[str, Any]]:
    import yaml

    import sweeps

    config = yaml.safe_load(text)
    runs: list[Any] = []
    out = []
    metric = (config.get("metric") or {}).get("name", "loss")
    for i in range(trials):
        run = sweeps.next_run(config, runs, validate=True)
        if run is None:  # a grid is exhausted
            break
        out.append({k: _plain(v["value"]) for k, v in run.config.items()})
        run.state = sweeps.RunState.finished
        run.summary_metrics = {metric: float((i * 7919) % 13)}
        runs.append(run)
    return out


def _tree(paths: list[str]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path in paths:
        node = tree
        *parents, leaf = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node.setdefault(leaf, None)
    return tree


def _leaves(cfg: Any, paths: list[str]) -> dict[str, Any]:
    from omegaconf import OmegaConf

    return {p: _plain(OmegaConf.select(cfg, p)) for p in paths}


def run_hydra(text: str, trials: int) -> list[dict[str, Any]]:
    import hydra
    import yaml
    from hydra.core.global_hydra import GlobalHydra

    config = yaml.safe_load(text)
    # A file that leaves choosing the sweeper to its user gets it as its header says.
    config.setdefault("defaults", [{"override hydra/sweeper": "optuna"}])
    paths = list(config["hydra"]["sweeper"]["params"])
    config |= _tree(paths)  # the app's own keys, which the sweeper overrides
    config["hydra"]["sweeper"]["n_trials"] = trials
    samples: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.yaml").write_text(yaml.safe_dump(config))

        def task(cfg: Any) -> float:
            samples.append(_leaves(cfg, paths))
            return float(len(samples) % 5)

        GlobalHydra.instance().clear()
        argv = sys.argv
        sys.argv = ["app", "--multirun", f"hydra.sweep.dir={tmp}/multirun", "hydra/job_logging=none",
                    "hydra/hydra_logging=none", "hydra.output_subdir=null",
                    f"hydra.sweeper.n_jobs={trials}"]  # fmt: skip
        try:
            hydra.main(config_path=tmp, config_name="config", version_base=None)(task)()
        except SystemExit as exc:  # Hydra reports an error and exits
            raise RuntimeError(f"hydra exited with {exc.code}") from None
        finally:
            sys.argv = argv
            GlobalHydra.instance().clear()
    return samples


def _draw(pc: Any, rng: random.Random) -> Any:
    """A value of a Vizier ParameterConfig, drawn uniformly on its scale."""
    from vizier.service import pyvizier as vz

    if pc.type in (vz.ParameterType.CATEGORICAL, vz.ParameterType.DISCRETE):
        return rng.choice(list(pc.feasible_values))
    low, high = pc.bounds
    u = rng.random() if rng.random() > 0.1 else rng.choice([0.0, 1.0])  # ends too
    if pc.scale_type == vz.ScaleType.LOG:
        x = math.exp(math.log(low) + u * (math.log(high) - math.log(low)))
    elif pc.scale_type == vz.ScaleType.REVERSE_LOG:
        x = 1.0 - math.exp(math.log(1.0 - high) + u * (math.log(1.0 - low) - math.log(1.0 - high)))
    else:
        x = low + u * (high - low)
    x = min(max(x, low), high)
    return round(x) if pc.type == vz.ParameterType.INTEGER else x


def _sample_space(space: Any, rng: random.Random, out: dict[str, Any]) -> None:
    for pc in space.parameters:
        value = _draw(pc, rng)
        if not pc.contains(value):  # Vizier's own check of its own bounds
            raise AssertionError(f"{pc.name}={value} is not feasible for Vizier: {pc}")
        out[pc.name] = value
        if pc.child_parameter_configs:
            _sample_space(pc.subspace(value), rng, out)


def run_vizier(text: str, trials: int) -> list[dict[str, Any]]:
    from google.protobuf import json_format
    from vizier._src.service import study_pb2
    from vizier.service import pyvizier as vz

    spec = json_format.Parse(text, study_pb2.StudySpec())
    study = vz.StudyConfig.from_proto(spec)
    rng = random.Random(0)
    samples = []
    for _ in range(trials):
        out: dict[str, Any] = {}
        _sample_space(study.search_space, rng, out)
        samples.append(out)
    return samples


RUNNERS = {"wandb": run_wandb, "hydra": run_hydra, "vizier": run_vizier}


def main() -> None:
    """Run every job of stdin; print the results as one JSON object."""
    results: dict[str, Any] = {}
    for job in json.load(sys.stdin):
        try:
            samples = RUNNERS[job["consumer"]](job["text"], job["trials"])
            results[job["id"]] = {"samples": samples}
        except Exception as exc:  # reported to the test, which fails with it
            results[job["id"]] = {"error": f"{exc!r}\n{traceback.format_exc()}"}
    sys.stdout.flush()
    print("\n" + json.dumps(results, allow_nan=True))


if __name__ == "__main__":
    main()

"""Bad input to every `sweep` command, as a table: each case exits 2 (1 for the environment)
with a one-paragraph message, no traceback, nothing on stdout and nothing written — neither
in the working directory (where `runs/` would go) nor among the input files.

The commands run in this process (`stepscale.cli.main.main`); only the report that
cannot be written runs as its own process, under a file-size limit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from run_dirs import Spec
from run_dirs import make_run_dir as synthetic_run_dir

from stepscale.cli.main import main

PASSWORD = "S3cr3tPW"
PG_URL = f"postgresql://user:{PASSWORD}@127.0.0.1:1/db"
HEADER = "# @package _global_\n"
GROUP_STUDY = HEADER + "defaults:\n  - train_smoke\n  - override /model: mine\n  - _self_\n"
BIG = str(10**23)  # no count of this size can be meant


@dataclass(frozen=True)
class Case:
    """``argv`` of `sweep` ({i} is the inputs folder), a word the message must hold, the
    exit code (1: the environment failed, e.g. no SLURM controller answers)."""

    argv: tuple[str, ...]
    says: str
    code: int = 2


def case(*argv: str, says: str, code: int = 2) -> Case:
    return Case(argv, says, code)


SMOKE = ("run", "conf=smoke")
TRAIN = ("train", "conf=train_smoke")
EXPORT = ("export", "conf=smoke")
FIT_STEPS = ("fit", "steps", "--csv", "{i}/t.csv", "--batch-col", "b", "--steps-col", "s")
FIT_HP = ("fit", "hparams", "--csv", "{i}/hp.csv", "--loss-col", "loss", "--hparams", "lr")
BRANCH = ("branch", "{i}/study")
REPLAY = ("replay", "{i}/study")
PREDICT = ("predict", "--csv", "{i}/hp.csv")
IMPORT = ("import", "{i}/space.json", "--format", "stepscale")
SLURM = (*SMOKE, "launcher=slurm")
INT_PARAM = "+nuisance.warm={path: schedule.warmup_steps, type: int, low: 0, high: 10"

# The cases by class of bad input (the keys of CLASSES), each class by sub-command.
CLASSES: dict[str, dict[str, Case]] = {}

# What the config is made of: unknown presets and keys, wrong types, the user's presets.
CLASSES["composition"] = {
    "run without conf": case("run", says="conf"),
    "run of an unknown conf": case("run", "conf=nope", says="nope"),
    "run with a typo'd key": case(*SMOKE, "budget.trials_per_pont=2", says="trials_per_pont"),
    "run adding an unknown key": case(*SMOKE, "+budget.extra=1", says="budget.extra"),
    "run: a training preset": case("run", "conf=train_smoke", says="sweep train conf=train_smoke"),
    "run: nothing to tune": case(*SMOKE, "~nuisance.lr", says="nothing to tune"),
    "run: a parameter added not whole": case(*SMOKE, "+nuisance.b2=3", says="mapping"),
    "run: an added parameter's typo": case(
        *SMOKE, "+nuisance.b2={path: optimizer.b2, typo: 1}", says="nuisance.b2.typo"
    ),
    "run: an added parameter's bad type": case(
        *SMOKE, "+nuisance.b2={path: optimizer.b2, type: flot}", says="nuisance.b2.type"
    ),
    "run: a parameter of no trainer key": case(
        *SMOKE, "+fixed.x={path: optimizer.nope, value: 1}", says="optimizer.nope"
    ),
    "run: unclosed list": case(*SMOKE, "scientific.batch_size.values=[8,", says="[8,"),
    "run: a word for a number": case(*SMOKE, "parallelism=many", says="parallelism"),
    "run: unknown objective": case(*SMOKE, "objective.kind=accuracy", says="objective.kind"),
    "run: unknown sampler": case(*SMOKE, "sampler.name=cmaes", says="sampler.name"),
    "run: unknown pruner": case(*SMOKE, "pruner.name=never", says="pruner.name"),
    "run: unknown sampler group": case(*SMOKE, "sampler=cmaes", says="cmaes"),
    "run: two horizons": case(*SMOKE, "budget.max_tokens=4096", says="budget"),
    "run: batch the trainer rejects": case(
        *SMOKE, "scientific.batch_size.values=[8,0]", says="batch_size=0"
    ),
    "run: steps_to_target without a target": case(
        *SMOKE, "objective.target_loss=null", "objective.kind=steps_to_target", says="target_loss"
    ),
    "run: deadline pruner without stop_at_target": case(
        *SMOKE, "pruner=deadline", says="pruner=deadline"
    ),
    "run: unknown logger": case(*SMOKE, "loggers=[nope]", says="nope"),
    "run: malformed YAML study": case(
        "run", "conf=malformed", "--config-dir", "{i}/cd", says="malformed.yaml"
    ),
    "run: study without its package line": case(
        "run", "conf=headless", "--config-dir", "{i}/cd", says="@package _global_"
    ),
    "run: missing --config-dir": case(*SMOKE, "--config-dir", "{i}/nope", says="--config-dir"),
    "train: unknown conf": case("train", "conf=nope", says="nope"),
    "train: a word for a number": case(*TRAIN, "optimizer.lr=fast", says="optimizer.lr"),
    "train: typo'd key": case(*TRAIN, "train.max_step=5", says="max_step"),
    "train --cfg with a typo": case(*TRAIN, "optimizer.lrr=1", "--cfg", says="lrr"),
    "train: 10 TB of attention scores": case(*TRAIN, "data.seq_len=100000", says="data.seq_len"),
    "train: unknown optimizer": case(*TRAIN, "optimizer=nope", says="nope"),
    "export without conf": case("export", says="conf"),
    "export of an unknown conf": case("export", "conf=nope", says="nope"),
    "export with a typo'd key": case(*EXPORT, "budget.trials_per_pont=2", says="trials_per_pont"),
    "export of a training preset": case("export", "conf=train_smoke", says="scientific"),
}

# Hydra's habits, and messages that came from the wrong layer (Hydra's lexer, its
# exceptions) instead of the rule that applies.
CLASSES["habits"] = {
    "run: a preset without conf=": case("run", "smoke", says="sweep run conf=smoke"),
    "train: a preset without conf=": case("train", "train_smoke", says="conf=train_smoke"),
    "export: a preset without conf=": case("export", "smoke", says="conf=smoke"),
    "run: hydra.run.dir": case(*SMOKE, "hydra.run.dir=/tmp/x", says="run_dir=PATH"),
    "run: hydra.job.name": case(*SMOKE, "hydra.job.name=x", says="name=NAME"),
    "run: hydra.verbose": case(*SMOKE, "hydra.verbose=true", says="hydra.verbose"),
    "train: hydra.run.dir": case(*TRAIN, "hydra.run.dir=/tmp/x", says="run_dir=PATH"),
    "run: -m": case(*SMOKE, "-m", says="scientific.<axis>.values"),
    "run: --multirun": case("run", "--multirun", "conf=smoke", says="multirun"),
    "run: a comma sweep": case(*SMOKE, "nuisance.lr.low=1e-3,1e-2", says="multirun"),
    "train: a comma sweep": case(*TRAIN, "optimizer.lr=1e-3,1e-2", says="multirun"),
    "run: a study preset to train": case("train", "conf=smoke", says="sweep run conf=smoke"),
    "run: override without '='": case(*SMOKE, "budget.trials_per_point", says="override"),
    "run: a non-ASCII name": case(*SMOKE, "name=café", says="plain name"),
    "run: a non-ASCII name in quotes": case(*SMOKE, "name='café'", says="plain name"),
    "run: a non-ASCII name in another script": case(*SMOKE, "name=研究", says="plain name"),
    "train: a non-ASCII name": case(*TRAIN, "name=café", says="plain name"),
    "export: a non-ASCII name": case(*EXPORT, "name=café", says="plain name"),
    "run: a non-ASCII value unquoted": case(*SMOKE, "description=café", says="quotes"),
    "train: a non-ASCII value unquoted": case(*TRAIN, "description=café", says="quotes"),
    "run: a non-ASCII key": case(*SMOKE, "cafè=1", says="not a config key"),
}

# A study's name is no path (run_dir= chooses one).
CLASSES["paths"] = {
    "run: name leaving runs/": case(*SMOKE, "name=../escaped_study", says="run_dir="),
    "run: empty name": case(*SMOKE, "name=", says="run_dir="),
    "run: absolute name": case(*SMOKE, "name={i}/elsewhere", says="run_dir="),
    "run: name with a slash": case(*SMOKE, "name=a/b", says="run_dir="),
    "run: name '..'": case(*SMOKE, "name=..", says="run_dir="),
    "run: name with a space": case(*SMOKE, "name='a b'", says="plain name"),
    "run: run dir below a file": case(*SMOKE, "run_dir={i}/t.csv/run", says="run_dir"),
    "train: name leaving runs/": case(*TRAIN, "name=../escaped", says="run_dir="),
    "train: empty name": case(*TRAIN, "name=", says="run_dir="),
    "export -o below a file": case(*EXPORT, "-o", "{i}/t.csv/x.json", says="-o"),
    "import -o below a file": case(*IMPORT, "-o", "{i}/t.csv/x.yaml", says="-o"),
    "branch --trial as a path": case(*BRANCH, "--trial", "../../x/1", says="--trial"),
}

# Files given to a command that cannot be read, or are damaged.
CLASSES["files"] = {
    "run: non-UTF-8 study": case("run", "conf=latin1", "--config-dir", "{i}/cd", says="UTF-8"),
    "run: empty study file": case(
        "run", "conf=empty", "--config-dir", "{i}/cd", says="empty.yaml is empty"
    ),
    "run: study file holding a list": case(
        "run", "conf=listed", "--config-dir", "{i}/cd", says="mapping"
    ),
    "train: malformed YAML group file": case(
        "train", "conf=study", "--config-dir", "{i}/cd_yaml", says="mine.yaml"
    ),
    "train: non-UTF-8 group file": case(
        "train", "conf=study", "--config-dir", "{i}/cd_bytes", says="mine.yaml"
    ),
    "status of a missing run dir": case("status", "{i}/nope", says="no such run dir"),
    "status of a file": case("status", "{i}/t.csv", says="t.csv"),
    "status of a folder that is no study": case("status", "{i}/empty_dir", says="study.json"),
    "status: study.json missing keys": case("status", "{i}/keys_missing", says="budget"),
    "status: study.json holding a list": case("status", "{i}/listed", says="list"),
    "status: study.json not JSON": case("status", "{i}/not_json", says="study.json"),
    "status: points not a list": case("status", "{i}/points_bad", says="points"),
    "status: a point label that is a path": case("status", "{i}/label_path", says="label"),
    "status: a budget that is no count": case("status", "{i}/budget_bad", says="trials_per_point"),
    "status: no objective kind": case("status", "{i}/objective_bad", says="objective.kind"),
    "stop of a missing run dir": case("stop", "{i}/nope", says="study.json"),
    "stop of a folder that is no study": case("stop", "{i}/empty_dir", says="study.json"),
    "stop of a file": case("stop", "{i}/t.csv", says="study.json"),
    "report of a missing run dir": case("report", "{i}/nope", says="does not exist"),
    "report of a folder without trials": case("report", "{i}/empty_dir", says="no trials"),
    "report: report/ is a file": case("report", "{i}/report_is_a_file", says="not a directory"),
    "report of a file": case("report", "{i}/t.csv", says="t.csv"),
    "replay of a missing run dir": case("replay", "{i}/nope", says="nope"),
    "replay of a folder without trials": case("replay", "{i}/empty_dir", says="empty_dir"),
    "branch of a missing run dir": case("branch", "{i}/nope", says="not a study run dir"),
    "branch of a folder that is no study": case(
        "branch", "{i}/empty_dir", says="not a study run dir"
    ),
    "branch: a trial without its config": case(*BRANCH, says="config.json"),
    "branch: an unknown trial": case(*BRANCH, "--trial", "batch_size=16/9", says="--trial"),
    "branch: config.yaml not a study": case("branch", "{i}/bad_config", says="config.yaml"),
    "import of a missing file": case(
        "import", "{i}/nope.json", "--format", "stepscale", says="cannot read"
    ),
    "import of a folder": case(
        "import", "{i}/empty_dir", "--format", "stepscale", says="cannot read"
    ),
    "import of a non-UTF-8 file": case(
        "import", "{i}/latin1.json", "--format", "stepscale", says="latin1.json"
    ),
    "import of invalid JSON": case(
        "import", "{i}/broken.json", "--format", "stepscale", says="broken.json"
    ),
    "import of an empty file": case(
        "import", "{i}/empty.csv", "--format", "stepscale", says="empty.csv"
    ),
    "import of a JSON list": case("import", "{i}/list.json", "--format", "optuna", says="list.json"),
    "import of another format's file": case(
        "import", "{i}/space.json", "--format", "optuna", says="space.json"
    ),
    "import of invalid YAML": case(
        "import", "{i}/cd/conf/malformed.yaml", "--format", "wandb", says="malformed.yaml"
    ),
    "fit steps of a missing CSV": case(
        "fit", "steps", "--csv", "{i}/nope.csv", "--batch-col", "b", "--steps-col", "s",
        says="nope.csv",
    ),
    "fit steps of a non-UTF-8 CSV": case(
        "fit", "steps", "--csv", "{i}/latin1.csv", "--batch-col", "b", "--steps-col", "s",
        says="latin1.csv",
    ),
    "fit steps of an empty CSV": case(
        "fit", "steps", "--csv", "{i}/empty.csv", "--batch-col", "b", "--steps-col", "s",
        says="empty",
    ),
    "fit steps of a folder": case(
        "fit", "steps", "--csv", "{i}/empty_dir", "--batch-col", "b", "--steps-col", "s",
        says="empty_dir",
    ),
    "fit steps: unknown column": case(
        "fit", "steps", "--csv", "{i}/t.csv", "--batch-col", "batch", "--steps-col", "s",
        says="batch",
    ),
    "fit steps: words for steps": case(
        "fit", "steps", "--csv", "{i}/words.csv", "--batch-col", "b", "--steps-col", "s",
        says="s",
    ),
    "fit hparams: unknown column": case(*FIT_HP, "--by", "width", says="width"),
    "fit hparams of a missing CSV": case(
        "fit", "hparams", "--csv", "{i}/nope.csv", "--loss-col", "loss", "--hparams", "lr",
        "--by", "batch", says="nope.csv",
    ),
    "list of a missing --config-dir": case("list", "--config-dir", "{i}/nope", says="--config-dir"),
    "list of a non-UTF-8 preset": case("list", "--config-dir", "{i}/cd", says="latin1.yaml"),
    "list of a file as --config-dir": case("list", "--config-dir", "{i}/t.csv", says="t.csv"),
}  # fmt: skip

# Storage and launcher: refused before the run dir (or a lock file) exists. A SLURM
# controller that does not answer is the environment's failure (exit 1).
CLASSES["writes"] = {
    "run: password in storage.url": case(
        *SMOKE, "storage=postgres", f"storage.url={PG_URL}", says="PGPASSWORD"
    ),
    "run: typo'd key holding a password": case(
        *SMOKE, f"storage.urll={PG_URL}", says="storage.urll"
    ),
    "run: unknown storage": case(*SMOKE, "storage.name=redis", says="storage.name"),
    "run: a MySQL URL for postgres": case(
        *SMOKE, "storage=postgres", "storage.url=mysql://u@127.0.0.1/db", says="not a PostgreSQL"
    ),
    "run: a SQLite URL for postgres": case(
        *SMOKE, "storage=postgres", "storage.url=sqlite:///x.db", says="not a PostgreSQL"
    ),
    "run: a URL that does not parse": case(
        *SMOKE, "storage=postgres", "storage.url=postgresql://u@h:port/db", says="cannot parse"
    ),
    "run: a server that is not there": case(
        *SMOKE, "storage=postgres", "storage.url=postgresql://u@127.0.0.1:1/db",
        says="cannot reach",
    ),
    "run: postgres without a URL": case(*SMOKE, "storage=postgres", says="needs a URL"),
    "run: postgres URL variable unset": case(
        *SMOKE, "storage=postgres", "storage.url_env=STEPSCALE_NO_SUCH_VAR",
        says="STEPSCALE_NO_SUCH_VAR",
    ),
    "run: SQLite file in a missing folder": case(
        *SMOKE, "storage=sqlite", "storage.url=sqlite:///{i}/nope/x.db", says="storage.url"
    ),
    "run: SQLite file that is not a database": case(
        *SMOKE, "storage=sqlite", "storage.url=sqlite:///{i}/t.csv", says="not a SQLite"
    ),
    "run: SQLite file that is a folder": case(
        *SMOKE, "storage=sqlite", "storage.url=sqlite:///{i}/empty_dir", says="is a folder"
    ),
    "run: a postgres URL for sqlite": case(
        *SMOKE, "storage=sqlite", "storage.url=postgresql://u@h/db", says="sqlite:///"
    ),
    "run: journal file that is a folder": case(
        *SMOKE, "storage.url={i}/empty_dir", says="is a folder"
    ),
    "run: journal file below a file": case(
        *SMOKE, "storage.url={i}/t.csv/j.log", says="not a folder"
    ),
    "run: unknown launcher": case(*SMOKE, "launcher.name=foo", says="launcher.name"),
    "run: a key of another launcher": case(
        *SMOKE, "launcher.partition=gpu", says="launcher.partition: launcher=local has no key"
    ),
    "run: a key of another launcher added": case(
        *SLURM, "+launcher.pin_cpus=false", says="launcher.pin_cpus: launcher=slurm has no key"
    ),
    "run: a key no launcher has": case(*SLURM, "launcher.partiton=gpu", says="launcher.partiton"),
    "run: SLURM without a controller": case(*SLURM, says="sbatch", code=1),
    "run: SLURM partition without a controller": case(
        *SLURM, "launcher.partition=gpu", says="sbatch", code=1
    ),
    "run --detach without a controller": case(*SLURM, "--detach", says="sbatch", code=1),
    "run: --detach without SLURM": case(*SMOKE, "--detach", says="--detach"),
    "run: --detach with --report": case(*SLURM, "--detach", "--report", says="--report"),
    "run: a queue of trials off SLURM": case(
        *SMOKE, "launcher.trials_per_job=4", says="launcher.trials_per_job"
    ),
    "run: no trial per job": case(*SLURM, "launcher.trials_per_job=0", says="trials_per_job"),
    "run: a worker's memory limit of 0": case(
        *SMOKE, "launcher.worker_max_rss_gb=0", says="launcher.worker_max_rss_gb"
    ),
    "run: negative worker trials": case(
        *SMOKE, "launcher.worker_max_trials=-1", says="launcher.worker_max_trials"
    ),
    "run: zero nodes": case(*SLURM, "launcher.nodes=0", says="launcher.nodes"),
    "run: zero tasks per node": case(*SLURM, "launcher.tasks_per_node=0", says="tasks_per_node"),
    "run: zero array parallelism": case(
        *SLURM, "launcher.array_parallelism=0", says="launcher.array_parallelism"
    ),
    "run: zero time limit": case(*SLURM, "launcher.time_min=0", says="launcher.time_min"),
    "run: zero local timeout": case(*SMOKE, "launcher.timeout_min=0", says="launcher.timeout_min"),
    "run: negative requeues": case(*SLURM, "launcher.max_requeues=-1", says="max_requeues"),
    "run: negative signal delay": case(*SLURM, "launcher.signal_delay_s=-5", says="signal_delay"),
    "run: no state polling": case(*SLURM, "launcher.state_poll_s=0", says="state_poll_s"),
    "run: negative poll": case(*SMOKE, "launcher.poll_s=-1", says="launcher.poll_s"),
    "run: no memory": case(*SLURM, "launcher.mem_gb=0", says="launcher.mem_gb"),
    "run: no CPUs": case(*SLURM, "launcher.cpus_per_task=0", says="launcher.cpus_per_task"),
    "run: negative GPUs": case(*SMOKE, "launcher.gpus_per_trial=-1", says="gpus_per_trial"),
    "run: GPUs that do not split over nodes": case(
        *SLURM, "launcher.nodes=2", "launcher.gpus_per_trial=3", says="gpus_per_trial"
    ),
}  # fmt: skip

# One run dir holds one study: another name, changed settings, a removed value.
CLASSES["identity"] = {
    "run: another name in a study's run dir": case(
        *SMOKE, "name=other", "run_dir={i}/base", says="holds the study 'smoke'"
    ),
    "run --dry-run: another name in a study's run dir": case(
        *SMOKE, "name=other", "run_dir={i}/base", "--dry-run", says="holds the study"
    ),
    "run: another preset in a study's run dir": case(
        "run", "conf=mine", "--config-dir", "{i}/cd_ok", "run_dir={i}/base", says="'smoke'"
    ),
    "run: a changed target in a study's run dir": case(
        *SMOKE, "run_dir={i}/base", "objective.target_loss=9", says="different settings"
    ),
    "run: a changed range in a study's run dir": case(
        *SMOKE, "run_dir={i}/base", "nuisance.lr.high=0.1", says="nuisance.lr.high"
    ),
    "run: a removed value in a study's run dir": case(
        *SMOKE, "run_dir={i}/base", "scientific.batch_size.values=[8]", says="[16]"
    ),
    "run --dry-run: a removed value": case(
        *SMOKE, "run_dir={i}/base", "scientific.batch_size.values=[8]", "--dry-run", says="[16]"
    ),
    "run: a run dir of a study named otherwise": case(
        *SMOKE, "run_dir={i}/keys_missing", says="holds the study 'x'"
    ),
    "run: a run dir whose study.json is a list": case(
        *SMOKE, "run_dir={i}/listed", says="unreadable"
    ),
    "run: a run dir whose study.json is not JSON": case(
        *SMOKE, "run_dir={i}/not_json", says="unreadable"
    ),
}

# Counts, ranges, sizes and overwrites that cannot be meant.
CLASSES["meaning"] = {
    "run: zero parallelism": case(*SMOKE, "parallelism=0", says="parallelism"),
    "run: absurd parallelism": case(*SMOKE, f"parallelism={BIG}", says="parallelism"),
    "run: negative retries": case(*SMOKE, "retries=-1", says="retries"),
    "run: no trials": case(*SMOKE, "budget.trials_per_point=0", says="trials_per_point"),
    "run: 10^23 trials per point": case(
        *SMOKE, f"budget.trials_per_point={BIG}", says="budget.trials_per_point"
    ),
    "run --dry-run: 10^23 trials per point": case(
        *SMOKE, f"budget.trials_per_point={BIG}", "--dry-run", says="budget.trials_per_point"
    ),
    "run: negative confirm seeds": case(*SMOKE, "budget.confirm_seeds=-1", says="confirm_seeds"),
    "run: absurd confirm seeds": case(*SMOKE, f"budget.confirm_seeds={BIG}", says="confirm_seeds"),
    "run: no-progress check past the horizon": case(
        *SMOKE, "budget.no_progress_by=1.5", says="budget.no_progress_by"
    ),
    "run: no-progress minimum of the whole way": case(
        *SMOKE, "budget.no_progress_min=1", says="budget.no_progress_min"
    ),
    "run: no heartbeat timeout": case(*SMOKE, "heartbeat_timeout_s=0", says="heartbeat_timeout_s"),
    "run: a float step wider than its range": case(
        *SMOKE, "nuisance.lr.scale=linear", "+nuisance.lr.step=0.5", says="nuisance.lr.step"
    ),
    "run: an int step wider than its range": case(
        *SMOKE, INT_PARAM + ", step: 20}", says="nuisance.warm.step"
    ),
    "run: an int range of one value": case(*SMOKE, INT_PARAM[:-2] + "0}", says="low < high"),
    "run: a zero step": case(*SMOKE, INT_PARAM + ", step: 0}", says="nuisance.warm.step"),
    "run: a fractional int step": case(*SMOKE, INT_PARAM + ", step: 0.5}", says="whole"),
    "run: low above high": case(*SMOKE, "nuisance.lr.low=0.1", says="low < high"),
    "run: log range from 0": case(
        *SMOKE, "nuisance.lr.low=0", "nuisance.lr.high=1", says="log scale"
    ),
    "run: an infinite bound": case(*SMOKE, "nuisance.lr.high=inf", says="nuisance.lr"),
    "run: a step on a log float": case(*SMOKE, "+nuisance.lr.step=0.001", says="log scale"),
    "run: no categorical choices": case(
        *SMOKE, "+nuisance.opt={path: optimizer.name, type: categorical, choices: []}",
        says="choices",
    ),
    "train: a negative spike rewind": case(
        *TRAIN, "train.on_spike.rewind_steps=-1", says="train.on_spike.rewind_steps"
    ),
    "run: negative batches to skip": case(
        *SMOKE, "train.on_spike.skip_batches=-1", says="train.on_spike.skip_batches"
    ),
    "run: negative restarts": case(
        *SMOKE, "train.on_spike.max_restarts=-1", says="train.on_spike.max_restarts"
    ),
    "run: a spike policy on a command trainer": case(
        *SMOKE, "trainer={command:[python,x.py]}", "train.on_spike.policy=restart",
        says="train.on_spike.policy",
    ),
    "run: a spike policy on a function trainer": case(
        *SMOKE, "trainer={target:'json:loads'}", "train.on_spike.policy=restart",
        says="train.on_spike.policy",
    ),
    "run: negative pruner start-up trials": case(
        *SMOKE, "pruner.n_startup_trials=-1", says="pruner.n_startup_trials"
    ),
    "run: negative pruner warm-up steps": case(
        *SMOKE, "pruner.n_warmup_steps=-1", says="pruner.n_warmup_steps"
    ),
    "run: a pruner's resource of 0 steps": case(
        *SMOKE, "pruner=hyperband", "pruner.min_resource=0", says="pruner.min_resource"
    ),
    "run: a reduction factor of 1": case(
        *SMOKE, "pruner=hyperband", "pruner.reduction_factor=1", says="reduction_factor"
    ),
    "run: a deadline factor below 1": case(
        *SMOKE, "pruner=deadline", "pruner.deadline_factor=0.5", says="deadline_factor"
    ),
    "run: negative sampler start-up trials": case(
        *SMOKE, "sampler.n_startup_trials=-2", says="sampler.n_startup_trials"
    ),
    "run: a negative sampler lag": case(*SMOKE, "sampler.lag=-1", says="sampler.lag"),
    "run: a grid bigger than its points": case(
        *SMOKE, "sampler=grid", "nuisance.lr.scale=linear", "nuisance.lr.low=0.01", "+nuisance.lr.step=0.01",
        "budget.trials_per_point=9", says="budget.trials_per_point=9",
    ),
    "run: a grid over a continuous range": case(*SMOKE, "sampler=grid", says="grid"),
    "train: negative horizon": case(*TRAIN, "train.max_steps=-1", says="train.max_steps"),
    "train: negative learning rate": case(*TRAIN, "optimizer.lr=-1", says="optimizer.lr"),
    "train: no batch": case(*TRAIN, "data.global_batch=0", says="global_batch"),
    "export: 10^23 trials per point": case(
        *EXPORT, f"budget.trials_per_point={BIG}", says="budget.trials_per_point"
    ),
    "export: a step wider than its range": case(
        *EXPORT, "nuisance.lr.scale=linear", "+nuisance.lr.step=0.5", says="nuisance.lr.step"
    ),
    "export -o over an existing file": case(*EXPORT, "-o", "{i}/mine.yaml", says="--force"),
    "export -o onto a folder": case(*EXPORT, "-o", "{i}/empty_dir", "--force", says="folder"),
    "import -o over an existing file": case(*IMPORT, "-o", "{i}/mine.yaml", says="--force"),
    "import -o over a file of bad input": case(
        "import", "{i}/broken.json", "--format", "stepscale", "-o", "{i}/mine.yaml",
        says="--force",
    ),
    "import -o onto a folder": case(*IMPORT, "-o", "{i}/empty_dir", says="folder"),
    "stop: a word for the timeout": case("stop", "{i}/listed", "--timeout", "soon", says="--timeout"),
    "stop: negative timeout": case("stop", "{i}/listed", "--timeout", "-1", says="--timeout"),
    "stop: NaN timeout": case("stop", "{i}/listed", "--timeout", "nan", says="--timeout"),
    "report: non-finite target": case("report", "{i}/study", "--target", "nan", says="--target"),
    "report: a word for the target": case(
        "report", "{i}/study", "--target", "low", says="--target"
    ),
    "replay: no draws": case(*REPLAY, "--draws", "0", says="--draws"),
    "replay: negative draws": case(*REPLAY, "--draws", "-3", says="--draws"),
    "replay: 10^11 draws": case(*REPLAY, "--draws", str(10**11), says="--draws"),
    "replay: a negative seed": case(*REPLAY, "--seed", "-1", says="--seed"),
    "replay: infinite target": case(*REPLAY, "--target", "inf", says="--target"),
    "replay: unknown protocol": case(*REPLAY, "--protocol", "bogus", says="bogus"),
    "replay: a protocol's bad count": case(*REPLAY, "--protocol", "first:0", says="first"),
    "branch: a factor of 0": case(*BRANCH, "--factors", "0", says="--factors"),
    "branch: a factor below 1": case(*BRANCH, "--factors", "0.5", says="--factors"),
    "branch: an infinite factor": case(*BRANCH, "--factors", "inf", says="--factors"),
    "branch: an LR multiplier of 0": case(*BRANCH, "--lr-multipliers", "0", says="--lr-mult"),
    "branch: a tolerance of 1": case(*BRANCH, "--tolerance", "1", says="--tolerance"),
    "branch: a negative window": case(*BRANCH, "--window-examples", "-1", says="--window"),
    "branch: a negative step": case(*BRANCH, "--steps", "-1", says="--steps"),
    "fit steps --n-boot 1e12": case(*FIT_STEPS, "--n-boot", "1e12", says="--n-boot"),
    "fit steps --n-boot 10**12": case(*FIT_STEPS, "--n-boot", str(10**12), says="--n-boot"),
    "fit steps: negative --n-boot": case(*FIT_STEPS, "--n-boot", "-1", says="--n-boot"),
    "fit steps: negative seed": case(*FIT_STEPS, "--seed", "-1", says="--seed"),
    "fit steps: negative overhead": case(*FIT_STEPS, "--overhead", "-1", says="--overhead"),
    "fit hparams: negative band": case(*FIT_HP, "--by", "batch", "--band", "-1", says="--band"),
    "fit hparams: bad --law": case(*FIT_HP, "--by", "batch", "--law", "lr", says="--law"),
    "fit hparams --n-boot 10**12": case(
        *FIT_HP, "--by", "batch", "--n-boot", str(10**12), says="--n-boot"
    ),
    "predict: a negative N": case(*PREDICT, "--n", "-1", "--d", "1e9", "--devices", "8", says="--n"),
    "predict: a non-finite D": case(*PREDICT, "--n", "1e8", "--d", "inf", "--devices", "8", says="--d"),
    "predict: zero devices": case(*PREDICT, "--n", "1e8", "--d", "1e9", "--devices", "0", says="--devices"),
    "predict: a study that is no ladder": case(
        "predict", "{i}/study", "--n", "1e8", "--d", "1e9", "--devices", "8", says="not a ladder"
    ),
    "predict: no such source": case(
        "predict", "{i}/nope", "--n", "1e8", "--d", "1e9", "--devices", "8", says="no such run dir"
    ),
    "predict: a JSON that holds no laws": case(
        "predict", "{i}/listed/study.json", "--n", "1e8", "--d", "1e9", "--devices", "8",
        says="not a ladder's laws",
    ),
}  # fmt: skip

# Inputs that used to end in a traceback.
CLASSES["tracebacks"] = {
    "run: an override without a key": case(*SMOKE, "=5", says="key before '='"),
    "run: an added override without a key": case(*SMOKE, "+=5", says="key before '='"),
    "train: an override without a key": case(*TRAIN, "=5", says="key before '='"),
    "export: an override without a key": case(*EXPORT, "=5", says="key before '='"),
    "import of deeply nested JSON": case(
        "import", "{i}/deep.json", "--format", "stepscale", says="nested too deeply"
    ),
    "import of deeply nested JSON as optuna": case(
        "import", "{i}/deep.json", "--format", "optuna", says="nested too deeply"
    ),
    "import of deeply nested JSON as vizier": case(
        "import", "{i}/deep.json", "--format", "vizier", says="nested too deeply"
    ),
    "replay: a seed numpy refuses": case(*REPLAY, "--seed", "-5", says="--seed"),
    "report of a study.json holding a list": case("report", "{i}/listed", says="listed"),
    "status of a study.json of the wrong types": case("status", "{i}/types_bad", says="study"),
}

# The command line itself (argparse).
CLASSES["usage"] = {
    "no command": case(says="command"),
    "unknown command": case("frobnicate", says="frobnicate"),
    "misspelt option": case("--verison", says="--verison"),
    "run: unknown option": case(*SMOKE, "--bogus", says="--bogus"),
    "train: unknown option": case(*TRAIN, "--dry-run", says="--dry-run"),
    "status without a run dir": case("status", says="run_dir"),
    "status: two run dirs": case("status", "{i}/study", "{i}/study", says="unrecognized"),
    "stop without a run dir": case("stop", says="run_dir"),
    "report without a run dir": case("report", says="RUN_DIR"),
    "replay: a word for draws": case(*REPLAY, "--draws", "many", says="--draws"),
    "branch: words for factors": case(*BRANCH, "--factors", "two", says="--factors"),
    "branch: unknown LR rule": case(*BRANCH, "--lr-rule", "cubic", says="--lr-rule"),
    "branch: both windows": case(
        *BRANCH, "--window-examples", "8", "--window-tokens", "8", says="not allowed"
    ),
    "export: unknown format": case(*EXPORT, "--format", "csv", says="--format"),
    "import: unknown format": case("import", "{i}/broken.json", "--format", "csv", says="--format"),
    "import without --format": case("import", "{i}/broken.json", says="--format"),
    "fit without a sub-command": case("fit", says="steps"),
    "fit steps without --csv": case("fit", "steps", says="--csv"),
    "list: an override": case("list", "conf=smoke", says="conf=smoke"),
}

if os.geteuid() != 0:  # root writes into read-only folders
    CLASSES["files"]["report of a read-only run dir"] = case(
        "report", "{i}/read_only", says="nothing was written"
    )
    CLASSES["writes"]["run: journal in a read-only folder"] = case(
        *SMOKE, "storage.url={i}/ro/j.log", says="cannot be written"
    )
    CLASSES["writes"]["run: run dir in a read-only folder"] = case(
        *SMOKE, "run_dir={i}/ro/run", says="cannot be written"
    )

CASES: dict[str, Case] = {
    f"{cls}: {name}": c for cls, cases in CLASSES.items() for name, c in cases.items()
}
SUBCOMMANDS = (
    "run", "train", "status", "report", "replay", "branch", "stop", "import", "export",
    "fit", "list", "predict",
)  # fmt: skip


def subcommand(c: Case) -> str:
    """The sub-command a case runs ("cli" for the command line before one)."""
    return c.argv[0] if c.argv and c.argv[0] in SUBCOMMANDS else "cli"


def test_the_table_covers_every_class_and_sub_command() -> None:
    assert len(CASES) >= 150
    by_class = {cls: len(cases) for cls, cases in CLASSES.items()}
    assert min(by_class.values()) >= 10, by_class
    covered = {subcommand(c) for c in CASES.values()}
    assert covered >= set(SUBCOMMANDS), set(SUBCOMMANDS) - covered
    # Every sub-command is refused for more than one reason.
    per_command = {s: sum(subcommand(c) == s for c in CASES.values()) for s in SUBCOMMANDS}
    assert min(per_command.values()) >= 4, per_command


def _write(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every input file the cases read, made once."""
    i = tmp_path_factory.mktemp("inputs")
    _write(i / "cd/conf/malformed.yaml", HEADER + "name: [unclosed\n")
    _write(i / "cd/conf/latin1.yaml", (HEADER + "description: café\n").encode("latin-1"))
    _write(i / "cd/conf/empty.yaml", "")
    _write(i / "cd/conf/listed.yaml", "- smoke\n- train_smoke\n")
    _write(i / "cd/conf/headless.yaml", "defaults:\n  - smoke\n")
    _write(i / "cd_ok/conf/mine.yaml", HEADER + "defaults:\n  - smoke\n  - _self_\n")
    _write(i / "cd_yaml/conf/study.yaml", GROUP_STUDY)
    _write(i / "cd_yaml/model/mine.yaml", "name: [gpt\n")
    _write(i / "cd_bytes/conf/study.yaml", GROUP_STUDY)
    _write(i / "cd_bytes/model/mine.yaml", "name: gpt\nsize: tiny # \xe9\n".encode("latin-1"))
    (i / "empty_dir").mkdir()
    _write(i / "keys_missing/study.json", '{"name": "x"}\n')
    _write(i / "listed/study.json", "[1, 2]\n")
    _write(i / "not_json/study.json", '{"name": \n')
    _write(i / "t.csv", "b,s\n8,100\n16,60\n32,40\n64,35\n")
    _write(i / "hp.csv", "batch,lr,loss\n8,0.1,2.0\n16,0.2,1.9\n32,0.3,1.8\n")
    _write(i / "latin1.csv", "b,s\n8,100 # \xe9\n".encode("latin-1"))
    _write(i / "empty.csv", "")
    _write(i / "latin1.json", '{"name": "caf\xe9"}'.encode("latin-1"))
    _write(i / "broken.json", '{"schema": ')
    spec = Spec(batches=(16, 64), lr_multipliers=(0.5, 1.0), horizon=400)
    synthetic_run_dir(i / "study", spec)
    synthetic_run_dir(i / "report_is_a_file", spec)
    _write(i / "report_is_a_file/report", "not a folder\n")
    _write(i / "bad_config/study.json", "{}\n")
    _write(i / "bad_config/config.yaml", "- not\n- a study\n")
    study = {"name": "x", "budget": {"trials_per_point": 2}, "objective": {"kind": "k"}}
    _write(i / "points_bad/study.json", json.dumps({**study, "points": "all"}))
    _write(i / "label_path/study.json", json.dumps({**study, "points": [{"label": "../x"}]}))
    _write(i / "budget_bad/study.json", json.dumps({**study, "points": [], "budget": {}}))
    _write(i / "objective_bad/study.json", json.dumps({**study, "points": [], "objective": {}}))
    _write(i / "types_bad/study.json", json.dumps({**study, "points": [], "budget": [1]}))
    _write(i / "words.csv", "b,s\n8,many\n16,few\n32,some\n")
    _write(i / "list.json", "[1, 2, 3]\n")
    _write(i / "deep.json", "[" * 100_000 + "]" * 100_000)
    _write(i / "mine.yaml", "# a hand-written conf\n")
    _write(i / "slurm.conf", "")
    _write(i / "space.json", _exported_space())
    _study_files(i / "base", ["conf=smoke", f"run_dir={i / 'base'}"])
    if os.geteuid() != 0:
        synthetic_run_dir(i / "read_only", spec)
        (i / "read_only").chmod(0o555)
        (i / "ro").mkdir()
        (i / "ro").chmod(0o555)
    return i


def _exported_space() -> str:
    """`sweep export conf=smoke` (the stepscale format), as `sweep import` reads it."""
    from stepscale.sweeps.formats import export_space
    from stepscale.sweeps.study.compose import prepare_study
    from stepscale.sweeps.study.space_doc import space_document

    _, cfg, _ = prepare_study(["conf=smoke"], None)
    return export_space(space_document(cfg), "stepscale")[0]


def _study_files(run_dir: Path, overrides: list[str]) -> None:
    """The files `sweep run` writes first in a run dir (config.yaml, space.json,
    study.json: the study's identity), without running a trial."""
    from stepscale.sweeps.study.compose import prepare_study
    from stepscale.sweeps.study.files import make_run_dir, write_study_files
    from stepscale.sweeps.study.space import build_space
    from stepscale.sweeps.trainers.kinds import study_trainer

    raw, cfg, _ = prepare_study(overrides, None)
    space = build_space(cfg, study_trainer(cfg, None)[1])
    make_run_dir(run_dir)
    write_study_files(run_dir, raw, cfg, space)


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``folder`` with its size and modification time."""
    return {
        str(p.relative_to(folder)): (p.lstat().st_size, p.lstat().st_mtime_ns)
        for p in folder.rglob("*")
    }


def assert_refused(code: int, out: str, err: str, expected: Case) -> None:
    """The contract of a refusal: the exit code, a one-paragraph message saying what
    is wrong, no traceback, nothing on stdout, no password."""
    assert code == expected.code, err
    assert out == "", out
    message = err.strip()
    assert message, "no message"
    assert "Traceback" not in err, err
    assert "\n\n" not in message, f"more than one paragraph:\n{err}"
    assert expected.says in message, err
    assert PASSWORD not in out + err


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_refused_with_a_message_and_nothing_written(
    name: str,
    inputs: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    expected = CASES[name]
    monkeypatch.chdir(tmp_path)
    # sbatch finds no controller (a real one, from a cluster test's session, is not used).
    monkeypatch.setenv("SLURM_CONF", str(inputs / "slurm.conf"))  # empty: unusable
    monkeypatch.delenv("STEPSCALE_NO_SUCH_VAR", raising=False)
    before = snapshot(inputs)
    argv = [a.replace("{i}", str(inputs)) for a in expected.argv]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    out, err = capsys.readouterr()
    assert_refused(code, out, err, expected)
    assert list(tmp_path.iterdir()) == []  # no runs/, nothing else
    assert snapshot(inputs) == before


def test_a_report_that_cannot_be_written_leaves_nothing_partial(
    inputs: Path, tmp_path: Path
) -> None:
    """Writing fails part-way (a 4 KB file-size limit: the first figure is bigger): exit 2
    with a message, and the run dir, with its previous report, is as it was."""
    import matplotlib.font_manager  # noqa: F401  (its font cache exists before the limit)

    run_dir = tmp_path / "study"
    synthetic_run_dir(run_dir, Spec(batches=(16, 64), lr_multipliers=(0.5, 1.0), horizon=400))
    _write(run_dir / "report/index.html", "the previous report\n")
    before = snapshot(run_dir)

    # The limit is set in the child itself (a preexec_fn would fork this threaded process).
    child = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
        "from stepscale.cli.main import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", child, "report", str(run_dir)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert_refused(res.returncode, res.stdout, res.stderr, Case((), "nothing was written"))
    assert snapshot(run_dir) == before


def test_status_reports_damaged_trial_records_as_damaged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Records inside a finished study (trial.json, status.json, run.json, the detached
    job's) may be damaged by a crash: the table shows what it can, counts a trial whose
    trial.json cannot be read as damaged (not running), names the file, and does not call
    the study finished."""
    run_dir = synthetic_run_dir(
        tmp_path / "study", Spec(batches=(16, 64), lr_multipliers=(0.5, 1.0), horizon=400)
    )
    assert main(["status", str(run_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["finished"] is True
    trial = run_dir / "trials" / "batch_size=16" / "0"
    _write(trial / "trial.json", "[1, 2]\n")
    _write(trial / "status.json", '{"steps_done": "many"}\n')
    _write(run_dir / "trials" / "batch_size=64" / "1" / "trial.json", '{"state": "lost"}')
    _write(run_dir / "run.json", '"not a record"\n')
    _write(run_dir / "orchestrator" / "job.json", "[]\n")
    assert main(["status", str(run_dir), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    rows = {r["point"]: r for r in status["points"]}
    assert rows["batch_size=16"]["running"] == 0 and rows["batch_size=16"]["damaged"] == 1
    assert rows["batch_size=16"]["complete"] == 1
    assert rows["batch_size=64"]["damaged"] == 1 and rows["batch_size=64"]["complete"] == 1
    assert status["damaged"] == [
        str(trial / "trial.json"),
        str(run_dir / "trials" / "batch_size=64" / "1" / "trial.json"),
    ]
    assert status["finished"] is False
    assert main(["status", str(run_dir)]) == 0
    text = capsys.readouterr().out
    assert "damaged records" in text.splitlines()[0]
    assert "warning: 2 trial record(s) damaged" in text and str(trial / "trial.json") in text


def test_import_and_export_replace_a_file_only_with_force(
    inputs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text("# mine\n")
    assert (
        main(["import", str(inputs / "space.json"), "--format", "stepscale", "-o", str(mine)]) == 2
    )
    assert mine.read_text() == "# mine\n" and "--force" in capsys.readouterr().err
    args = ["import", str(inputs / "space.json"), "--format", "stepscale", "-o", str(mine)]
    assert main([*args, "--force"]) == 0
    assert "scientific:" in mine.read_text()
    assert main(["export", "conf=smoke", "-o", str(mine)]) == 2
    assert main(["export", "conf=smoke", "-o", str(mine), "--force"]) == 0
    assert json.loads(mine.read_text())


def test_fit_without_bootstrap_says_why_its_intervals_are_null(
    inputs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*[a.replace("{i}", str(inputs)) for a in FIT_STEPS], "--n-boot", "0"]) == 0
    out, err = capsys.readouterr()
    (group,) = json.loads(out)["groups"]
    assert group["b_crit_ci"] == [None, None] and group["b_crit"] > 0
    assert "--n-boot 0" in err and "null" in err
    assert main([*[a.replace("{i}", str(inputs)) for a in FIT_STEPS], "--n-boot", "50"]) == 0
    out, err = capsys.readouterr()
    assert None not in json.loads(out)["groups"][0]["b_crit_ci"] and "--n-boot" not in err

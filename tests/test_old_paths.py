"""Module paths from before `stepscale.sweeps` was split into wings still load: a SLURM job
queued before an upgrade unpickles its job object and trial spec under the old names, and
an old console script imports ``stepscale.sweeps.cli``."""

from __future__ import annotations

import pickle
import re
import subprocess
import sys

from stepscale.sweeps.job.spec import TrialSpec
from stepscale.sweeps.job.trial_job import TrialJob
from stepscale.sweeps.moved import MOVED
from stepscale.sweeps.study.storage import StorageSpec
from stepscale.sweeps.trainers.arg_styles import ArgsSpec
from stepscale.sweeps.trainers.spec import COMMAND, TrainerSpec

# The two old modules whose names are wings' packages now.
PACKAGES = {
    "stepscale.sweeps.job.trial_job": "stepscale.sweeps.job",
    "stepscale.sweeps.trainers.spec": "stepscale.sweeps.trainers",
}


def _old_names(blob: bytes) -> bytes:
    """A pickle (protocol 2: module names stand as text lines) with every module named by
    its path before the split."""
    back = {new: "stepscale.sweeps." + old for old, new in MOVED.items()} | PACKAGES
    out = re.sub(
        rb"c([\w.]+)\n",
        lambda m: b"c" + back.get(m.group(1).decode(), m.group(1).decode()).encode() + b"\n",
        blob,
    )
    assert out != blob
    return out


def test_a_job_pickled_under_the_old_module_paths_loads_in_a_fresh_process() -> None:
    spec = TrialSpec(
        trial="batch_size=8/0",
        study_name="demo/batch_size=8",
        trial_id=1,
        number=0,
        trial_dir="/tmp/t",
        config={"lr": 0.1},
        storage=StorageSpec("journal", "/tmp/t/study.journal"),
        trainer=TrainerSpec(kind=COMMAND, command=("python", "train.py"), args=ArgsSpec()),
        seed=3,
        target_loss=1.5,
        pruner=None,
        horizon=100,
    )
    blob = _old_names(pickle.dumps((TrialJob(), spec), protocol=2))
    names = set(re.findall(rb"c([\w.]+)\n", blob))
    assert b"stepscale.sweeps.trial_spec" in names and b"stepscale.sweeps.job" in names
    code = (
        "import pickle, sys\n"
        "job, spec = pickle.loads(sys.stdin.buffer.read())\n"
        "print(type(job).__module__, type(spec).__module__, type(spec.trainer).__module__,\n"
        "      type(spec.storage).__module__, spec.trainer.command, spec.seed)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True, check=True)
    assert res.stdout.decode().split() == [
        "stepscale.sweeps.job.trial_job",
        "stepscale.sweeps.job.spec",
        "stepscale.sweeps.trainers.spec",
        "stepscale.sweeps.study.storage",
        "('python',",
        "'train.py')",
        "3",
    ]


def test_every_old_module_path_imports() -> None:
    code = (
        "import importlib\n"
        "from stepscale.sweeps.moved import MOVED\n"
        "for old, new in MOVED.items():\n"
        "    assert importlib.import_module('stepscale.sweeps.' + old) is "
        "importlib.import_module(new), old\n"
        "from stepscale.sweeps.cli import main\n"
        "from stepscale.cli.main import main as new_main\n"
        "assert main is new_main\n"
        "print(len(MOVED))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert int(res.stdout) == len(MOVED) > 60

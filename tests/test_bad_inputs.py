"""Bad input to every `sweep` command, as a table: each case exits 2 (1 for the environment)
with a one-paragraph message, no traceback, nothing on stdout and nothing written — neither
in the working directory (where `runs/` would go) nor among the input files.

The commands run in this process (`stepscale.sweeps.cli.main`); only the report that
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

from stepscale.sweeps.cli import main

PASSWORD = "S3cr3tPW"
PG_URL = f"postgresql://user:{PASSWORD}@127.0.0.1:1/db"
HEADER = "# @package _global_\n"
GROUP_STUDY = HEADER + "defaults:\n  - train_smoke\n  - override /model: mine\n  - _self_\n"


@dataclass(frozen=True)
class Case:
    """``argv`` of `sweep` ({i} is the inputs folder), a word the message must hold, the
    exit code."""

    argv: tuple[str, ...]
    says: str
    code: int = 2


def case(*argv: str, says: str, code: int = 2) -> Case:
    return Case(argv, says, code)


SMOKE = ("run", "conf=smoke")
TRAIN = ("train", "conf=train_smoke")
FIT_STEPS = ("fit", "steps", "--csv", "{i}/t.csv", "--batch-col", "b", "--steps-col", "s")
FIT_HP = ("fit", "hparams", "--csv", "{i}/hp.csv", "--loss-col", "loss", "--hparams", "lr")

CASES: dict[str, Case] = {
    # sweep run: config composition
    "run without conf": case("run", says="conf"),
    "run of an unknown conf": case("run", "conf=nope", says="nope"),
    "run with a typo'd key": case(*SMOKE, "budget.trials_per_pont=2", says="trials_per_pont"),
    "run adding an unknown key": case(*SMOKE, "+budget.extra=1", says="budget.extra"),
    "run: override without '='": case(*SMOKE, "budget.trials_per_point", says="override"),
    # sweep run: Hydra habits
    "run: a preset without conf=": case("run", "smoke", says="sweep run conf=smoke"),
    "train: a preset without conf=": case("train", "train_smoke", says="conf=train_smoke"),
    "run: hydra.run.dir": case(*SMOKE, "hydra.run.dir=/tmp/x", says="run_dir=PATH"),
    "run: hydra.job.name": case(*SMOKE, "hydra.job.name=x", says="name=NAME"),
    "run: -m": case(*SMOKE, "-m", says="scientific.<axis>.values"),
    "run: --multirun": case("run", "--multirun", "conf=smoke", says="multirun"),
    "run: a comma sweep": case(*SMOKE, "nuisance.lr.low=1e-3,1e-2", says="multirun"),
    "run: a training preset": case("run", "conf=train_smoke", says="sweep train conf=train_smoke"),
    "train: a study preset": case("train", "conf=smoke", says="sweep run conf=smoke"),
    "run: nothing to tune": case(*SMOKE, "~nuisance.lr", says="nothing to tune"),
    "run: a parameter added not whole": case(*SMOKE, "+nuisance.b2=3", says="mapping"),
    "run: an added parameter's typo": case(
        *SMOKE, "+nuisance.b2={path: optimizer.b2, typo: 1}", says="nuisance.b2.typo"
    ),
    "run: an added parameter's bad type": case(
        *SMOKE, "+nuisance.b2={path: optimizer.b2, type: flot}", says="nuisance.b2.type"
    ),
    "run: unclosed list": case(*SMOKE, "scientific.batch_size.values=[8,", says="[8,"),
    "run: a word for a number": case(*SMOKE, "parallelism=many", says="parallelism"),
    "run: zero parallelism": case(*SMOKE, "parallelism=0", says="parallelism"),
    "run: negative retries": case(*SMOKE, "retries=-1", says="retries"),
    "run: unknown objective": case(*SMOKE, "objective.kind=accuracy", says="objective.kind"),
    "run: unknown sampler": case(*SMOKE, "sampler.name=cmaes", says="sampler.name"),
    "run: two horizons": case(*SMOKE, "budget.max_tokens=4096", says="budget"),
    "run: batch the trainer rejects": case(
        *SMOKE, "scientific.batch_size.values=[8,0]", says="batch_size=0"
    ),
    "run: unknown launcher": case(*SMOKE, "launcher.name=foo", says="launcher.name"),
    "run: a queue of trials off SLURM": case(
        *SMOKE, "launcher.trials_per_job=4", says="launcher.trials_per_job"
    ),
    "run: no trial per job": case(
        *SMOKE, "launcher=slurm", "launcher.trials_per_job=0", says="launcher.trials_per_job"
    ),
    "run: a worker's memory limit of 0": case(
        *SMOKE, "launcher.worker_max_rss_gb=0", says="launcher.worker_max_rss_gb"
    ),
    "run: --detach without SLURM": case(*SMOKE, "--detach", says="--detach"),
    "run: unknown option": case(*SMOKE, "--bogus", says="--bogus"),
    # sweep run: names are not paths (item 6)
    "run: name leaving runs/": case(*SMOKE, "name=../escaped_study", says="run_dir="),
    "run: empty name": case(*SMOKE, "name=", says="run_dir="),
    "run: absolute name": case(*SMOKE, "name={i}/elsewhere", says="run_dir="),
    "run: name with a slash": case(*SMOKE, "name=a/b", says="run_dir="),
    "run: name '..'": case(*SMOKE, "name=..", says="run_dir="),
    # sweep run: the user's study files (item 9)
    "run: malformed YAML study": case(
        "run", "conf=malformed", "--config-dir", "{i}/cd", says="malformed.yaml"
    ),
    "run: non-UTF-8 study": case("run", "conf=latin1", "--config-dir", "{i}/cd", says="UTF-8"),
    "run: empty study file": case(
        "run", "conf=empty", "--config-dir", "{i}/cd", says="empty.yaml is empty"
    ),
    "run: study file holding a list": case(
        "run", "conf=listed", "--config-dir", "{i}/cd", says="mapping"
    ),
    "run: study without its package line": case(
        "run", "conf=headless", "--config-dir", "{i}/cd", says="@package _global_"
    ),
    "run: missing --config-dir": case(*SMOKE, "--config-dir", "{i}/nope", says="--config-dir"),
    # sweep run: storage
    "run: password in storage.url": case(
        *SMOKE, "storage=postgres", f"storage.url={PG_URL}", says="PGPASSWORD"
    ),
    "run: typo'd key holding a password": case(
        *SMOKE, f"storage.urll={PG_URL}", says="storage.urll"
    ),
    "run: unknown storage": case(*SMOKE, "storage.name=redis", says="storage.name"),
    "run: SQLite file in a missing folder": case(
        *SMOKE, "storage=sqlite", "storage.url=sqlite:///{i}/nope/x.db", says="storage.url"
    ),
    # sweep train
    "train: 10 TB of attention scores": case(*TRAIN, "data.seq_len=100000", says="data.seq_len"),
    "train: name leaving runs/": case(*TRAIN, "name=../escaped", says="run_dir="),
    "train: empty name": case(*TRAIN, "name=", says="run_dir="),
    "train: a word for a number": case(*TRAIN, "optimizer.lr=fast", says="optimizer.lr"),
    "train: negative horizon": case(*TRAIN, "train.max_steps=-1", says="train.max_steps"),
    "train: typo'd key": case(*TRAIN, "train.max_step=5", says="max_step"),
    "train: unknown conf": case("train", "conf=nope", says="nope"),
    "train: malformed YAML group file": case(
        "train", "conf=study", "--config-dir", "{i}/cd_yaml", says="mine.yaml"
    ),
    "train: non-UTF-8 group file": case(
        "train", "conf=study", "--config-dir", "{i}/cd_bytes", says="mine.yaml"
    ),
    "train --cfg with a typo": case(*TRAIN, "optimizer.lrr=1", "--cfg", says="lrr"),
    # sweep status
    "status of a missing run dir": case("status", "{i}/nope", says="no such run dir"),
    "status of a folder that is no study": case("status", "{i}/empty_dir", says="study.json"),
    "status: study.json missing keys": case("status", "{i}/keys_missing", says="budget"),
    "status: study.json holding a list": case("status", "{i}/listed", says="list"),
    "status: study.json not JSON": case("status", "{i}/not_json", says="study.json"),
    "status without a run dir": case("status", says="run_dir"),
    # sweep stop
    "stop of a missing run dir": case("stop", "{i}/nope", says="study.json"),
    "stop: a word for the timeout": case(
        "stop", "{i}/listed", "--timeout", "soon", says="--timeout"
    ),
    "stop: negative timeout": case("stop", "{i}/listed", "--timeout", "-1", says="--timeout"),
    # sweep report
    "report of a missing run dir": case("report", "{i}/nope", says="does not exist"),
    "report of a folder without trials": case("report", "{i}/empty_dir", says="no trials"),
    "report: non-finite target": case("report", "{i}/study", "--target", "nan", says="--target"),
    "report: a word for the target": case(
        "report", "{i}/study", "--target", "low", says="--target"
    ),
    "report: report/ is a file": case("report", "{i}/report_is_a_file", says="not a directory"),
    # sweep export / import
    "export: unknown format": case("export", "conf=smoke", "--format", "csv", says="--format"),
    "export without conf": case("export", says="conf"),
    "export of an unknown conf": case("export", "conf=nope", says="nope"),
    "export -o below a file": case("export", "conf=smoke", "-o", "{i}/t.csv/x.json", says="-o"),
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
    "import: unknown format": case("import", "{i}/broken.json", "--format", "csv", says="--format"),
    "import without --format": case("import", "{i}/broken.json", says="--format"),
    # sweep fit
    "fit steps of a missing CSV": case(
        "fit",
        "steps",
        "--csv",
        "{i}/nope.csv",
        "--batch-col",
        "b",
        "--steps-col",
        "s",
        says="nope.csv",
    ),
    "fit steps of a non-UTF-8 CSV": case(
        "fit",
        "steps",
        "--csv",
        "{i}/latin1.csv",
        "--batch-col",
        "b",
        "--steps-col",
        "s",
        says="latin1.csv",
    ),
    "fit steps of an empty CSV": case(
        "fit",
        "steps",
        "--csv",
        "{i}/empty.csv",
        "--batch-col",
        "b",
        "--steps-col",
        "s",
        says="empty",
    ),
    "fit steps: unknown column": case(
        "fit",
        "steps",
        "--csv",
        "{i}/t.csv",
        "--batch-col",
        "batch",
        "--steps-col",
        "s",
        says="batch",
    ),
    "fit steps --n-boot 1e12": case(*FIT_STEPS, "--n-boot", "1e12", says="--n-boot"),
    "fit steps --n-boot 10**12": case(*FIT_STEPS, "--n-boot", str(10**12), says="--n-boot"),
    "fit steps: negative overhead": case(*FIT_STEPS, "--overhead", "-1", says="--overhead"),
    "fit hparams: unknown column": case(*FIT_HP, "--by", "width", says="width"),
    "fit hparams: negative band": case(*FIT_HP, "--by", "batch", "--band", "-1", says="--band"),
    "fit hparams: bad --law": case(*FIT_HP, "--by", "batch", "--law", "lr", says="--law"),
    "fit without a sub-command": case("fit", says="steps"),
    # sweep list
    "list of a missing --config-dir": case("list", "--config-dir", "{i}/nope", says="--config-dir"),
    "list of a non-UTF-8 preset": case("list", "--config-dir", "{i}/cd", says="latin1.yaml"),
    # the command line itself
    "no command": case(says="command"),
    "unknown command": case("frobnicate", says="frobnicate"),
    "misspelt option": case("--verison", says="--verison"),
}

if os.geteuid() != 0:  # root writes into read-only folders
    CASES["report of a read-only run dir"] = case(
        "report", "{i}/read_only", says="nothing was written"
    )


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
    if os.geteuid() != 0:
        synthetic_run_dir(i / "read_only", spec)
        (i / "read_only").chmod(0o555)
    return i


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
        "from stepscale.sweeps.cli import main\n"
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


def test_status_shows_what_it_can_of_damaged_trial_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Records inside a study (trial.json, status.json, run.json, the detached job's) may be
    damaged by a crash: the table counts such a trial as running instead of failing."""
    run_dir = synthetic_run_dir(
        tmp_path / "study", Spec(batches=(16, 64), lr_multipliers=(0.5, 1.0), horizon=400)
    )
    trial = run_dir / "trials" / "batch_size=16" / "0"
    _write(trial / "trial.json", "[1, 2]\n")
    _write(trial / "status.json", '{"steps_done": "many"}\n')
    _write(run_dir / "run.json", '"not a record"\n')
    _write(run_dir / "orchestrator" / "job.json", "[]\n")
    assert main(["status", str(run_dir), "--json"]) == 0
    rows = {r["point"]: r for r in json.loads(capsys.readouterr().out)["points"]}
    assert rows["batch_size=16"]["running"] == 1 and rows["batch_size=16"]["complete"] == 1
    assert rows["batch_size=64"]["complete"] == 2

"""`sweep run storage=postgres` against a real PostgreSQL server started for this module.

The smoke study runs with four local jobs at once, each writing its intermediate eval
losses to PostgreSQL for the median pruner while the orchestrator asks and tells. The URL,
password included, lives only in an environment variable (``storage.url_env``): it must
show up in no command's output and in no file of the run dir (binary files included).
Without PostgreSQL's binaries the tests skip — or fail under STEPSCALE_REQUIRE_CLUSTER=1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import optuna
import pytest
from helpers import xla_flags
from optuna.trial import TrialState
from servers import ServerUnavailable, skip_or_fail
from servers.postgres import Timings, postgres_server

from stepscale.errors import UsageError
from stepscale.sweeps.study.schema import StorageConfig
from stepscale.sweeps.study.storage import open_storage, redact, resolve

SWEEP = str(Path(sys.executable).with_name("sweep"))
URL_ENV = "STEPSCALE_TEST_PG_URL"
POINTS = ("batch_size=8", "batch_size=16")
TUNE, CONFIRM = 2, 1  # per point: 4 tuning jobs at once, then the confirm runs
EVAL_EVERY, HORIZON = 10, 40  # steps: 4 intermediate values per trial that runs to the end
FINAL = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    """``postgresql://user:password@127.0.0.1:port/db`` of a server private to this module."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        skip_or_fail("the PostgreSQL driver is not installed: pip install -e '.[dev]'")
    timings = Timings()
    try:
        with postgres_server(timings) as url:
            print(f"\npostgres: started in {timings.start_s:.2f} s", file=sys.stderr)
            yield url
    except ServerUnavailable as exc:
        skip_or_fail(str(exc))
    print(f"\npostgres: stopped and removed in {timings.stop_s:.2f} s", file=sys.stderr)


def _env(url: str | None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "XLA_FLAGS" and not k.startswith("PG") and k != URL_ENV
    }
    env["STEPSCALE_TEST"] = "1"
    env["XLA_FLAGS"] = xla_flags()
    if url is not None:
        env[URL_ENV] = url
    return env


def sweep(
    args: list[str], cwd: Path, url: str | None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Run the real console script (the URL, if any, only in the environment)."""
    return subprocess.run(
        [SWEEP, *args], cwd=cwd, env=_env(url), capture_output=True, text=True, timeout=timeout
    )


def study_args(cache: str, *extra: str) -> list[str]:
    """The smoke study on PostgreSQL: 4 jobs at once, median pruning, local launcher."""
    return [
        "run", "conf=smoke", "run_dir=study", "storage=postgres", f"storage.url_env={URL_ENV}",
        "parallelism=4", "pruner=median", "pruner.n_startup_trials=1", "launcher=local",
        f"budget.trials_per_point={TUNE}", f"budget.confirm_seeds={CONFIRM}",
        f"budget.max_steps={HORIZON}", f"train.eval_every={EVAL_EVERY}",
        "train.devices=1", f"train.compile_cache_dir={cache}", *extra,
    ]  # fmt: skip


def rdb(url: str) -> optuna.storages.RDBStorage:
    """Optuna's own view of the database (not through stepscale)."""
    return optuna.storages.RDBStorage("postgresql+psycopg://" + url.split("://", 1)[1])


def db_trials(url: str) -> dict[str, list[optuna.trial.FrozenTrial]]:
    """Every trial in the database, by Optuna study name."""
    storage = rdb(url)
    try:
        return {
            s.study_name: optuna.load_study(study_name=s.study_name, storage=storage).get_trials()
            for s in optuna.get_all_study_summaries(storage)
        }
    finally:
        storage.engine.dispose()


def assert_exact_budget(url: str, run_dir: Path) -> dict[str, list[optuna.trial.FrozenTrial]]:
    """Per point: trials 0..n-1 in the database and on disk, all final, none lost or twice."""
    n = TUNE + CONFIRM
    by_study = db_trials(url)
    assert sorted(by_study) == sorted(f"smoke/{p}" for p in POINTS)
    reported = 0
    for point in POINTS:
        trials = by_study[f"smoke/{point}"]
        assert [t.number for t in trials] == list(range(n)), point
        assert all(t.state in FINAL for t in trials), [t.state for t in trials]
        kinds = sorted(t.user_attrs.get("kind") for t in trials)
        assert kinds == sorted(["tune"] * TUNE + ["confirm"] * CONFIRM), kinds
        # Confirm seeds measure seed spread at the best values: the pruner leaves them be.
        confirm = [t for t in trials if t.user_attrs.get("kind") == "confirm"]
        assert all(t.user_attrs["state"] != "pruned" for t in confirm), point
        folders = sorted(int(p.name) for p in (run_dir / "trials" / point).iterdir())
        assert folders == list(range(n)), point
        for t in trials:
            folder = run_dir / "trials" / point / str(t.number)
            status = json.loads((folder / "status.json").read_text())
            record = json.loads((folder / "trial.json").read_text())
            assert status["state"] in ("complete", "pruned", "diverged"), status
            assert record["state"] == status["state"] == t.user_attrs["state"], point
            # The jobs themselves wrote an intermediate value at every evaluation after step 0
            # (a diverged run's last, non-finite, evaluation is not reported).
            evals = list(range(EVAL_EVERY, status["steps_done"] + 1, EVAL_EVERY))
            if status["state"] == "diverged":
                assert set(t.intermediate_values) <= set(evals), (point, t.number)
            else:
                assert sorted(t.intermediate_values) == evals, (point, t.number)
            reported += len(t.intermediate_values)
    assert reported > 0
    return by_study


def assert_no_secret(secret: str, text: str, where: str) -> None:
    """A password must not appear (message shown without it, to keep it out of logs)."""
    assert secret not in text, f"the password leaked into {where}: {text.replace(secret, '<PW>')}"


@pytest.mark.cluster
def test_smoke_study_on_postgres_exact_budget_no_leak(
    pg_url: str, tmp_path: Path, compile_cache: str
) -> None:
    password = urlsplit(pg_url).password
    assert password
    runs: dict[str, subprocess.CompletedProcess] = {}
    run_dir = tmp_path / "study"

    def ok(name: str, args: list[str], url: str | None = None) -> str:
        runs[name] = res = sweep(args, tmp_path, url)
        assert res.returncode == 0, (res.stdout + res.stderr).replace(password, "<PW>")
        return res.stdout

    # Two orchestrators of the same study at once, 2 jobs each: 4 concurrent workers.
    t0 = time.monotonic()
    procs = {
        f"run #{i}": subprocess.Popen(
            [SWEEP, *study_args(compile_cache, "parallelism=2")],
            cwd=tmp_path,
            env=_env(pg_url),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in (1, 2)
    }
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        runs[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        assert proc.returncode == 0, (out + err).replace(password, "<PW>")
    run_s = time.monotonic() - t0
    assert not (run_dir / "study.journal").exists()  # the trials went to PostgreSQL
    first = assert_exact_budget(pg_url, run_dir)
    run_json = json.loads((run_dir / "run.json").read_text())
    assert run_json["storage"].startswith("postgresql+psycopg://stepscale:***@127.0.0.1:")

    # The same command again: nothing left to do, nothing asked, nothing told twice.
    t1 = time.monotonic()
    ok("rerun", study_args(compile_cache), pg_url)
    rerun_s = time.monotonic() - t1
    again = assert_exact_budget(pg_url, run_dir)

    def told(by_study: dict[str, list[optuna.trial.FrozenTrial]]) -> dict[str, list[tuple]]:
        return {
            k: [(t.number, t.state, t.value, t.datetime_complete) for t in v]
            for k, v in by_study.items()
        }

    assert told(again) == told(first)

    assert "finished" in ok("status", ["status", "study"])
    status = json.loads(ok("status --json", ["status", "study", "--json"]))
    assert status["finished"]
    for row in status["points"]:
        assert row["complete"] + row["pruned"] + row["diverged"] == TUNE + CONFIRM, row
        assert row["running"] == row["failed"] == 0, row

    ok("report", ["report", "study"])
    assert (run_dir / "report" / "index.html").stat().st_size > 0
    provenance = json.loads((run_dir / "report" / "provenance.json").read_text())
    assert "***" in json.dumps(provenance)

    for name, res in runs.items():
        assert_no_secret(password, res.stdout + res.stderr, f"the output of sweep {name}")
    secret = password.encode()
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".pkl" for p in files) and any(p.suffix == ".nc" for p in files)
    leaked = [str(p.relative_to(tmp_path)) for p in files if secret in p.read_bytes()]
    assert not leaked, f"the password is in {leaked}"
    # Warm workers get a trial's spec (the storage by the name of its variable, not its value)
    # over a socket, never through a file: what reached the disk (job results) was checked.
    assert not any(URL_ENV.encode() in p.read_bytes() for p in files if p.suffix == ".pkl")
    print(
        f"\nstudy on postgres: run {run_s:.1f} s, re-run {rerun_s:.1f} s, "
        f"{len(files)} files checked; states "
        + str({k: [t.user_attrs["state"] for t in v] for k, v in first.items()}),
        file=sys.stderr,
    )


def _bad_urls(url: str) -> dict[str, str]:
    parts = urlsplit(url)
    return {
        "wrong password": url.replace(f":{parts.password}@", ":not-the-Password-42@"),
        "closed port": url.replace(f":{parts.port}/", ":1/"),
    }


@pytest.mark.cluster
@pytest.mark.parametrize("case", ["wrong password", "closed port"])
def test_unusable_server_exits_2_with_a_short_message_without_the_password(
    case: str, pg_url: str, tmp_path: Path
) -> None:
    bad = _bad_urls(pg_url)[case]
    res = sweep(study_args("", "parallelism=1"), tmp_path, bad, timeout=120)
    out = res.stdout + res.stderr
    for secret in (urlsplit(pg_url).password, urlsplit(bad).password):
        assert_no_secret(secret, out, f"the output for a {case}")
    assert res.returncode == 2, out
    assert "Traceback" not in out
    lines = [line for line in out.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("sweep: error: storage: cannot reach"), out
    assert ("password authentication failed" if case == "wrong password" else "refused") in out
    assert not (tmp_path / "study" / "trials").exists()


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://stepscale:Secret-pw-1@127.0.0.1:5432/db",
        "postgresql://stepscale@127.0.0.1:5432/db?password=Secret-pw-1",
        "postgresql://stepscale:Secret@pw/1@127.0.0.1:5432/db",  # not URL-encoded
    ],
)
def test_a_password_in_the_config_is_refused_and_redacted_everywhere(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(URL_ENV, "postgresql://stepscale:other@127.0.0.1:5432/db")
    for url_env in (None, URL_ENV):  # also when the URL is taken from the environment
        with pytest.raises(UsageError) as refused:
            resolve(StorageConfig(name="postgres", url=url, url_env=url_env), tmp_path)
        assert "do not put a password in the config" in str(refused.value)
        assert "Secret" not in str(refused.value)
    assert "Secret" not in redact(url) and "pw" not in redact(url).split("@")[0]
    assert "Secret" not in redact(f"could not connect to '{url}': refused")


def test_the_url_from_the_environment_stays_out_of_the_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(URL_ENV, "postgres://stepscale:Secret-pw-1@127.0.0.1:5432/db")
    spec = resolve(StorageConfig(name="postgres", url=None, url_env=URL_ENV), tmp_path)
    assert spec.url == "postgresql+psycopg://stepscale:***@127.0.0.1:5432/db"
    assert "Secret" not in repr(spec) and spec.url_env == URL_ENV
    monkeypatch.delenv(URL_ENV)
    with pytest.raises(UsageError, match=URL_ENV):  # a job started without the variable
        open_storage(spec)


@pytest.mark.parametrize(("required", "outcome"), [("", "2 skipped"), ("1", "2 error")])
def test_without_binaries_it_skips_unless_clusters_are_required(
    required: str, outcome: str, tmp_path: Path
) -> None:
    # A session of its own: not an xdist worker (the variables it would inherit from this
    # one make its conftest take it for one) and no workers of its own for one test.
    env = {k: v for k, v in _env(None).items() if not k.startswith("PYTEST_XDIST")}
    env |= {"STEPSCALE_PG_BINDIR": str(tmp_path), "STEPSCALE_REQUIRE_CLUSTER": required}
    res = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-rs",
            f"{__file__}::test_unusable_server_exits_2_with_a_short_message_without_the_password",
        ],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert outcome in res.stdout, res.stdout + res.stderr
    assert "PostgreSQL server binaries" in res.stdout, res.stdout
    if required:
        assert "STEPSCALE_REQUIRE_CLUSTER=1" in res.stdout, res.stdout


@pytest.mark.cluster
def test_a_command_trainer_study_on_postgres(pg_url: str, tmp_path: Path) -> None:
    """The NumPy example as a command trainer: its eval losses reach PostgreSQL as
    intermediate values (written by the jobs), the pruner stops trials early."""
    example = Path(__file__).resolve().parent.parent / "examples" / "numpy_regression"
    args = [
        "run", "conf=numpy_batchsize", "--config-dir", str(example), "run_dir=study",
        "name=pg_command", "storage=postgres", f"storage.url_env={URL_ENV}",
        "scientific.batch_size.values=[16,64]", "budget.trials_per_point=4",
        "pruner=median", "pruner.n_startup_trials=1", "trainer.config.train.sleep_s=0.005",
    ]  # fmt: skip
    res = sweep(args, tmp_path, pg_url)
    assert res.returncode == 0, res.stderr
    studies = {k: v for k, v in db_trials(pg_url).items() if k.startswith("pg_command/")}
    assert sorted(studies) == ["pg_command/batch_size=16", "pg_command/batch_size=64"]
    for name, trials in studies.items():
        assert [t.number for t in trials] == [0, 1, 2, 3], name
        assert all(t.state in FINAL for t in trials)
        for t in trials:
            folder = tmp_path / "study" / "trials" / name.split("/")[1] / str(t.number)
            status = json.loads((folder / "status.json").read_text())
            evals = list(range(10, status["steps_done"] + 1, 10))
            assert sorted(t.intermediate_values) == evals, (name, t.number)
            assert t.user_attrs["state"] == status["state"]

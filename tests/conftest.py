"""Test-session setup: four fake CPU devices (multi-device code runs on CPU) and a
compilation cache private to the session, set before JAX is imported anywhere."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

# LLVM at optimisation level 1 instead of XLA's default: the CPU programs the tests compile
# (about 50 shapes of the tiny models, each compiled once a session) compile in about 2/3 of
# the CPU time (a tiny GPT's init program 2.2 s → 1.0 s, its training chunk 3.3 → 2.9 s) and
# run their steps as fast, with bit-identical losses (2,000 steps of the tiny GPT: the same
# final eval loss to the last bit; level 0 would change the numbers and halve the speed).
# The processes the tests start (sweeps, their trial jobs on SLURM and Ray, users' scripts)
# get it too, without the fake devices (tests/helpers.py user_env, xla_flags).
os.environ["STEPSCALE_TEST_XLA_FLAGS"] = "--xla_backend_optimization_level=1"
os.environ["XLA_FLAGS"] = " ".join(
    (
        os.environ.get("XLA_FLAGS", ""),
        "--xla_force_host_platform_device_count=4",
        os.environ["STEPSCALE_TEST_XLA_FLAGS"],
    )
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# submitit configures logging on import (logging.config.dictConfig), which closes every
# existing handler: absl's (imported with jax) holds the stream pytest captured at that
# moment, and closing it breaks pytest's capture for the rest of the session.
os.environ.setdefault("SUBMITIT_LOG_LEVEL", "NOCONFIG")

from collections.abc import Iterator
from pathlib import Path

import pytest

# Every test of the session compiles through one persistent compilation cache, shared by
# the pytest-xdist workers: the tiny configs the tests share compile once per session, not
# once per worker or per test (tests/helpers.py TEST_COMPILE_CACHE; the subprocesses that
# tests start inherit it). It is also where the default `train.compile_cache_dir` leads
# (~/.cache/stepscale/jax follows $XDG_CACHE_HOME), so a test that keeps the default
# shares it too, and no test writes into the user's own cache (a suite left ~50 programs
# there). The workers are children of the controller, so its pid names the folder for all
# of them; the controller, the last to exit, removes it.
_WORKER = "PYTEST_XDIST_WORKER" in os.environ
_HOME = os.path.join(
    tempfile.gettempdir(), f"stepscale-test-cache-{os.getppid() if _WORKER else os.getpid()}"
)
_CACHE = os.path.join(_HOME, "stepscale", "jax")
os.makedirs(_CACHE, exist_ok=True)
if not _WORKER:
    atexit.register(shutil.rmtree, _HOME, ignore_errors=True)
os.environ["STEPSCALE_TEST_COMPILE_CACHE"] = _CACHE
# the user's cache folder, for what is kept between sessions (tests/consumers)
os.environ.setdefault(
    "STEPSCALE_TEST_USER_CACHE",
    os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
)
os.environ["XDG_CACHE_HOME"] = _HOME

# The suite starts several hundred Python processes (sweep commands, trial workers, users'
# scripts), each importing the project's own modules. Where PYTHONDONTWRITEBYTECODE is set
# (some sandboxes and CI images set it) none of them leaves bytecode behind, so every one
# compiles the same sources again (about 0.3 CPU-s a process). The controller compiles them
# once here; a process reads bytecode whatever that variable says.
if not _WORKER and sys.flags.dont_write_bytecode:
    import compileall

    _REPO = Path(__file__).resolve().parents[1]
    for _folder in ("analysis", "cli", "conf", "models", "sweeps", "stepscale", "examples"):
        if (_REPO / _folder).is_dir():
            compileall.compile_dir(_REPO / _folder, quiet=2)


# The slowest files first (measured on a quiet 2-core machine, worker seconds: slurm 384,
# ray 118, study 89, workers 78, faults 65, cli_train 53, ...): with pytest-xdist handing
# out whole files (--dist loadfile), the long cluster file starts at once and the short
# files fill the other workers around it instead of leaving one worker running it alone
# at the end.
_SLOWEST_FIRST = (
    "test_slurm.py",
    "test_ray.py",
    "test_study.py",
    "test_workers.py",
    "test_example_lightning.py",  # a framework's study, killed and resumed (~70 s estimated)
    "test_example_hf.py",
    "test_faults.py",
    "test_cli_train.py",
    "test_distributed.py",
    "test_verdict.py",
    "test_example_pytorch.py",
    "test_postgres.py",
    "test_train.py",
    "test_multi_orchestrator.py",
    "test_consumers.py",
    # then the heaviest files of the fast tier (-m "not slow"), where the files above have
    # little to run: a long file that starts last is the tier's tail, one core idle
    "test_report.py",
    "test_nets.py",
    "test_formats_wild.py",
    "test_batch_unit.py",
    "test_headline.py",
    "test_formats.py",
    "test_data.py",
    "test_ramp.py",
    "test_figures.py",
    "test_misbehave.py",
    "test_hydra_habits.py",
)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """One worker more than cores (``-n auto``): the cluster tests spend much of their time
    waiting on SLURM's and Ray's timers (a requeued job is held 11 s), and a third worker on
    2 cores fills those waits instead of leaving a core idle (measured: 142% CPU with 2)."""
    return (os.cpu_count() or 1) + 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order test files slowest first, keeping each file's own order; cluster tests are
    slow tests (the fast tier, ``-m "not slow"``, leaves both out)."""
    rank = {name: i for i, name in enumerate(_SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
    for item in items:
        if item.get_closest_marker("cluster") is not None:
            item.add_marker(pytest.mark.slow)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How many compiled programs the session's tests kept in their shared cache: each
    new shape of the built-in trainer costs its compile (about 12 CPU-seconds for the tiny
    GPT, from nothing), so a test that can use a shape other tests use costs less."""
    if _WORKER:
        return
    kept = list(Path(_CACHE, "executables").glob("*.xexe"))
    if kept:
        size = sum(p.stat().st_size for p in kept) / 1e6
        terminalreporter.write_line(
            f"compiled programs kept by the session: {len(kept)} ({size:.0f} MB; tests/conftest.py)"
        )


@pytest.fixture
def compile_cache() -> str:
    """A persistent compilation cache directory shared by the tests of this session."""
    return _CACHE


@pytest.fixture(scope="session")
def slurm() -> Iterator[Path]:
    """A real single-node SLURM cluster for the session (see tests/servers/slurm.py);
    skipped where it cannot run, unless STEPSCALE_REQUIRE_CLUSTER=1 (CI)."""
    from servers import ServerUnavailable, skip_or_fail
    from servers.slurm import slurm_cluster

    try:
        with slurm_cluster() as conf:
            yield conf
    except ServerUnavailable as exc:
        skip_or_fail(str(exc))

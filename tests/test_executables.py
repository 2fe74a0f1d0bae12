"""Compiled programs kept on disk (models/executables.py): a new process at a known shape
loads them instead of tracing, and gets the same numbers; anything that could change the
program is a miss, and a damaged file is a miss too, never a failed run."""

from __future__ import annotations

import logging
import subprocess
import sys
import types
import uuid
from pathlib import Path

import pytest
from helpers import read_jsonl, tiny_nqm, user_env, wait_for, without_wall, xla_flags

from stepscale.models import executables
from stepscale.models.step import TRACE_COUNTS, forget_programs
from stepscale.models.train import train
from stepscale.reporters import JsonlReporter

SHORT = {"train__max_steps": 20, "train__eval_every": 10}


def _run(cfg: object, folder: Path) -> tuple[int, list[dict[str, object]]]:
    """Train ``cfg`` as a new process would (no program in memory): the programs traced
    and the records (without wall times)."""
    forget_programs()
    before = sum(TRACE_COUNTS.values())
    train(cfg, JsonlReporter(folder), run_dir=folder)  # type: ignore[arg-type]
    return sum(TRACE_COUNTS.values()) - before, without_wall(read_jsonl(folder / "metrics.jsonl"))


def test_a_new_process_loads_its_programs_and_only_an_identical_program_is_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # executables of this test's own (the session's XLA cache still serves the compiles)
    monkeypatch.setattr(executables, "SUBDIR", f"executables-{uuid.uuid4().hex}")
    cfg = tiny_nqm(**SHORT)
    traced, records = _run(cfg, tmp_path / "first")
    assert traced == 3  # init, train chunk, eval
    folder = executables.directory()
    assert folder is not None and folder.name == executables.SUBDIR
    saved = sorted(folder.glob(f"*{executables.SUFFIX}"))
    assert len(saved) == 3

    # a new process: nothing traced, the same numbers bit for bit
    assert _run(cfg, tmp_path / "again") == (0, records)

    # another runtime hyperparameter is the same program: loaded, other numbers
    traced, other = _run(tiny_nqm(**SHORT, optimizer__lr=0.05), tmp_path / "lr")
    assert traced == 0 and other != records

    # other code (models/ edited) is another program: traced again, saved beside
    with monkeypatch.context() as edited:
        edited.setattr(executables, "_code_fingerprint", lambda: "edited")
        assert _run(cfg, tmp_path / "edited") == (3, records)
    assert len(list(folder.glob(f"*{executables.SUFFIX}"))) == 6

    # damaged files: a warning, traced again, the same numbers, and saved afresh
    for path in saved:
        path.write_bytes(b"not an executable")
    with caplog.at_level(logging.WARNING, logger=executables.__name__):
        assert _run(cfg, tmp_path / "damaged") == (3, records)
    assert sum("ignoring the saved executable" in r.message for r in caplog.records) == 3
    assert _run(cfg, tmp_path / "repaired") == (0, records)

    # the cache off (no compile cache directory): nothing is read or written
    cfg.train.compile_cache_dir = ""
    assert _run(cfg, tmp_path / "off") == (3, records)
    assert executables.directory() is None


def test_a_users_traced_code_names_the_program_and_code_without_a_file_is_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a data source's sampler from the user's own module: an edit makes another program
    (tmp_path / "usersource.py").write_text("def sample():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import usersource  # type: ignore[import-not-found]

    monkeypatch.setitem(sys.modules, "usersource", usersource)
    first = executables._traced_code_fingerprint((usersource.sample,))
    executables._package_fingerprint.cache_clear()  # a new process reads the file again
    (tmp_path / "usersource.py").write_text("def sample():\n    return 2\n")
    second = executables._traced_code_fingerprint((usersource.sample,))
    assert first and second and first != second
    # code with no source file to read (defined at run time) is compiled, never kept
    module = types.ModuleType("defined_at_run_time")
    exec("def sample():\n    return 3\n", module.__dict__)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    assert executables._traced_code_fingerprint((module.sample,)) is None
    assert executables._traced_code_fingerprint(()) == ""
    executables._package_fingerprint.cache_clear()


# Trains one tiny NQM at a dimension no other test uses, once a file named "go" exists, with
# the executables module's log on stderr: what it compiled and what it loaded.
_AT_ONCE = """
import logging, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from helpers import tiny_nqm
from stepscale.models.train import train
logging.basicConfig(level=logging.WARNING, format="%(message)s")
logging.getLogger("stepscale.models.executables").setLevel(logging.DEBUG)
folder = Path(sys.argv[2])
(folder / ("ready-" + sys.argv[3])).touch()
while not (folder / "go").exists():
    time.sleep(0.01)
status = train(tiny_nqm(model__dim=13, train__max_steps=20, train__eval_every=10,
                        train__compile_cache_dir=str(folder / "cache")))
print(status["final_eval_loss"])
"""


def test_processes_that_need_one_program_at_once_compile_it_once(tmp_path: Path) -> None:
    """Two processes that miss the same programs at the same moment (warm workers starting
    at one shape): one compiles each program, the other waits for it and loads it."""
    tests = str(Path(__file__).parent)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _AT_ONCE, tests, str(tmp_path), str(i)],
            env=user_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    wait_for(lambda: len(list(tmp_path.glob("ready-*"))) == 2, timeout=120)
    (tmp_path / "go").touch()
    outs = [proc.communicate(timeout=300) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], [err[-2000:] for _, err in outs]
    logs = "".join(err for _, err in outs).splitlines()
    compiled = sorted(line.split()[1] for line in logs if line.startswith("compiled "))
    loaded = sorted(line.split()[1] for line in logs if line.startswith("loaded "))
    assert len(compiled) == 3 and compiled == loaded, logs  # init, chunk, eval: once each
    assert outs[0][0] == outs[1][0]  # the same numbers from a loaded program


def _cpu_devices(devices: int | None, how: str) -> dict[str, str]:
    """The environment that gives a process ``devices`` CPU devices (one when None), by XLA's
    flag or by JAX's setting."""
    if how == "flag" or devices is None:
        return {"XLA_FLAGS": xla_flags(devices)}
    return {"XLA_FLAGS": xla_flags(), "JAX_NUM_CPU_DEVICES": str(devices)}


@pytest.mark.parametrize("how", ["flag", "setting"])
def test_a_program_compiled_beside_other_cpu_devices_serves_a_one_device_process(
    tmp_path: Path, how: str
) -> None:
    """A process with 4 virtual CPU devices (made by XLA's flag, as in the tests' own, or by
    JAX's setting) compiles a 1-device program;
    a process with one device (a trial's) loads it (nothing compiled) and gets the same
    numbers. Both are new processes, so nothing else (a JAX setting another test changed in
    this one) tells them apart."""
    (tmp_path / "go").touch()
    tests = str(Path(__file__).parent)
    runs = []
    for devices in (4, None):
        run = subprocess.run(
            [sys.executable, "-c", _AT_ONCE, tests, str(tmp_path), str(devices)],
            env={**user_env(), **_cpu_devices(devices, how)},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        logs = run.stderr.splitlines()
        runs.append(
            (
                [line.split()[0] for line in logs if line.startswith(("compiled ", "loaded "))],
                run.stdout,
            )
        )
    assert [kinds for kinds, _ in runs] == [["compiled"] * 3, ["loaded"] * 3], runs
    assert runs[0][1] == runs[1][1]  # the same final loss


def test_the_default_cache_follows_xdg_cache_home(monkeypatch: pytest.MonkeyPatch) -> None:
    from stepscale.models.config import TrainConfig
    from stepscale.models.train import cache_path

    default = TrainConfig().compile_cache_dir
    monkeypatch.setenv("XDG_CACHE_HOME", "/scratch/me/cache")
    assert cache_path(default) == "/scratch/me/cache/stepscale/jax"
    assert cache_path("/data/jax") == "/data/jax"  # a folder of the user's own: as given
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_path(default) == str(Path.home() / ".cache" / "stepscale" / "jax")

"""The real consumers of `sweep export` (W&B's sweep engine, Hydra's Optuna sweeper,
OSS Vizier), in a virtual environment of their own: hydra-optuna-sweeper pins optuna < 3,
which the project's environment cannot hold. AlgoPerf's Halton search
(`algoperf_halton.py`, a verbatim copy under its Apache-2.0 licence) and Optuna run in the
project's own environment.

Where the environment is: ``$STEPSCALE_CONSUMER_VENVS/consumers`` when that variable is set
(.ci/run creates it there before the tests; it must then exist), else a cache folder
(``$XDG_CACHE_HOME`` or ``~/.cache``, ``stepscale/consumers-<hash of the requirements>``)
created on first use. A consumer that cannot be had skips its tests, except where
``STEPSCALE_REQUIRE_CLUSTER=1`` (CI) turns that into a failure, as for the cluster tests.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "requirements.txt"
RUNNER = HERE / "runner.py"
VENVS_ENV = "STEPSCALE_CONSUMER_VENVS"
NAME = "consumers"


class ConsumerUnavailable(RuntimeError):
    """The consumers' environment does not exist and cannot be made here."""


def _python(root: Path) -> Path:
    return root / "bin" / "python"


def _cache_root() -> Path:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]
    # the user's cache folder, also from within the test session (tests/conftest.py)
    user = os.environ.get("STEPSCALE_TEST_USER_CACHE") or os.environ.get("XDG_CACHE_HOME")
    base = Path(user or Path.home() / ".cache")
    return base / "stepscale" / f"{NAME}-{digest}"


def create(root: Path) -> None:
    """Make the consumers' environment at ``root`` (python -m venv, pip install -r); one
    made from the same requirements is kept."""
    ready = root / "ready"
    if ready.exists() and ready.read_text() == REQUIREMENTS.read_text():
        return
    venv.create(root, with_pip=True, clear=True)
    subprocess.run(
        [str(_python(root)), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    (root / "ready").write_text(REQUIREMENTS.read_text())


def consumer_python() -> Path:
    """The Python of the consumers' environment (made in the cache on first use when
    STEPSCALE_CONSUMER_VENVS is not set); ConsumerUnavailable if it cannot be had."""
    given = os.environ.get(VENVS_ENV, "").strip()
    if given:
        root = Path(given) / NAME
        if not (root / "ready").exists():
            raise ConsumerUnavailable(
                f"{VENVS_ENV}={given}: no consumers' environment at {root} "
                "(.ci/run creates it with tests/consumers/requirements.txt)"
            )
        return _python(root)
    root = _cache_root()
    if not (root / "ready").exists():
        try:
            create(root)
        except (OSError, subprocess.CalledProcessError) as exc:
            detail = getattr(exc, "stderr", "") or str(exc)
            raise ConsumerUnavailable(
                f"cannot install the consumers in {root}: {detail.strip()[-500:]}"
            ) from None
    return _python(root)


def run_consumers(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """Run ``jobs`` (see runner.py) in one process of the consumers' environment."""
    python = consumer_python()
    res = subprocess.run(
        [str(python), str(RUNNER)],
        input=json.dumps(jobs),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=HERE,  # not the repository root, whose sweeps/ would shadow W&B's `sweeps`
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    if res.returncode != 0:
        raise RuntimeError(f"consumer runner failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


if __name__ == "__main__":  # python tests/consumers/__init__.py DIR: what .ci/run calls
    try:
        create(Path(sys.argv[1]) / NAME)
    except subprocess.CalledProcessError as exc:
        sys.exit(f"cannot install the consumers: {exc.stderr}")

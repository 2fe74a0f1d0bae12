"""``sweep run … launcher=ray --detach``: the orchestrator as a Ray job (Ray's job API,
`ray.job_submission.JobSubmissionClient`, served by the head node's dashboard).

The job runs the very same `sweep run` on the head node (same overrides, same run dir,
which the head sees like every node), its callable and arguments pickled into
``<run dir>/orchestrator/<job id>.pkl``, its output in ``<job id>.log`` beside it. It asks
for no CPU, so it never takes a trial's resources. Nothing depends on the session that
submitted it: `sweep status` reads the run dir; `sweep stop` asks the orchestrator to stop
through the run dir (its trials checkpoint), and stops a job still pending with Ray.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cloudpickle

from stepscale.errors import UsageError
from stepscale.sweeps.study.launcher_configs import RayLauncherConfig

# Python in the job, started with `-c` (not `-m`: that would put the working directory
# first on sys.path).
_BOOT = "from stepscale.sweeps.launch.ray_detach import main; main()"
_PENDING = ("PENDING",)


def _client(address: str | None) -> Any:
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(address)
    except Exception as exc:  # no dashboard there, or its HTTP answer is not Ray's
        raise UsageError(
            f"launcher.dashboard_address: cannot reach the Ray job API at {address!r}: {exc}"
        ) from None


def job_api(cfg: RayLauncherConfig) -> str:
    """The cluster's job API: ``launcher.dashboard_address``, else the dashboard of the
    cluster this process is connected to."""
    from stepscale.sweeps.launch.ray_cluster import LOCAL, connect, resolve_address

    if cfg.dashboard_address:
        return cfg.dashboard_address
    if resolve_address(cfg) == LOCAL:
        raise UsageError(
            "launcher.address: --detach runs the orchestrator as a job of a running cluster; "
            "a local cluster (address=local) ends with the command that started it: give "
            "the cluster's address (launcher.address or RAY_ADDRESS)"
        )
    dashboard = connect(cfg).get("dashboard")
    if not dashboard:
        raise UsageError(
            "launcher.dashboard_address: --detach submits the orchestrator through the "
            "cluster's job API (Ray's dashboard, `ray[default]` on the head node), which "
            "this cluster does not serve: start its head with the dashboard, or set "
            "launcher.dashboard_address=http://HOST:8265"
        )
    return dashboard if "://" in dashboard else f"http://{dashboard}"


def submit(
    cfg: RayLauncherConfig,
    api: str,
    study: str,
    folder: Path,
    job: Callable[..., int],
    args: tuple[Any, ...],
) -> tuple[str, Path]:
    """Submit ``job(*args)`` (the orchestrator) as a Ray job through the job API ``api``;
    returns (its submission id, its log)."""
    client = _client(api)
    job_id = f"stepscale-{''.join(c if c.isalnum() else '-' for c in study)}-{uuid.uuid4().hex[:8]}"
    payload = folder / f"{job_id}.pkl"
    log = folder / f"{job_id}.log"
    payload.write_bytes(cloudpickle.dumps((job, args)))
    python = cfg.python or sys.executable
    entrypoint = (
        f"exec {shlex.quote(python)} -c {shlex.quote(_BOOT)} {shlex.quote(str(payload))} "
        f">> {shlex.quote(str(log))} 2>&1"
    )
    try:
        client.submit_job(entrypoint=entrypoint, submission_id=job_id, entrypoint_num_cpus=0)
    except Exception as exc:
        raise UsageError(
            f"--detach: Ray did not take the orchestrator job at {api}: {exc}"
        ) from None
    return job_id, log


def pending(api: str, job_id: str) -> bool:
    """Is the orchestrator's Ray job (at the job API ``api``) still waiting to start?"""
    try:
        status = _client(api).get_job_status(job_id)
    except Exception:  # the cluster does not answer, or forgot the job: not pending
        return False
    return str(getattr(status, "value", status)) in _PENDING


def stop(api: str, job_id: str) -> None:
    """Stop the orchestrator's Ray job (SIGTERM: it stops as on Ctrl-C)."""
    with contextlib.suppress(Exception):  # gone already, or the cluster does not answer
        _client(api).stop_job(job_id)


def main() -> None:
    """Entry point of the job: ``python -c '…main()' PAYLOAD`` runs the pickled
    orchestrator and exits with its code."""
    with open(sys.argv[1], "rb") as f:
        job, args = cloudpickle.load(f)
    try:
        code = job(*args)
    except KeyboardInterrupt:  # a stop signal (ray job stop): the orchestrator stopped
        code = 130
    sys.exit(code)

"""The launchers' config schemas: the keys every launcher shares (`LauncherConfig`) and each
built-in launcher's own on top (registered by name in `sweeps.study.launcher_schema`).
What each key does is the launcher's business (`sweeps.launch.local`, `process`,
`slurm_launcher`, `inline`, `ray_launcher`); docs/cluster.md lists SLURM's and Ray's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class LauncherConfig:
    """The keys every launcher has; each launcher's schema adds its own."""

    name: str = "local"  # the launcher (local, process, slurm, inline, or one registered)
    timeout_min: int = 60 * 24  # a trial job's time limit on this machine
    poll_s: float = 0.5  # how often the orchestrator looks at its jobs
    gpus_per_trial: int | None = None  # GPUs each trial's job gets; None = local: all, slurm: none


@dataclass
class LocalLauncherConfig(LauncherConfig):
    """``launcher=local``: warm worker processes on this machine, ``parallelism`` of them.
    With several on a CPU machine each gets cores of its own (``pin_cpus``); a worker is
    replaced after ``worker_max_trials`` trials or above ``worker_max_rss_gb`` of resident
    memory (None: half of the machine's memory shared among the workers)."""

    name: str = "local"
    pin_cpus: bool = True
    worker_max_trials: int = 100
    worker_max_rss_gb: float | None = None


@dataclass
class ProcessLauncherConfig(LauncherConfig):
    """``launcher=process``: one fresh process per trial on this machine."""

    name: str = "process"


@dataclass
class InlineLauncherConfig(LauncherConfig):
    """``launcher=inline``: in the orchestrator's own process, one trial at a time."""

    name: str = "inline"


@dataclass
class OrchestratorJobConfig:
    """The SLURM job a detached sweep (``sweep run --detach``) runs its orchestrator in:
    one CPU and a little memory, so it never takes a trial's resources. When its time
    limit nears it requeues itself and the new orchestrator adopts the running trials."""

    partition: str | None = None  # default: the trials' partition
    account: str | None = None
    qos: str | None = None
    time_min: int = 24 * 60
    cpus: int = 1
    mem_gb: float = 2.0
    additional: dict[str, Any] = field(default_factory=dict)


@dataclass
class SlurmLauncherConfig(LauncherConfig):
    """``launcher=slurm``: one SLURM job per trial (submitit SlurmExecutor); trials asked
    together go as one job array (docs/cluster.md)."""

    name: str = "slurm"
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_min: int = 60
    nodes: int = 1
    tasks_per_node: int = 1
    gpus_per_task: int | None = None
    cpus_per_task: int | None = None
    mem_gb: float | None = None
    constraint: str | None = None
    gpus_per_node: int | None = None
    array_parallelism: int = 256
    setup: list[str] = field(default_factory=list)  # shell lines before each job (module load …)
    signal_delay_s: int = 90  # SLURM sends USR2 this long before the time limit
    max_requeues: int = 20  # time-limit requeues of one trial job (preemptions: unlimited)
    # Trials of one point one SLURM job runs one after another in one allocation (the later
    # ones start warm); `parallelism` still counts trials.
    trials_per_job: int = 1
    state_poll_s: float = 15.0  # re-read SLURM job states (sacct) at least this often
    additional: dict[str, Any] = field(default_factory=dict)  # any other sbatch option
    orchestrator: OrchestratorJobConfig = field(default_factory=OrchestratorJobConfig)


@dataclass
class RayLauncherConfig(LauncherConfig):
    """``launcher=ray``: trials on a Ray cluster (the ``stepscale[ray]`` extra), each in a
    warm worker of its own slot, placed by Ray with the resources asked for here
    (docs/cluster.md, "Ray")."""

    name: str = "ray"
    # The cluster: "host:port" of its head (GCS), "auto" (a cluster started on this machine
    # with `ray start`), or "local" (a cluster of this machine, started with the study and
    # stopped at its end). None: the RAY_ADDRESS environment variable, else "auto".
    address: str | None = None
    cpus_per_trial: float = 1.0  # per host of a trial; gpus_per_trial (None: 0) too
    resources: dict[str, float] = field(default_factory=dict)  # custom, per host: {TPU: 4}
    accelerator_type: str | None = None  # a node of this type (Ray's accelerator_type: …)
    runtime_env: dict[str, Any] = field(default_factory=dict)  # Ray's runtime_env of a trial
    # Hosts (nodes) one trial spans: one process on each, joined by jax.distributed.
    hosts_per_trial: int = 1
    local_cpus: int | None = None  # address=local: the local cluster's CPUs (None: all)
    worker_max_trials: int = 100  # a warm worker is replaced after this many trials
    worker_max_rss_gb: float | None = None  # … or above this resident memory (None: no limit)
    # An autoscaling cluster: resources no node has yet are left to its autoscaler.
    autoscaling: bool = False
    probe_timeout_s: float = 60.0  # the run-dir probe on every node must answer within this
    # --detach: the cluster's job API ("http://host:8265"; None: the connected cluster's
    # dashboard) and the Python on the head node that runs the orchestrator (None: this one).
    dashboard_address: str | None = None
    python: str | None = None


BUILTIN: dict[str, type[LauncherConfig]] = {
    "local": LocalLauncherConfig,
    "process": ProcessLauncherConfig,
    "slurm": SlurmLauncherConfig,
    "inline": InlineLauncherConfig,
    "ray": RayLauncherConfig,
}

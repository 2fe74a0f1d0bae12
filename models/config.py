"""Typed configuration of one training run (the `model`, `data`, `optimizer`, `schedule`
and `train` groups of the Hydra tree).

These dataclasses are the schema: Hydra composes YAML onto them and rejects unknown keys.
They are plain data; `models.validate` checks values, `models.train` consumes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ModelConfig:
    """Which network, its size preset and explicit overrides of every dimension."""

    name: str = "gpt"  # gpt | mlp | nqm
    size: str = "tiny"  # preset name (see models.nets.PRESETS); explicit fields below win
    # gpt (None = from the preset; vocab_size and max_seq_len default to the data's)
    n_layers: int | None = None
    d_model: int | None = None
    n_heads: int | None = None
    mlp_ratio: float | None = None
    vocab_size: int | None = None
    max_seq_len: int | None = None
    pos_emb: str = "learned"  # learned | rotary
    tie_embeddings: bool = False
    bias: bool = True  # biases in the linear layers and LayerNorms (false: nanoGPT's bias=False)
    # mlp
    hidden: int | None = None
    depth: int | None = None
    # nqm: curvature h_i = i^(-curvature_power), i = 1..dim; per-example gradient noise
    # covariance Sigma = noise_scale * diag(h); start at theta_i = init_scale for all i.
    dim: int = 100
    curvature_power: float = 1.0
    noise_scale: float = 1.0
    init_scale: float = 1.0
    # precision
    param_dtype: str = "float32"  # float32 | bfloat16
    dtype: str = "float32"  # compute dtype: float32 | bfloat16


@dataclass
class RampupConfig:
    """Batch-size ramp-up towards ``data.global_batch`` (models/ramp.py), in global batch.

    MaxText's rule (``start``, ``increment``, ``samples``: stages of equal samples) or a
    custom ``schedule`` of ``[step, batch]`` pairs; ``samples: 0`` and no schedule = no ramp.
    """

    start: int | None = None  # first batch (MaxText: per_device_batch_size_start × devices)
    increment: int | None = None  # batch added at each stage
    samples: int = 0  # examples the ramp runs for (MaxText: global_rampup_samples); 0 = off
    schedule: list[list[int]] = field(default_factory=list)  # [[step, batch], ...] from step 0
    lr_coupling: str = "none"  # none | sqrt | linear: a stage's LR × (batch / global_batch)^p


@dataclass
class DataConfig:
    """Data source and MaxText batch semantics (global batch in examples/sequences)."""

    name: str = "markov"  # a registered source (models/data): markov | tokens | text | …
    global_batch: int = 32  # the batch of every step, or the one a ramp leads to
    rampup: RampupConfig = field(default_factory=RampupConfig)
    seq_len: int = 64
    max_microbatch: int | None = None  # per device; None = the whole per-device batch
    seed: int = 0  # seed of the data *process* (e.g. the Markov chain's tables)
    eval_examples: int = 256  # size of the fixed held-out set
    eval_batch: int = 64  # examples per evaluation forward pass
    # markov: order-k chain over vocab_size tokens, each context with `branching` successors
    vocab_size: int = 16
    order: int = 2
    branching: int = 4
    concentration: float = 1.0  # Dirichlet concentration of successor probabilities
    # tokens / text / shakespeare_char
    path: str = ""
    dtype: str = "uint16"  # tokens: uint16 | uint32
    tokenizer: str = "bytes"  # text: bytes | chars (models/data/tokenize.py)
    heldout_frac: float = 0.05
    # teacher (mlp): x ~ N(0, I_input_dim), y ~ softmax(teacher(x) / temperature)
    input_dim: int = 32
    n_classes: int = 10
    temperature: float = 1.0


@dataclass
class OptimizerConfig:
    """Optimizer and its runtime hyperparameters (none of them changes a shape)."""

    name: str = "adamw"  # adamw | sgd | lars | lamb | lion
    lr: float = 1e-3  # peak learning rate
    b1: float = 0.9  # also the momentum of sgd and lars
    b2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    clip: float = 0.0  # global-norm clip; 0 = off
    # adamw / lamb: per-tensor update clipping (AdaFactor, StableAdamW): a tensor's update
    # is divided by max(1, RMS(g² / v̂) ** 0.5 / update_clip); 0 = off
    update_clip: float = 0.0
    nesterov: bool = False  # sgd / lars
    trust_coefficient: float = 0.001  # lars


@dataclass
class ScheduleConfig:
    """Learning-rate schedule; warmup given in steps, tokens, examples or a fraction."""

    name: str = (
        "warmup_constant"  # constant | warmup_constant | warmup_cosine | warmup_linear | wsd
    )
    warmup_steps: int | None = None
    warmup_tokens: int | None = None
    warmup_examples: int | None = None
    warmup_frac: float | None = None  # fraction of the horizon
    final_lr_frac: float = 0.0  # cosine / linear / wsd: lr at the horizon, as a fraction of peak
    decay_frac: float = 0.2  # wsd: fraction of the horizon spent decaying


@dataclass
class OnSpikeConfig:
    """What the trainer does when the training loss spikes or stops being finite
    (models/restarts.py): ``off``, or ``restart`` PaLM-style — go back to the newest
    checkpoint at least ``rewind_steps`` (R) before the spike, skip the next
    ``skip_batches`` (K) batches of the data stream from there, optionally scale the LR and
    the clip for ``scaled_steps`` steps, and go on; after ``max_restarts`` (M) restarts the
    next spike ends the trial as diverged."""

    policy: str = "off"  # off | restart
    rewind_steps: int = 20  # R
    skip_batches: int = 20  # K
    max_restarts: int = 3  # M
    lr_scale: float = 1.0  # the LR × this for scaled_steps steps after a restart
    clip_scale: float = 1.0  # optimizer.clip × this (clip > 0) for scaled_steps steps
    scaled_steps: int = 0


@dataclass
class TrainConfig:
    """Horizon, cadences (all in optimizer steps), stopping rules and run mechanics."""

    max_steps: int | None = 200
    max_tokens: int | None = None
    max_examples: int | None = None
    log_every: int = 10
    eval_every: int = 50
    checkpoint_every: int = 0  # 0 = only at the end
    keep_checkpoints: int = 2
    target_loss: float | None = None
    stop_at_target: bool = False
    divergence_factor: float = 10.0  # loss above factor x initial loss = diverged
    eval_positions: int | None = None  # LM: evaluate on the first N positions only
    ema_decay: float = 0.0  # > 0: evaluate an exponential moving average of the weights
    noise_scale: bool = False  # estimate the gradient noise scale B_simple
    # Spikes (models/spikes.py): a step's training loss above spike_factor × the median of
    # the spike_window steps before it (its gradient norm above grad_norm_spike_factor ×
    # theirs) is a spike; 0 = no detection
    spike_window: int = 20
    spike_factor: float = 1.5
    grad_norm_spike_factor: float = 5.0
    on_spike: OnSpikeConfig = field(default_factory=OnSpikeConfig)  # restart policy; off
    # Start from another run's checkpoint folder (…/checkpoints/step_<N>): its parameters,
    # optimizer state and step; this run's own batch, LR… from there (sweep branch)
    init_from: str | None = None
    seed: int = 0  # init and batch-order seed
    # Devices in use; None = all. In a multi-process run: global devices (all processes),
    # split evenly between the processes.
    devices: int | None = None
    # How the state is laid out over the devices (models/sharding.py): replicated = every
    # device holds all of it; fsdp = parameters and optimizer state split over the data axis.
    sharding: str = "replicated"  # replicated | fsdp
    compile_cache_dir: str = "~/.cache/stepscale/jax"  # "" disables the persistent cache
    resume: bool = True  # continue from the latest checkpoint in the run dir
    # Multi-process runs (jax.distributed; models/distributed.py): auto = join when this
    # process is one of several (num_processes > 1 below or in STEPSCALE_NUM_PROCESSES, or
    # an srun step with SLURM_NTASKS > 1); on = always (JAX detects what is unset); off = never.
    # The next three fields default to the environment variables STEPSCALE_COORDINATOR_ADDRESS,
    # STEPSCALE_NUM_PROCESSES and STEPSCALE_PROCESS_ID, else to what JAX detects (SLURM).
    distributed: str = "auto"  # auto | on | off
    coordinator_address: str | None = None  # "host:port" of process 0 (or env, see above)
    num_processes: int | None = None  # processes in the run
    process_id: int | None = None  # this process, 0-based
    distributed_timeout_s: int = 300  # how long the processes wait for each other to join


@dataclass
class TrainerConfig:
    """Everything one training run needs."""

    name: str | None = None  # default: the conf preset's name
    run_dir: str | None = None
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

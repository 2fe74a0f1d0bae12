"""torchtitan's ``MetricsProcessor.log`` and validation lines (coloured, on stderr)."""

from stepscale.sweeps.trainers.presets import N, Preset, register_preset

PRESET = register_preset(
    Preset(
        name="torchtitan",
        metrics={
            "source": "output",
            "format": "regex",
            "pattern": [
                rf"(?<!validate )\bstep:\s*(?P<step>\d+)\s+loss:\s*(?P<train_loss>{N})"
                r".*?\btps: (?P<tps>[\d,]+)",
                rf"validate step:\s*(?P<step>\d+)\s+loss:\s*(?P<eval_loss>{N})",
            ],
        },
        arg_style="--key value",
        keys={
            "batch_size": "training.local_batch_size",
            "lr": "optimizer.lr",
            "warmup": "lr_scheduler.warmup_steps",
            "max_steps": "training.steps",
            "seed": "training.seed",
        },
        description=(
            "Reads 'step: 10  loss:  2.3456  grad_norm: …  memory: …GiB(…%)  tps: 13,352  "
            "tflops: …  mfu: …%' and 'validate step: 10  loss: …' (the logger writes to "
            "stderr, with colour codes, which are removed: source output merges both "
            "streams); tps is read whole. The step is torchtitan's train_state.step, "
            "incremented before each optimizer step (step 1 is the first). Arguments are "
            "its config's dotted keys as '--key value' (--training.steps, --optimizer.lr)."
        ),
    )
)

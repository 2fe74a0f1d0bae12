"""MaxText's metric logger lines."""

from stepscale.sweeps.trainers.presets import N, Preset, register_preset

PRESET = register_preset(
    Preset(
        name="maxtext",
        metrics={
            "source": "output",
            "format": "regex",
            "pattern": [
                rf"completed step: (?P<step>\d+),.*?\bloss: (?P<train_loss>{N})",
                rf"eval metrics after step: (?P<step>\d+), loss=(?P<eval_loss>{N})",
            ],
        },
        arg_style="key=value",
        keys={
            "batch_size": "per_device_batch_size",
            "lr": "learning_rate",
            "warmup": "warmup_steps_fraction",
            "max_steps": "steps",
            "seed": "init_weights_seed",
        },
        description=(
            "Reads 'completed step: 10, seconds: …, TFLOP/s/device: …, Tokens/s/device: …, "
            "total_weights: …, loss: 9.876' and 'eval metrics after step: 9, loss=9.420, "
            "total_weights=…' (absl logging, on stderr: source output). MaxText counts steps "
            "from 0 (completed step 0 is the first); the preset records its counter as "
            "printed, train and eval alike. Arguments are key=value after the config file "
            "(steps=…, per_device_batch_size=…); its warmup is a fraction of the steps."
        ),
    )
)

"""fairseq's JSON progress bar (``--log-format json``)."""

from stepscale.sweeps.trainers.presets import Preset, register_preset

PRESET = register_preset(
    Preset(
        name="fairseq",
        metrics={
            "source": "output",
            "format": "json",
            "names": {
                "num_updates": "step",
                "valid_num_updates": "step",
                "train_num_updates": "step",
                "loss": "train_loss",
                "train_loss": "train_epoch_loss",
            },
            "values": {"eval_loss": "valid_loss * log(2)"},
        },
        arg_style="--key value",
        keys={
            "batch_size": "batch-size",
            "lr": "lr",
            "warmup": "warmup-updates",
            "max_steps": "max-update",
            "seed": "seed",
        },
        description=(
            "Reads fairseq-train's JSON log lines (run it with --log-format json): "
            "train_inner {'epoch', 'update', 'loss', …, 'num_updates'}, the epoch's "
            "train summary (train_loss → train_epoch_loss, train_num_updates) and valid "
            "(valid_loss, valid_num_updates); the step is num_updates (optimizer updates). "
            "fairseq prints losses in base 2: eval_loss is valid_loss × ln 2 (nats), "
            "valid_loss is kept as printed. Its default log format when not on a terminal "
            "is 'simple', which this preset does not read. Arguments are '--key value' with "
            "dashes (--batch-size or --max-tokens, --lr, --warmup-updates, --max-update)."
        ),
    )
)

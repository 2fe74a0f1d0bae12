"""Keras' printed progress: ``Epoch 3/10`` then ``100/100 ━━━ … - loss: … - val_loss: …``."""

from stepscale.sweeps.trainers.presets import Preset, register_preset

PRESET = register_preset(
    Preset(
        name="keras",
        metrics={
            "source": "stdout",
            "format": "kv_colon",
            "pattern": [
                r"^Epoch (?P<epoch>\d+)/\d+\s*$",
                r"^\s*(?P<batch>\d+)/(?P<steps_per_epoch>\d+) ",
            ],
            "step": "(epoch - 1) * steps_per_epoch + batch",
            "names": {"val_loss": "eval_loss", "loss": "train_loss"},
        },
        arg_style="--key=value",
        keys={
            "batch_size": "batch_size",
            "lr": "learning_rate",
            "warmup": "warmup_steps",
            "max_steps": "epochs",
            "seed": "seed",
        },
        description=(
            "Reads what model.fit prints (verbose 1 or 2): the 'Epoch E/EPOCHS' line, then the "
            "progress line 'B/N ━━━ … - loss: … - val_loss: …' (only its last redraw); the "
            "step is (E - 1) × N + B, N being the steps per epoch Keras prints, so the step "
            "is exact. loss is the running mean over the epoch so far (Keras' own), val_loss "
            "the evaluation at the epoch's end. A model.evaluate() printed after fit restarts "
            "the batch count and is refused (the step would go backwards). Keras' CSVLogger "
            "writes one row per epoch with no step: read it with format csv and step "
            "'(epoch + 1) * steps_per_epoch' where steps_per_epoch is a trial setting. Keras "
            "scripts take their own arguments (no Keras convention); epochs bound the run."
        ),
    )
)

"""PyTorch Lightning: its logger's TensorBoard event files (or CSVLogger's metrics.csv)."""

from stepscale.sweeps.trainers.presets import Preset, register_preset

PRESET = register_preset(
    Preset(
        name="lightning",
        metrics={
            "source": "{trial_dir}",
            "format": "tensorboard",
            "step": "step + 1",
            "names": {"val_loss": "eval_loss", "val/loss": "eval_loss", "train_loss": "train_loss"},
        },
        arg_style="--key=value",
        keys={
            "batch_size": "data.batch_size",
            "lr": "model.learning_rate",
            "warmup": "model.warmup_steps",
            "max_steps": "trainer.max_steps",
            "seed": "seed_everything",
        },
        description=(
            "Reads the TensorBoardLogger's event files (Lightning's default logger when "
            "tensorboard is installed; default_root_dir inside {trial_dir}). Lightning logs "
            "at its global step minus one (the validation after N optimizer updates, and the "
            "train loss of the N-th update, are written at step N - 1: measured with "
            "Lightning 2.6), so the preset's step is the event's step + 1. The eval loss is the metric "
            "logged as val_loss (self.log('val_loss', …)) or val/loss; map another with "
            "names. With CSVLogger instead, read its metrics.csv: format csv, source "
            "'{trial_dir}/…/version_0/metrics.csv' (its step column is the same, + 1; a file rewritten with a new column is read again without repeating "
            "records). The argument names are LightningCLI's (--trainer.max_steps, "
            "--seed_everything); batch size and learning rate are the user's own "
            "data/model arguments."
        ),
    )
)

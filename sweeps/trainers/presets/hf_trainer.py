"""Hugging Face Transformers' ``Trainer``: its TensorBoard event files."""

from stepscale.sweeps.trainers.presets import Preset, register_preset

PRESET = register_preset(
    Preset(
        name="hf_trainer",
        metrics={
            "source": "{trial_dir}",
            "format": "tensorboard",
            "names": {
                "train/loss": "train_loss",
                "eval/loss": "eval_loss",
                "train/learning_rate": "lr",
                "train/grad_norm": "grad_norm",
                "train/epoch": "epoch",
            },
        },
        arg_style="--key value",
        keys={
            "batch_size": "per_device_train_batch_size",
            "lr": "learning_rate",
            "warmup": "warmup_steps",
            "max_steps": "max_steps",
            "seed": "seed",
        },
        description=(
            "Reads the TensorBoard event files the Trainer writes (report_to='tensorboard', "
            "under its logging_dir, by default output_dir/runs/DATE_HOST: searched for under "
            "the trial folder), tags train/loss and eval/loss at the event's own step, which "
            "is the Trainer's state.global_step (optimizer steps). Its printed dicts "
            "({'loss': 2.3, 'epoch': 0.5}) are not read: they carry no step, only an epoch "
            "rounded to two decimals, from which the step cannot be derived exactly. Assumes "
            "the script passes output_dir (or logging_dir) inside {trial_dir} and keeps "
            "tensorboard among report_to; per_device_train_batch_size is per device (the "
            "global batch is it × devices × gradient_accumulation_steps)."
        ),
    )
)

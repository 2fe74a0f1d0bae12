"""Any framework's TensorBoard event files."""

from stepscale.sweeps.trainers.presets import Preset, register_preset

PRESET = register_preset(
    Preset(
        name="tensorboard",
        metrics={
            "source": "{trial_dir}",
            "format": "tensorboard",
            "names": {
                "eval_loss": "eval_loss",
                "val_loss": "eval_loss",
                "eval/loss": "eval_loss",
                "val/loss": "eval_loss",
                "validation/loss": "eval_loss",
            },
        },
        arg_style="--key=value",
        keys={},
        description=(
            "Reads every events.out.tfevents.* file under the trial folder (recursively), "
            "scalars written by torch.utils.tensorboard, tensorboardX or tf.summary (a "
            "simple_value or a one-element float tensor) at the event's own step. The eval "
            "loss is the tag eval_loss, val_loss, eval/loss, val/loss or validation/loss; map "
            "another with names. Assumes the step the framework gives its events is the "
            "optimizer step (it is for the Trainer, Lightning, Megatron, fairseq; Keras' "
            "callback logs epochs unless update_freq is set)."
        ),
    )
)

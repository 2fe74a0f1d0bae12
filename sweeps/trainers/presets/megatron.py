"""Megatron-LM's ``training_log`` and ``evaluate_and_print_results`` lines."""

from stepscale.sweeps.trainers.presets import Preset, register_preset

PRESET = register_preset(
    Preset(
        name="megatron",
        metrics={
            "source": "stdout",
            "format": "kv_pipes",
            "names": {
                "iteration": "step",
                "validation_loss_at_iteration": "step",
                "lm_loss": "train_loss",
                "lm_loss_value": "eval_loss",
                "lm_loss_PPL": "eval_ppl",
                "learning_rate": "lr",
            },
        },
        arg_style="--key value",
        keys={
            "batch_size": "global-batch-size",
            "lr": "lr",
            "warmup": "lr-warmup-iters",
            "max_steps": "train-iters",
            "seed": "seed",
        },
        description=(
            "Reads ' iteration 100/ 1000 | consumed samples: … | learning rate: … | lm loss: "
            "2.3E+00 | …' (training_log, every --log-interval iterations) and ' validation "
            "loss at iteration 100 | lm loss value: … | lm loss PPL: … |' (every "
            "--eval-interval); the step is Megatron's iteration, counted after each optimizer "
            "step. Arguments are '--key value' with dashes (--global-batch-size, --lr, "
            "--lr-warmup-iters, --train-iters, --seed); give trainer.args.names with dashes."
        ),
    )
)

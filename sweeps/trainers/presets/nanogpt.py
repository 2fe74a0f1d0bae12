"""nanoGPT and llm.c style lines."""

from stepscale.sweeps.trainers.presets import N, Preset, register_preset

PRESET = register_preset(
    Preset(
        name="nanogpt",
        metrics={
            "source": "stdout",
            "format": "regex",
            "pattern": [
                rf"^step (?P<step>\d+): train loss (?P<train_loss_estimate>{N}), val loss (?P<eval_loss>{N})",
                rf"^iter (?P<step>\d+): loss (?P<train_loss>{N})",
                rf"^step\s+(?P<step>\d+)/\d+ \| (?:train )?loss (?P<train_loss>{N})",
                rf"^val loss (?P<eval_loss>{N})",
            ],
        },
        arg_style="--key=value",
        keys={
            "batch_size": "batch_size",
            "lr": "learning_rate",
            "warmup": "warmup_iters",
            "max_steps": "max_iters",
            "seed": "seed",
        },
        description=(
            "Reads nanoGPT's 'step 250: train loss 2.31, val loss 2.40' (its periodic "
            "estimate; the train estimate is train_loss_estimate) and 'iter 250: loss 2.29, "
            "time …ms, mfu …%' (train_loss), and llm.c's 'step  100/5000 | train loss 2.3 | "
            "norm … | lr … | (… ms | … tok/s)' with 'val loss 2.4' on a line of its own, "
            "which belongs to the step line before it (llm.c evaluates at the top of an "
            "iteration, after the previous one's step; the first, before any step line, is "
            "step 0). nanoGPT's configurator takes --key=value (its override check needs a "
            "float for a float: stepscale writes 1.0, never 1); max_iters bounds the run, "
            "llm.c's is num_iterations."
        ),
    )
)

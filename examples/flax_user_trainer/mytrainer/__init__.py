"""The user's trainer package: `mytrainer.train.main` is a stepscale Python-function trainer."""

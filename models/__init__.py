"""The trainer: models, data, optimizers, schedules and the step-based training loop."""

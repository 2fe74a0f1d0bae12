"""The one exception type for bad user input anywhere in the trainer."""

from __future__ import annotations

from stepscale.errors import UsageError


class ConfigError(UsageError, ValueError):
    """A configuration value (or a file it names) is unusable.

    `field` is the dotted config key at fault (e.g. ``data.global_batch``); the message
    says what is wrong and which values are allowed. A kind of `stepscale.errors.UsageError`:
    the `sweep` command exits 2 with the message.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class ConfigWarning(UserWarning):
    """A configuration value that works but probably does not do what was meant (e.g.
    ``train.sharding=fsdp`` for a model too small to shard). The run goes ahead."""

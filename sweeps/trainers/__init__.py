"""The trainer kinds (built-in, Python function, command) and their contract: how each is
read from config, its arguments, and how its metrics and final status are read."""

from typing import Any


def __getattr__(name: str) -> Any:
    """A name of the old module ``stepscale.sweeps.trainers`` (now `stepscale.sweeps.trainers.spec`), which pickles
    of jobs queued before the split may name."""
    from stepscale.sweeps.moved import old_module_attribute

    return old_module_attribute("stepscale.sweeps.trainers.spec", __name__, name)

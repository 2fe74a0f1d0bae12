"""What runs inside a trial's job (and the warm worker process that hosts jobs): it imports
neither Hydra nor the analysis."""

from typing import Any


def __getattr__(name: str) -> Any:
    """A name of the old module ``stepscale.sweeps.job`` (now `stepscale.sweeps.job.trial_job`), which pickles
    of jobs queued before the split may name."""
    from stepscale.sweeps.moved import old_module_attribute

    return old_module_attribute("stepscale.sweeps.job.trial_job", __name__, name)

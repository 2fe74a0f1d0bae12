"""stepscale: batch-size / learning-rate scaling studies of neural-network training, counted
in optimizer steps.

The code lives in four subpackages, installed under this one namespace so that nothing
generic lands in site-packages and a user's own ``models/`` folder cannot shadow ours:

- ``stepscale.sweeps``   the orchestrator (CLI, config schema, search spaces, scheduler);
- ``stepscale.models``   the built-in trainer (models, data, optimizers, training loop);
- ``stepscale.analysis`` everything that reads results (load, fits, figures, reports);
- ``stepscale.conf``     the Hydra config tree.

Modules directly in this package are the contracts every side may import (the run
directory's names and keys, the trainer interface, JSON files, redaction); they import
none of the subpackages.
See docs/architecture.md.
"""

import time
from typing import Any

# The clock of a command: ``time.monotonic()`` when this process first imported stepscale,
# which the ``sweep`` entry point does first. `sweep run`'s end-of-run times count from here
# (sweeps/run/display.py), not from the kernel's start of the process, which a shell's
# ``exec sweep`` inherits from the shell.
IMPORTED_AT = time.monotonic()


def __getattr__(name: str) -> Any:
    """``stepscale.__version__``, looked up when asked: reading the installed metadata costs
    every process that imports stepscale (a trainer's client too) ~30 ms otherwise."""
    if name != "__version__":
        raise AttributeError(f"module 'stepscale' has no attribute {name!r}")
    from importlib import metadata

    try:
        return metadata.version("stepscale")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"

"""stepscale: batch-size / learning-rate scaling studies of neural-network training, counted
in optimizer steps.

The code lives in four subpackages, installed under this one namespace so that nothing
generic lands in site-packages and a user's own ``models/`` folder cannot shadow ours:

- ``stepscale.sweeps``   the orchestrator (CLI, config schema, search spaces, scheduler);
- ``stepscale.models``   the built-in trainer (models, data, optimizers, training loop);
- ``stepscale.analysis`` everything that reads results (load, fits, figures, reports);
- ``stepscale.conf``     the Hydra config tree.

Modules directly in this package are the contracts every side may import (the run
directory's names and keys, JSON files, redaction); they import none of the subpackages.
See docs/architecture.md.
"""

from importlib import metadata

try:
    __version__ = metadata.version("stepscale")
except metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

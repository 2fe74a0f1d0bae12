"""`sweep export` reads configs and writes a document: in its own format (the default) it
imports no JAX and nothing of the built-in trainer but its config schema
(`stepscale.models.config`, plain dataclasses, whose keys say which paths a study may set).
(Another format reads its text back to list what it lost, which checks a parameter guessed
onto a name key — `schedule.name`, `optimizer.name` … — against the trainer's registries.)"""

from __future__ import annotations

import json
import subprocess
import sys

# Runs `sweep export` in a fresh interpreter, then lists the modules it imported.
CODE = """
import json, sys
from stepscale.cli.main import main
sys.argv = ["sweep", "export", "conf=batchsize_vs_steps", "--format", sys.argv[1]]
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def test_sweep_export_imports_no_jax_and_no_trainer_code() -> None:
    res = subprocess.run(
        [sys.executable, "-c", CODE, "stepscale"], capture_output=True, text=True, check=True
    )
    assert json.loads(res.stdout)["parameters"]  # the document
    modules = json.loads(res.stderr.strip().splitlines()[-1])
    heavy = [m for m in modules if m.split(".")[0] in ("jax", "jaxlib", "flax", "optax")]
    assert heavy == [], heavy[:5]
    models = [m for m in modules if m.startswith("stepscale.models")]
    assert models == ["stepscale.models", "stepscale.models.config"], models


def test_the_guessed_keys_that_take_names_are_the_trainers_choices() -> None:
    from stepscale.sweeps.formats.guesses import CHOICE_KEYS
    from stepscale.sweeps.trainers.builtin import trainer_choices

    assert set(CHOICE_KEYS) == set(trainer_choices())

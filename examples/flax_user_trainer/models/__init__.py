"""The user's own models package (not stepscale's).

A project may have a top-level ``models/`` of its own: stepscale installs its packages under
``stepscale.*`` (``stepscale.models``, ``stepscale.sweeps``, …) and imports a study's trainer
with the project's folders at the *end* of ``sys.path``, so ``from models.mlp import MLP`` in
``mytrainer/train.py`` finds this package and nothing of stepscale's.
"""

"""The orchestrator, in wings: `study` (what a study is), `trainers` (the trainer kinds),
`job` (what runs inside a trial's job), `launch` (launchers), `run` (the scheduler), and
`formats` (standard search-space formats). The `sweep` command is `stepscale.cli`."""

from stepscale.sweeps.moved import install as _install_old_paths

_install_old_paths()

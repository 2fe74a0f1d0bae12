"""The orchestrator: CLI, config schema and validation, studies, launchers."""

"""Optuna storage: the journal file in the run dir by default, SQLite, or PostgreSQL.

A password never travels in config, job pickles, logs or reports: a PostgreSQL URL comes
from config without it (the driver reads ``PGPASSWORD``) or from an environment variable
named by ``storage.url_env``; whatever is shown is passed through `redact` first.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from stepscale.redact import passwords_in, redact, scrub
from stepscale.rundir import JOURNAL, SQLITE_DB
from stepscale.sweeps.errors import UsageError
from stepscale.sweeps.schema import StorageConfig

if TYPE_CHECKING:
    import optuna

STORAGES = ("journal", "sqlite", "postgres")

__all__ = ["STORAGES", "StorageSpec", "open_storage", "redact", "resolve"]


@dataclass(frozen=True)
class StorageSpec:
    """What a job needs to open the storage again: never a password."""

    name: str
    url: str  # without password
    url_env: str | None = None

    def display(self) -> str:
        """The URL as shown to people."""
        return redact(self.url)


def resolve(cfg: StorageConfig, run_dir: Path) -> StorageSpec:
    """The storage of a study, with its default location in the run dir."""
    if cfg.name not in STORAGES:
        raise UsageError(f"storage.name: unknown {cfg.name!r}; choose one of {', '.join(STORAGES)}")
    if cfg.name == "journal":
        path = Path(cfg.url) if cfg.url else run_dir / JOURNAL
        return StorageSpec("journal", str(path.resolve()))
    if cfg.name == "sqlite":
        url = cfg.url or f"sqlite:///{(run_dir / SQLITE_DB).resolve()}"
        if not url.startswith("sqlite:///"):
            raise UsageError(f"storage.url: a sqlite URL starts with sqlite:///, got {redact(url)}")
        return StorageSpec("sqlite", url)
    if cfg.url and passwords_in(cfg.url):
        # Config lands in config.yaml, run.json's command line and job pickles: refuse it
        # even when url_env is set too (the config URL is then unused, but still written).
        raise UsageError(
            "storage.url: do not put a password in the config; set PGPASSWORD or name an "
            "environment variable holding the URL with storage.url_env"
        )
    url = os.environ.get(cfg.url_env, "") if cfg.url_env else (cfg.url or "")
    if not url:
        where = f"the environment variable {cfg.url_env}" if cfg.url_env else "storage.url"
        raise UsageError(
            f"storage: postgres needs a URL in {where} (postgresql://user@host:port/db)"
        )
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    # Keep the password out of the spec: jobs read it from the environment again.
    return StorageSpec("postgres", url if not cfg.url_env else redact(url), cfg.url_env)


def open_storage(spec: StorageSpec) -> optuna.storages.BaseStorage:
    """Open (creating if needed) the storage; unreachable or missing drivers → UsageError."""
    import optuna  # here: a trial job that never asks the pruner does not pay for it

    if spec.name == "journal":
        from stepscale.sweeps.journal import open_journal

        path = Path(spec.url)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return open_journal(path)
        except OSError as exc:
            raise UsageError(f"storage: cannot use journal file {path}: {exc.strerror}") from None
    url = os.environ.get(spec.url_env, "") if spec.url_env else spec.url
    if not url:
        raise UsageError(
            f"storage: the environment variable {spec.url_env} (storage.url_env) is not set "
            "here; it must hold the PostgreSQL URL wherever the study and its jobs run"
        )
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    if spec.name == "postgres":
        try:
            import psycopg  # noqa: F401
        except ImportError:
            raise UsageError(
                "storage=postgres needs the PostgreSQL driver: pip install 'stepscale[postgres]'"
            ) from None
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
    except Exception as exc:  # sqlalchemy raises many kinds; all mean "cannot use it"
        message = scrub(_first_line(exc), url)
        raise UsageError(f"storage: cannot reach {redact(url)}: {message}") from None


def _first_line(exc: BaseException) -> str:
    """The gist of a driver error: ``(psycopg.OperationalError) connection failed: …``
    without SQLAlchemy's prefix and "Background on this error" link."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    line = text.splitlines()[0]
    return re.sub(r"^\([\w.]+\)\s*", "", line) or type(exc).__name__

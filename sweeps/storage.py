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

import optuna

from sweeps.compose import UsageError
from sweeps.schema import StorageConfig

STORAGES = ("journal", "sqlite", "postgres")
_PASSWORD = re.compile(r"(?P<head>[a-z0-9+]+://[^:/@]*:)(?P<pw>[^@]*)(?P<tail>@)", re.IGNORECASE)


def redact(url: str) -> str:
    """``scheme://user:secret@host`` → ``scheme://user:***@host``."""
    return _PASSWORD.sub(lambda m: f"{m['head']}***{m['tail']}", url)


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
        path = Path(cfg.url) if cfg.url else run_dir / "study.journal"
        return StorageSpec("journal", str(path.resolve()))
    if cfg.name == "sqlite":
        url = cfg.url or f"sqlite:///{(run_dir / 'study.db').resolve()}"
        if not url.startswith("sqlite:///"):
            raise UsageError(f"storage.url: a sqlite URL starts with sqlite:///, got {redact(url)}")
        return StorageSpec("sqlite", url)
    url = os.environ.get(cfg.url_env, "") if cfg.url_env else (cfg.url or "")
    if not url:
        where = f"the environment variable {cfg.url_env}" if cfg.url_env else "storage.url"
        raise UsageError(
            f"storage: postgres needs a URL in {where} (postgresql://user@host:port/db)"
        )
    if cfg.url and _PASSWORD.search(cfg.url) and not cfg.url_env:
        raise UsageError(
            "storage.url: do not put a password in the config; set PGPASSWORD or name an "
            "environment variable holding the URL with storage.url_env"
        )
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    # Keep the password out of the spec: jobs read it from the environment again.
    return StorageSpec("postgres", url if not cfg.url_env else redact(url), cfg.url_env)


def open_storage(spec: StorageSpec) -> optuna.storages.BaseStorage:
    """Open (creating if needed) the storage; unreachable or missing drivers → UsageError."""
    if spec.name == "journal":
        from optuna.storages.journal import JournalFileBackend

        path = Path(spec.url)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
        except OSError as exc:
            raise UsageError(f"storage: cannot use journal file {path}: {exc.strerror}") from None
    url = os.environ[spec.url_env] if spec.url_env else spec.url
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
        message = redact(str(exc).splitlines()[0]) if str(exc) else type(exc).__name__
        raise UsageError(f"storage: cannot reach {redact(url)}: {message}") from None

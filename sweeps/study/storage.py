"""Optuna storage: the journal file in the run dir by default, SQLite, or PostgreSQL.

A password never travels in config, job pickles, logs or reports: a PostgreSQL URL comes
from config without it (the driver reads ``PGPASSWORD``) or from an environment variable
named by ``storage.url_env``; whatever is shown is passed through `redact` first.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from stepscale.errors import UsageError
from stepscale.redact import passwords_in, redact, scrub
from stepscale.rundir import JOURNAL, SQLITE_DB
from stepscale.sweeps.study.schema import StorageConfig

if TYPE_CHECKING:
    import optuna

STORAGES = ("journal", "sqlite", "postgres")

__all__ = ["STORAGES", "StorageSpec", "check_storage", "open_storage", "redact", "resolve"]

# Seconds a PostgreSQL server has to answer the check before the run dir is made.
CONNECT_TIMEOUT_S = 10
_POSTGRES_SCHEMES = ("postgresql", "postgres")


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
    url = _with_driver(url)
    if not cfg.url_env:  # a URL from the environment is checked where it is read
        _check_postgres_url(url, "storage.url")
    # Keep the password out of the spec: jobs read it from the environment again.
    return StorageSpec("postgres", url if not cfg.url_env else redact(url), cfg.url_env)


def _with_driver(url: str) -> str:
    """``postgresql://…`` with the driver SQLAlchemy is to use (psycopg 3)."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def _check_postgres_url(url: str, where: str) -> None:
    """A URL storage=postgres can use: parseable and of PostgreSQL (`UsageError` naming
    ``where`` otherwise; a MySQL or SQLite URL would fail later with a driver message)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise UsageError(
            f"{where}: cannot parse {redact(url)} as a database URL ({scrub(str(exc), url)}); "
            "storage=postgres takes postgresql://user@host:port/db"
        ) from None
    if parsed.get_backend_name() not in _POSTGRES_SCHEMES:
        raise UsageError(
            f"{where}: {redact(url)} is not a PostgreSQL URL (storage=postgres takes "
            "postgresql://user@host:port/db; for a SQLite file use storage=sqlite)"
        )


def check_storage(spec: StorageSpec, run_dir: Path, connect: bool = True) -> None:
    """Everything about the storage that can fail, checked before the run dir is made
    and without writing anything: the journal's folder, an existing SQLite file, the
    PostgreSQL URL, its driver and (``connect``) that the server answers. `UsageError`
    naming it."""
    if spec.name == "journal":
        path = Path(spec.url)
        inside = run_dir.resolve() in path.parents
        _check_writable_file(path, f"run_dir {run_dir}" if inside else "storage.url (the journal)")
        return
    if spec.name == "sqlite":
        _check_sqlite_file(Path(spec.url.removeprefix("sqlite:///")))
        return
    url = _postgres_url(spec)
    _check_postgres_url(
        url, f"the environment variable {spec.url_env}" if spec.url_env else "storage.url"
    )
    _check_driver()
    if not connect:
        return
    import sqlalchemy

    engine = sqlalchemy.create_engine(url, connect_args={"connect_timeout": CONNECT_TIMEOUT_S})
    try:
        with engine.connect():
            pass
    except Exception as exc:  # sqlalchemy raises many kinds; all mean "cannot use it"
        message = scrub(_first_line(exc), url)
        raise UsageError(f"storage: cannot reach {redact(url)}: {message}") from None
    finally:
        engine.dispose()


def _check_writable_file(path: Path, key: str) -> None:
    """``path`` is (or can become) a file this process writes: not a folder, and its
    nearest existing folder writable."""
    if path.is_dir():
        raise UsageError(f"{key}: {path} is a folder, not a file")
    existing = path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{key}: {existing} is not a folder, so {path} cannot be made")
    if (path.exists() and not os.access(path, os.W_OK)) or not os.access(existing, os.W_OK):
        raise UsageError(f"{key}: {path} cannot be written here (permission denied)")


def _check_sqlite_file(path: Path) -> None:
    """An existing SQLite file opens (read-only: nothing is created or changed)."""
    import sqlite3

    if path.is_dir():
        raise UsageError(f"storage.url: {path} is a folder, not a SQLite file")
    if not path.exists():
        return
    try:
        with contextlib.closing(
            sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        ) as db:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        raise UsageError(
            f"storage.url: {path} is not a SQLite database Optuna can use ({exc})"
        ) from None


def _postgres_url(spec: StorageSpec) -> str:
    """The full URL of a postgres spec (from the environment when ``url_env`` names it)."""
    url = os.environ.get(spec.url_env, "") if spec.url_env else spec.url
    if not url:
        raise UsageError(
            f"storage: the environment variable {spec.url_env} (storage.url_env) is not set "
            "here; it must hold the PostgreSQL URL wherever the study and its jobs run"
        )
    return _with_driver(url)


def _check_driver() -> None:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise UsageError(
            "storage=postgres needs the PostgreSQL driver: pip install 'stepscale[postgres]'"
        ) from None


def open_storage(spec: StorageSpec) -> optuna.storages.BaseStorage:
    """Open (creating if needed) the storage; unreachable or missing drivers → UsageError."""
    import optuna  # here: a trial job that never asks the pruner does not pay for it

    if spec.name == "journal":
        from stepscale.sweeps.study.journal import open_journal

        path = Path(spec.url)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return open_journal(path)
        except OSError as exc:
            raise UsageError(f"storage: cannot use journal file {path}: {exc.strerror}") from None
    if spec.name == "postgres":
        url = _postgres_url(spec)
        _check_driver()
    else:
        url = spec.url
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

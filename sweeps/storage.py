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

from stepscale.sweeps.compose import UsageError
from stepscale.sweeps.schema import StorageConfig

STORAGES = ("journal", "sqlite", "postgres")
# The password of ``scheme://user:secret@host``: up to the last "@" of the URL, so that a
# password holding a raw "@" or "/" is hidden whole (over-hiding is harmless).
_PASSWORD = re.compile(
    r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)(?P<pw>\S*)(?P<tail>@)", re.IGNORECASE
)
# libpq also takes it as a parameter: ``…/db?password=secret`` or ``password=secret host=…``.
_PARAM = re.compile(
    r"(?P<key>(?<![A-Za-z0-9_])(?:pg|ssl)?password=)(?P<value>[^&\s'\"]+)", re.IGNORECASE
)


def redact(url: str) -> str:
    """``scheme://user:secret@host`` → ``scheme://user:***@host``; ``password=secret`` →
    ``password=***``."""
    url = _PASSWORD.sub(lambda m: f"{m['head']}***{m['tail']}", url)
    return _PARAM.sub(lambda m: f"{m['key']}***", url)


def _passwords(url: str) -> list[str]:
    """The passwords written in a URL (to scrub them from messages that quote them)."""
    found = [m["pw"] for m in _PASSWORD.finditer(url)] + [m["value"] for m in _PARAM.finditer(url)]
    return [p for p in found if p and p != "***"]


def _scrub(text: str, url: str) -> str:
    """``text`` without the passwords of ``url`` (also if quoted outside a URL) nor any URL's."""
    for secret in sorted(_passwords(url), key=len, reverse=True):
        text = text.replace(secret, "***")
    return redact(text)


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
    if cfg.url and _passwords(cfg.url):
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
    if spec.name == "journal":
        from optuna.storages.journal import JournalFileBackend

        path = Path(spec.url)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
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
        message = _scrub(_first_line(exc), url)
        raise UsageError(f"storage: cannot reach {redact(url)}: {message}") from None


def _first_line(exc: BaseException) -> str:
    """The gist of a driver error: ``(psycopg.OperationalError) connection failed: …``
    without SQLAlchemy's prefix and "Background on this error" link."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    line = text.splitlines()[0]
    return re.sub(r"^\([\w.]+\)\s*", "", line) or type(exc).__name__

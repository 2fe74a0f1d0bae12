"""Compiled training programs kept on disk, so a new process at a known shape skips tracing.

JAX's persistent compilation cache (``train.compile_cache_dir``) saves XLA's compile, but a
new process still traces and lowers every program before it can look that cache up: for
the tiny models of a study about a second of CPU per program, for a large model tens of
seconds, paid again by every trial that runs in a process of its own (``launcher=process``,
SLURM and Ray jobs, a new warm worker). Here the compiled executable itself is saved
(`jax.experimental.serialize_executable`) under ``<compile_cache_dir>/executables`` and a
later process loads it instead of tracing.

A saved program is used only where it is the program this process would compile: its file
is named by a hash of

- the program's static key (``StepSpec.key`` and the chunk's length and kind: everything
  static that the in-process cache of models/step.py already keys on),
- the layout of its arguments (tree structure, shapes, dtypes, weak types, shardings),
- the source of every module of ``stepscale.models`` (the code that is traced) and, for
  code of a user's traced into the program (a data source registered from the user's
  own package: its sampler), every module of that package,
- JAX, jaxlib, Flax and Optax versions, the platform, every device, ``XLA_FLAGS`` and
  ``LIBTPU_INIT_ARGS``, and JAX's configuration (but for the settings of caches, logs and
  dumps, which change no program). On CPU, where devices are virtual and their number a
  flag (``--xla_force_host_platform_device_count``) or a setting (``jax_num_cpu_devices``),
  neither of them nor the number of devices counts: the devices a program runs on are part of its layout.

Anything else is a miss: the program is traced and compiled (with the persistent cache off:
an executable that cache loaded cannot be saved again, see `_compile_fresh`; the file saved
here takes its place) and saved. One process at a time compiles a given program: another
that misses the same file meanwhile (the warm workers of a study starting at one shape)
waits for it and loads what it saved (`_one_compiler`). A file that cannot be read or
loaded is a miss too, and one that cannot be written is skipped: the cache can make a run
faster, never fail it.
Only single-process runs use it (a multi-host program is compiled by every host together).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import logging
import os
import pickle
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np

log = logging.getLogger(__name__)

SUBDIR = "executables"
SUFFIX = ".xexe"
# How long a process waits for another one compiling the same program before it compiles
# the program itself (the other may be stopped; compiling twice is only slower)
COMPILE_WAIT_S = 600.0
# JAX settings that change no compiled program (a cache's place, what is logged or dumped)
_INERT_SETTINGS = (
    "compilation_cache",
    "persistent_cache",
    "log",
    "dump",
    "pprint",
    "traceback",
    "explain_cache_misses",
    "source_url",
    "include_debug_info",
)

# The flag and JAX's setting that give a CPU process its number of (virtual) devices
_HOST_DEVICE_COUNT = "--xla_force_host_platform_device_count"
_CPU_DEVICE_COUNT_SETTINGS = ("jax_num_cpu_devices",)

_directory: Path | None = None


def configure(compile_cache_dir: str | Path | None) -> None:
    """Keep executables under ``compile_cache_dir``/executables (created on the first save);
    ``None`` or ``""`` turns the cache off for this process."""
    global _directory
    _directory = Path(compile_cache_dir) / SUBDIR if compile_cache_dir else None


def directory() -> Path | None:
    """Where this process keeps executables, or None when the cache is off."""
    return _directory


@functools.cache
def _code_fingerprint() -> str:
    """A hash of the source of every module of the models package (what gets traced)."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.cache
def _package_fingerprint(module_name: str) -> str | None:
    """A hash of the source of the user's code that defines ``module_name``: every module of
    its top-level package (a module of no package, or of a namespace package: its own file).
    "" for this package's own code (in `_code_fingerprint`); None when the code has no
    source file to read (then its programs are not kept on disk)."""
    import sys

    if module_name.startswith("stepscale."):
        return ""
    top = sys.modules.get(module_name.partition(".")[0])
    top_file = getattr(top, "__file__", None)
    if top_file and Path(top_file).name == "__init__.py":
        files = sorted(Path(top_file).resolve().parent.rglob("*.py"))
    else:
        own = getattr(sys.modules.get(module_name), "__file__", None)
        if not own:
            return None
        files = [Path(own).resolve()]
    digest = hashlib.sha256()
    for source in files:
        try:
            digest.update(str(source).encode() + b"\0" + source.read_bytes() + b"\0")
        except OSError:
            return None
    return digest.hexdigest()


def _traced_code_fingerprint(code: tuple[Any, ...]) -> str | None:
    """`_package_fingerprint` of the module of each function or object in ``code``; None if
    one of them has no source to read."""
    names = sorted({getattr(obj, "__module__", None) or type(obj).__module__ for obj in code})
    prints = [_package_fingerprint(name) for name in names]
    if any(p is None for p in prints):
        return None
    return "|".join(f"{name}:{p}" for name, p in zip(names, prints, strict=True))


@functools.cache
def _environment_fingerprint() -> str:
    """A hash of what, besides the code, decides the compiled program: library versions,
    platform, devices, XLA's flags and JAX's settings."""
    import flax
    import jaxlib
    import optax

    backend = jax.devices()[0].client
    on_cpu = backend.platform == "cpu"
    # A process's CPU devices are virtual, as many as a flag or JAX's setting asks for: a
    # program does not depend on how many there are beside the ones it runs on (named in its
    # layout), so a 1-device program compiled where 4 were made serves a 1-device process.
    count_settings = _CPU_DEVICE_COUNT_SETTINGS if on_cpu else ()
    settings = sorted(
        (name, repr(value))
        for name, value in jax.config.values.items()
        if not any(word in name for word in _INERT_SETTINGS) and name not in count_settings
    )
    flags = os.environ.get("XLA_FLAGS", "")
    devices = repr([(d.id, d.device_kind, d.process_index) for d in jax.devices()])
    if on_cpu:
        flags = " ".join(f for f in flags.split() if not f.startswith(_HOST_DEVICE_COUNT))
        devices = repr(sorted({(d.device_kind, d.process_index) for d in jax.devices()}))
    parts = [
        jax.__version__,
        jaxlib.__version__,
        flax.__version__,
        optax.__version__,
        backend.platform,
        backend.platform_version,
        devices,
        flags,
        os.environ.get("LIBTPU_INIT_ARGS", ""),
        repr(settings),
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _leaf_layout(leaf: Any) -> tuple[Any, ...]:
    if isinstance(leaf, jax.Array):
        return ("a", leaf.shape, leaf.dtype, leaf.weak_type, leaf.sharding)
    if isinstance(leaf, np.ndarray | np.generic):
        return ("n", leaf.shape, leaf.dtype)
    return ("p", type(leaf))  # a Python scalar: traced as a weakly typed value


def _layout(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """What of the arguments decides the program: tree structure and each leaf's layout."""
    leaves, tree = jax.tree_util.tree_flatten(args)
    return (tree, *(_leaf_layout(leaf) for leaf in leaves))


def _layout_text(layout: tuple[Any, ...], devices: list[Any]) -> str:
    def sharding_text(item: Any) -> str:
        if isinstance(item, jax.sharding.NamedSharding):
            mesh = item.mesh
            ids = [int(d.id) for d in np.asarray(mesh.devices).flat]
            return f"{item!r}@{mesh.axis_names}{mesh.devices.shape}{ids}"
        if isinstance(item, jax.sharding.Sharding):
            return f"{item!r}@{sorted(int(d.id) for d in item.device_set)}"
        return repr(item)

    leaves = [tuple(sharding_text(x) for x in leaf) for leaf in layout[1:]]
    return f"{layout[0]}|{leaves}|{[int(d.id) for d in devices]}"


class CachedProgram:
    """A jitted function whose compiled executables are also kept on disk (see the module's
    docstring). Called like the function; ``static_key`` names what is static about it,
    ``devices`` are the devices it runs on (a mesh's, in order) and ``code`` the functions
    from outside this package that it traces (a user's data sampler)."""

    def __init__(
        self, jitted: Any, static_key: str, devices: list[Any], code: tuple[Any, ...] = ()
    ) -> None:
        self.jitted = jitted
        self.static_key = static_key
        self.devices = devices
        self.code = code
        self._loaded: dict[tuple[Any, ...], Callable[..., Any]] = {}

    def __call__(self, *args: Any) -> Any:
        """Run the program on ``args``: a program of this process, one loaded from disk, or
        (the cache off, or a multi-process run) the jitted function itself."""
        if _directory is None or jax.process_count() > 1:
            return self.jitted(*args)
        layout = _layout(args)
        program = self._loaded.get(layout)
        if program is None:
            text = _layout_text(layout, self.devices)
            traced = _traced_code_fingerprint(self.code)
            # an object's address in the layout would name a new file in every process, and
            # code without a source file to hash could change unseen: those are not kept
            if " at 0x" in text or traced is None:
                program = self.jitted
            else:
                program = self._resolve(_directory, text + "|" + traced, args)
            self._loaded[layout] = program
        return program(*args)

    def _resolve(self, folder: Path, layout_text: str, args: tuple[Any, ...]) -> Any:
        """The program from disk, or compiled (then saved); ``layout_text`` names the
        arguments' layout and the user's code traced."""
        key = hashlib.sha256(
            "\0".join(
                [
                    self.static_key,
                    layout_text,
                    _code_fingerprint(),
                    _environment_fingerprint(),
                ]
            ).encode()
        ).hexdigest()
        path = folder / f"{key}{SUFFIX}"
        loaded = _load(path, self.devices)
        if loaded is None:
            with _one_compiler(path) as waited:
                if waited:  # what the other process saved while this one waited for it
                    loaded = _load(path, self.devices)
                if loaded is None:
                    compiled, fresh = _compile_fresh(self.jitted, args)
                    if fresh:
                        _save(path, compiled)
                        log.debug("compiled %s and saved it at %s", self.static_key, path)
                    return compiled
        log.debug("loaded %s from %s", self.static_key, path)
        return loaded


@contextlib.contextmanager
def _one_compiler(path: Path) -> Iterator[bool]:
    """Held while this process compiles the program to be saved at ``path``: a process that
    misses the same program meanwhile waits here, then loads the saved file instead of
    compiling it at the same time (N processes starting at one shape on one machine paid N
    compiles, on the same cores). An exclusive ``flock`` on ``<key>.lock`` beside it, freed
    when the holder ends however it ends. Where no lock can be had (a read-only folder, a
    file system without ``flock``) or after `COMPILE_WAIT_S` of waiting, the process
    compiles without it: the lock can make a start cheaper, never block or fail a run.
    Yields whether another process held the lock (and may have saved the program)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.with_suffix(".lock"), os.O_CREAT | os.O_RDWR, 0o644)
    except OSError:
        fd = None
    try:
        yield fd is not None and _acquire(fd, path)
    finally:
        if fd is not None:
            os.close(fd)  # releases the lock


def _acquire(fd: int, path: Path) -> bool:
    """Take the exclusive lock on ``fd``, waiting up to `COMPILE_WAIT_S` for its holder;
    whether another process held it."""
    deadline = time.monotonic() + COMPILE_WAIT_S
    waited = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return waited
        except BlockingIOError:
            if time.monotonic() > deadline:
                log.info("compiling %s although another process still compiles it", path)
                return True
            waited = True
            time.sleep(0.05)
        except OSError:  # no flock on this file system
            return waited


# JAX's event for every backend compile (a persistent-cache hit included)
_BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


_FRESH_COMPILE = threading.Lock()  # JAX's cache setting is global: one such compile at a time


def _compile_fresh(jitted: Any, args: tuple[Any, ...]) -> tuple[Any, bool]:
    """``jitted`` compiled for ``args`` with JAX's persistent cache off, and whether XLA
    compiled it here and now (not a program this process had compiled before). Only such a
    program can be saved: one that the persistent cache loaded serializes without the
    kernels it calls on CPU ("Function ... not found" when a later process runs it)."""
    from jax.experimental.compilation_cache import compilation_cache

    compiles: list[str] = []
    me = threading.get_ident()

    def listen(event: str, duration: float, **kwargs: Any) -> None:
        if event == _BACKEND_COMPILE_EVENT and threading.get_ident() == me:
            compiles.append(event)

    with _FRESH_COMPILE:
        cached = bool(jax.config.values["jax_enable_compilation_cache"])
        jax.monitoring.register_event_duration_secs_listener(listen)
        try:
            if cached:
                jax.config.update("jax_enable_compilation_cache", False)
                compilation_cache.reset_cache()  # JAX decides once whether its cache is used
            compiled = jitted.lower(*args).compile()
        finally:
            jax.monitoring.unregister_event_duration_listener(listen)
            if cached:
                jax.config.update("jax_enable_compilation_cache", True)
                compilation_cache.reset_cache()
    return compiled, bool(compiles)


def _load(path: Path, devices: list[Any]) -> Any:
    """The executable saved at ``path``, or None (absent, unreadable or not loadable here)."""
    from jax.experimental import serialize_executable

    try:
        blob = path.read_bytes()
    except OSError:
        return None
    try:
        payload, in_tree, out_tree = pickle.loads(blob)
        return serialize_executable.deserialize_and_load(
            payload, in_tree, out_tree, execution_devices=devices
        )
    except Exception as exc:  # a damaged or foreign file is a miss, never a failed run
        log.warning("ignoring the saved executable %s: %s: %s", path, type(exc).__name__, exc)
        return None


def _save(path: Path, compiled: Any) -> None:
    """Write ``compiled`` at ``path`` atomically (another process may write the same key);
    a program that cannot be serialized, or a disk that refuses the file, is skipped."""
    from jax.experimental import serialize_executable

    try:
        blob = pickle.dumps(serialize_executable.serialize(compiled))
    except Exception as exc:  # not serializable (a backend without the support): no cache
        log.info("not saving an executable: %s: %s", type(exc).__name__, exc)
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=SUFFIX)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        log.info("not saving an executable at %s: %s", path, exc.strerror or exc)

"""A warm worker process (`launcher=local`): it imports once and runs trial jobs one after
another, so a trial pays no process start, no imports, no backend start and, at a shape
it has seen, no compile (compiled programs stay in memory, keyed by what forces a
recompile; `stepscale.models.step`).

It talks to its orchestrator (`sweeps.launch.workers`) over a socket it inherited: it says it is
ready, then takes jobs ``(job id, callable, args, log paths, result path, trial folder)``.
Each job runs in its trial folder with its output in the trial's logs and the environment
restored after it; its outcome is sent back and also written where a submitit job writes
it (``<logs>/<job id>_0_result.pkl``: ``("success", result)`` or ``("error", traceback)``),
so a later orchestrator reads a dead trial's outcome the same way for every launcher.

The worker ends after a job that was stopped (SIGTERM from `sweep stop`/Ctrl-C of the
orchestrator, or the terminal's Ctrl-C), when told to, when its orchestrator is gone, or
when it has run its share of trials or grown past its memory limit (a fresh one replaces
it). A job that crashes the process (segfault, ``os._exit``, the OOM killer, ``kill -9``)
takes down only this worker; its orchestrator sees that and retries the trial.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ENV_WORKER = "STEPSCALE_WORKER"  # set in a warm worker (sweeps.job.trial_job reads it)


def rss_bytes() -> int:
    """This process's resident memory now."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@contextlib.contextmanager
def _job_context(folder: Path, out: Path, err: Path) -> Iterator[None]:
    """Run in ``folder`` with stdout/stderr (the file descriptors, so child programs too)
    appended to the job's logs, and the environment as it was before, afterwards."""
    env = dict(os.environ)
    cwd = os.getcwd()
    out.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(out, "ab", buffering=0) as fo, open(err, "ab", buffering=0) as fe:
        os.dup2(fo.fileno(), 1)
        os.dup2(fe.fileno(), 2)
        try:
            os.chdir(folder)
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(env)


def _write_result(path: Path, outcome: tuple[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            pickle.dump(outcome, f)
        os.replace(tmp, path)
    except Exception:  # an unpicklable result, a full disk: the socket still tells it
        with contextlib.suppress(OSError):
            tmp.unlink()


def _exit_with_parent(parent: int) -> None:
    """End this worker (as a stop signal would) once its orchestrator is gone."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), 15)  # SIGTERM: a running trial checkpoints, an idle one ends

    threading.Thread(target=watch, daemon=True).start()


def serve(conn: Connection, max_trials: int, max_rss: int) -> None:
    """Take jobs until told to stop (see the module docstring)."""
    done = 0
    conn.send_bytes(pickle.dumps(("ready", os.getpid())))
    while True:
        try:
            message = pickle.loads(conn.recv_bytes())  # cloudpickle's bytes: plain loads
        except (EOFError, OSError, KeyboardInterrupt):
            return
        if message[0] != "run":
            return
        _, job_id, fn, args, folder, out, err, result_path = message
        stopped = False
        with _job_context(Path(folder), Path(out), Path(err)):
            try:
                outcome: tuple[str, Any] = ("success", fn(*args))
            except (KeyboardInterrupt, SystemExit) as exc:  # stopped: checkpointed, no result
                stopped = True
                outcome = ("stopped", repr(exc))
            except BaseException:
                trace = traceback.format_exc()
                print(trace, file=sys.stderr, flush=True)
                outcome = ("error", trace)
        if not stopped:
            _write_result(Path(result_path), outcome)
        done += 1
        rss = rss_bytes()
        try:
            reply = pickle.dumps(("done", job_id, outcome, rss))
        except Exception as exc:  # a result that cannot be pickled: the job failed
            reply = pickle.dumps(("done", job_id, ("error", f"unpicklable result: {exc!r}"), rss))
        with contextlib.suppress(OSError):
            conn.send_bytes(reply)
        if stopped or done >= max_trials > 0 or (max_rss > 0 and rss > max_rss):
            return


def main() -> None:
    """Entry point: ``python -c '…main()' FD CORES MAX_TRIALS MAX_RSS_BYTES``."""
    fd, cores, max_trials, max_rss = sys.argv[1:5]
    # Jobs import a user's trainer from its own path; the orchestrator's working directory
    # (first on sys.path for `python -c`) must not shadow anything.
    sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]
    if cores:
        with contextlib.suppress(AttributeError, OSError):
            os.sched_setaffinity(0, {int(c) for c in cores.split(",")})
    os.environ[ENV_WORKER] = "1"
    _exit_with_parent(os.getppid())
    serve(Connection(int(fd)), int(max_trials), int(max_rss))


if __name__ == "__main__":
    main()

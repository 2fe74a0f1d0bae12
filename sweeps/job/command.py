"""A command trainer inside a trial's job: run the program (in the trial folder, or
``trainer.cwd``), follow its records (the ``metrics.jsonl`` it appends to, or the lines of
its own output that ``trainer.metrics`` reads: `sweeps.trainers.output_sources`); Optuna hears its
eval losses, the heartbeat its step; pass the pruner's verdict back (``control.json``, and
for a script that prints its metrics, ``trainer.stop_signal``, then SIGKILL after
``trainer.stop_grace_s``); forward stop signals.

The program gets the trial's config as ``config.yaml``/``config.json`` in the trial folder,
the study's settings as arguments in its own style (``trainer.args``: `sweeps.trainers.arg_styles`)
and the ``STEPSCALE_*`` environment (`stepscale.trainer`). A non-zero exit fails the attempt
(the orchestrator retries it as the same trial) unless the trial was pruned; so does a
malformed metrics.jsonl line, and a run whose output gave no record at all. Its output
lands in the trial's logs whole; a failure's message quotes the end of its stdout and
stderr, redacted (`stepscale.redact.redact_output`).

A program that misbehaves (docs/trainers.md, "When a script misbehaves") runs in a session
of its own, and it and everything it started are ended with the trial (`sweeps.job.reaper`);
one that gives no record for ``trainer.inactivity_s`` (scaled to its own rhythm) is ended as
hung; its patterns run with a bound (`sweeps.trainers.patterns`) and its sources are read in
bounded pieces.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from stepscale.errors import signal_name
from stepscale.events import record_event
from stepscale.files import read_json, write_json_atomic
from stepscale.redact import redact_output, secret_values
from stepscale.reporters import finite_or_none, truncate_jsonl
from stepscale.rundir import (
    COMPLETE,
    CONTROL_JSON,
    DIVERGED,
    METRICS_JSONL,
    PRUNED,
    SPIKE_RESTART,
    STATUS_JSON,
)
from stepscale.sweeps.job.reaper import (
    become_subreaper,
    end_group,
    kill_marked,
    record_leftovers,
    signal_group,
    start_marked,
)
from stepscale.sweeps.trainers.arg_styles import fill, flat_config, hydra_value
from stepscale.sweeps.trainers.metrics_file import (
    MalformedRecord,
    UnreadableSource,
    last_step,
    normalized_records,
)
from stepscale.sweeps.trainers.output_sources import JsonlSource, final_records, open_source
from stepscale.sweeps.trainers.patterns import PatternTimeout
from stepscale.sweeps.trainers.trial_paths import placeholder_trial_dir
from stepscale.trainer import ENV_RESUME_STEP, FINAL_STATES, Action

POLL_S = 0.02  # how often the job looks for new records while the program runs
# The last lines of each stream a failure quotes (trial.json keeps 2000 characters of it).
TAIL_LINES = {"stderr": 6, "stdout": 3}


class CommandFailed(RuntimeError):
    """The trainer program exited with a non-zero code (or was killed), or gave no record."""


def override_value(value: Any) -> str:
    """A value as Hydra's override grammar reads it (`sweeps.trainers.arg_styles.hydra_value`)."""
    return hydra_value(value)


def placeholder_values(spec: Any, restarts: dict[str, int] | None = None) -> dict[str, Any]:
    """What the placeholders of a trial's command name: the trial's config by dotted key,
    ``trial_dir``, ``seed``, ``max_steps`` and ``python``; ``restart_step`` and
    ``batches_skipped`` (``restarts``: `CommandRestarts.placeholders`; 0 without)."""
    values = flat_config(spec.config)
    values |= {
        "trial_dir": placeholder_trial_dir(spec.trial_dir),  # a path without '=' (aliases/)
        "seed": spec.seed,
        "max_steps": int(spec.horizon),
        "python": sys.executable,
        "restart_step": 0,
        "batches_skipped": 0,
        **(restarts or {}),
    }
    return values


def command_line(
    spec: Any,
    resuming: bool = False,
    restarts: dict[str, int] | None = None,
    restarting: bool = False,
) -> list[str]:
    """The program's argv: the command (placeholders filled), the study's settings in the
    script's argument style, and ``trainer.restart_args`` when ``restarting`` after a loss
    spike, else ``trainer.resume_args`` when ``resuming`` (``restarts``: the restart
    placeholders' values)."""
    trainer = spec.trainer
    values = placeholder_values(spec, restarts)
    booleans = trainer.args.booleans
    argv = [fill(a, values, booleans) for a in trainer.command]
    argv += trainer.args.render(spec.settings, values)
    if restarting:
        argv += [fill(a, values, booleans) for a in trainer.restart_args]
    elif resuming:
        argv += [fill(a, values, booleans) for a in trainer.resume_args]
    return argv


def run_command(spec: Any, reporter: Any, stop: Any) -> dict[str, Any]:
    """Run the trainer program of ``spec`` (a `TrialSpec`) to its end; returns its status.
    The program and everything it starts end with it (`sweeps.job.reaper`); under a spike
    policy it is ended and run again from a checkpoint before each spike
    (`sweeps.job.command_restarts`)."""
    trainer = spec.trainer
    folder = Path(spec.trial_dir)
    control = folder / CONTROL_JSON
    for stale in (control, folder / STATUS_JSON):
        stale.unlink(missing_ok=True)
    parsed = trainer.metrics.parsed
    metrics_path = folder / METRICS_JSONL
    resume = last_step(metrics_path)
    # A spike policy (command_restarts.py); a job killed mid-restart does the restart again.
    restarts = None
    if spec.on_spike:  # imported only then: it reaches the built-in trainer's spike rule
        from stepscale.sweeps.job.command_restarts import CommandRestarts

        restarts = CommandRestarts(spec.on_spike, folder)
    restart_at = restarts.pending if restarts is not None else None
    if restart_at is not None:
        truncate_jsonl(metrics_path, restart_at)
        resume = min(resume, restart_at)
    resuming = resume > 0 and (bool(trainer.resume_args) or not parsed)
    if parsed:
        # The job writes metrics.jsonl: kept up to the resumed step, or started afresh (a
        # script that cannot resume starts again from step 0 and its records replace these).
        reporter.begin(resume if resuming or restart_at is not None else 0)
    else:
        reporter.heartbeat.step = resume
        reporter.loggers.begin(resume)  # the loggers follow the file from the resumed step
        record_event(folder, "start" if resume == 0 else "resume", resume)
    if restarts is not None:
        restarts.prime([r for r in normalized_records(metrics_path) if r["step"] <= resume])
    sys.stdout.flush()
    sys.stderr.flush()
    become_subreaper()  # orphans of the program come back to this job (reaper.py)
    earlier = kill_marked(folder)  # an earlier attempt's, whose job died: never two at once
    if earlier:
        record_leftovers(folder, resume, earlier, [], "job")
    secrets = secret_values(os.environ, trainer.secret_env)
    logs = LogTails()
    where = trainer.metrics.source
    seen = 0  # records the program gave
    floor = -1  # after a restart, the records up to its step are read again: not new
    diverged: dict[str, Any] | None = None  # a spike past the last restart ended the trial
    verdict = Action.CONTINUE
    while True:
        restarting = restart_at is not None
        told = resume if resuming or restarting else 0
        proc = subprocess.Popen(
            command_line(spec, resuming, restarts.placeholders() if restarts else None, restarting),
            cwd=trainer.cwd or folder,
            stdout=subprocess.PIPE if where in ("stdout", "output") else sys.stdout,
            stderr=subprocess.STDOUT
            if where == "output"
            else (subprocess.PIPE if where == "stderr" else sys.stderr),
            # A script that cannot resume restarts from step 0, and is told so.
            **start_marked(folder, {**os.environ, ENV_RESUME_STEP: str(told)}),
        )
        deadline: float | None = None  # when a signalled program is killed
        quiet = Inactivity(trainer.inactivity_s)
        ended = False
        spiked: tuple[int, str, float] | None = None  # the trigger of a restart

        def end(sig: int, grace_s: float, whole_group: bool = False) -> None:
            """End the program (``sig``, ``grace_s``, SIGKILL) and every process it started. A
            second stop signal meanwhile (the orchestrator's SIGTERM after a Ctrl-C) does not
            cut the program's grace short nor leave its processes: it is raised afterwards."""
            nonlocal ended
            if ended:
                return
            until = time.monotonic() + grace_s
            interrupted: KeyboardInterrupt | None = None
            send = True
            while True:
                try:
                    left = max(0.0, until - time.monotonic())
                    leftovers = end_group(
                        proc,  # noqa: B023  (end and follow are this run's: called only in it)
                        folder,
                        sig,
                        left,
                        whole_group=whole_group,
                        send=send,
                    )
                    break
                except KeyboardInterrupt as exc:
                    interrupted, send = exc, False
            ended = True
            if leftovers:
                record_leftovers(folder, reporter.heartbeat.step, leftovers, secrets, "job")
            if interrupted is not None:
                raise interrupted

        def follow(records: list[dict[str, Any]]) -> None:
            nonlocal verdict, deadline, seen, spiked
            if records:
                quiet.saw_record()  # noqa: B023
                seen += len(records)
            for record in records:
                if spiked is not None or record["step"] <= floor:  # noqa: B023
                    continue  # past a spike: a path to abandon; before floor: read again
                if restarts is not None:
                    spiked = restarts.check(record)
                    if spiked is not None:
                        continue
                    if restarts.pending is not None and record["step"] > restarts.pending:
                        restarts.restarted()  # the program runs on from the restart's step
                if parsed:
                    if verdict != Action.CONTINUE:
                        return  # what a pruned script prints while it stops is not its curve
                    step = record["step"]
                    metrics = {k: finite_or_none(v) for k, v in record.items() if k != "step"}
                    action = reporter.report(step, metrics)
                else:
                    action = reporter.observe(record["step"], record)
                if action != Action.CONTINUE and verdict == Action.CONTINUE:
                    verdict = action
                    write_json_atomic(control, {"action": action.value, "step": record["step"]})
                    if parsed:  # the script does not read control.json: signal it
                        _signal(proc, trainer.stop_signal)  # noqa: B023
                        name = signal_name(trainer.stop_signal)
                        record_event(folder, f"{action.value}_signal", record["step"], signal=name)
                        deadline = time.monotonic() + trainer.stop_grace_s

        try:
            source = _source(spec, proc, resuming or restarting)
            try:
                while True:
                    exited = proc.poll() is not None
                    if exited:
                        end(signal.SIGTERM, 0.0)  # what it left behind (a pipe's holder too)
                        follow(final_records(source))
                        break
                    follow(source.read_new())
                    if spiked is not None:  # the path after it is abandoned: no grace
                        end(signal.SIGKILL, 0.0, whole_group=True)
                        break
                    if deadline is not None and time.monotonic() > deadline:
                        signal_group(proc.pid, signal.SIGKILL)
                    hung = quiet.overdue() if deadline is None else None
                    if hung is not None:
                        end(trainer.stop_signal, trainer.stop_grace_s)
                        record_event(folder, "inactive", reporter.heartbeat.step, silent_s=hung)
                        raise CommandFailed(quiet.message(hung) + logs.quote(source, secrets))
                    time.sleep(POLL_S)
            except (MalformedRecord, PatternTimeout, UnreadableSource) as exc:
                end(signal.SIGTERM, 10.0)
                exc.args = (redact_output(str(exc), secrets),)  # it quotes a line of output
                raise
            except KeyboardInterrupt:
                # A stop signal, or Ctrl-C (which the program, in a session of its own, did
                # not get from the terminal: the job passes it on to its whole group): let the
                # program save its checkpoint, then stop as the job does — unless it finished
                # its run meanwhile: then the trial is finished.
                if stop.received is not None:
                    sig = trainer.stop_signal if stop.received == signal.SIGTERM else stop.received
                    end(sig, trainer.stop_grace_s)
                else:
                    end(signal.SIGINT, trainer.stop_grace_s, whole_group=True)
                ran_to_end = _status_written(folder) is not None or _at_end(folder, spec)
                if proc.returncode != 0 or not ran_to_end:
                    raise
                follow(final_records(source))
        finally:
            end(signal.SIGKILL, 0.0, whole_group=True)  # left by an error: nothing survives
        if spiked is None or restarts is None or verdict != Action.CONTINUE:
            break
        back = restarts.back_to(spiked[0])
        if back is None:
            diverged = _spike_divergence(spiked, restarts.done.count)
            break
        entry = restarts.begin(spiked, back, spiked[0])
        record_event(
            folder,
            SPIKE_RESTART,
            spiked[0],
            **{k: v for k, v in entry.items() if k != "spike_step"},
        )
        print(
            f"stepscale: {spiked[1].replace('_', ' ')} at step {spiked[0]}: restart "
            f"{entry['restart']} of at most {restarts.max_restarts} from the checkpoint of "
            f"step {back}, skipping {restarts.skip} batches",
            file=sys.stderr,
            flush=True,
        )
        reporter.rewind(back)  # the records after it go; Optuna's are replaced as redone
        restarts.prime([r for r in normalized_records(metrics_path) if r["step"] <= back])
        restart_at = resume = floor = back
    if diverged is not None:
        status = {**diverged, **restarts.status(diverged["steps_done"])}  # type: ignore[union-attr]
        return status
    pruned = verdict == Action.PRUNE
    if pruned and parsed:
        text = _exit_text(proc.returncode) if proc.returncode else "the trainer command exited"
        print(f"stepscale: the trial was pruned; {text}", file=sys.stderr, flush=True)
    elif proc.returncode != 0:
        raise CommandFailed(_exit_text(proc.returncode) + logs.quote(source, secrets))
    elif parsed and source.stream.records == 0:
        text = source.stream.no_record_message(source.where)
        raise CommandFailed(
            redact_output(text, secrets)
            + logs.quote(
                source, secrets, skip="stdout" if source.where == "output" else source.where
            )
        )
    elif not parsed and seen == 0 and resume == 0 and _status_written(folder) is None:
        raise CommandFailed(_no_jsonl_message(folder, spec) + logs.quote(source, secrets))
    status = _status(folder, verdict, last_step(metrics_path))
    if restarts is not None:
        status |= restarts.status(int(status.get("steps_done") or 0))
    return status


def _spike_divergence(trigger: tuple[int, str, float], used: int) -> dict[str, Any]:
    """The status of a trial a spike ended after its last restart (the built-in's words)."""
    step, why, _ = trigger
    reason = (
        f"loss spike at step {step} after {used} restarts"
        if why != "non_finite_loss"
        else f"training loss is not finite at step {step} after {used} restarts"
    )
    return {"state": DIVERGED, "reason": reason, "steps_done": step, "diverged_step": step}


class Inactivity:
    """How long the program has given no record, against its limit: ``trainer.inactivity_s``
    at least, and `CADENCE` × the longest gap between its records so far (a slow trainer's
    own rhythm); 0 turns it off."""

    CADENCE = 10.0

    def __init__(self, floor_s: float) -> None:
        self.floor_s = floor_s
        self.last = time.monotonic()
        self.longest = 0.0
        self.reported = False

    def saw_record(self) -> None:
        """The program gave a record now."""
        now = time.monotonic()
        if self.reported:
            self.longest = max(self.longest, now - self.last)
        self.reported, self.last = True, now

    def limit(self) -> float:
        """The silence allowed now, in seconds."""
        return max(self.floor_s, self.CADENCE * self.longest)

    def overdue(self) -> float | None:
        """The seconds of silence, when past the limit; else None."""
        if self.floor_s <= 0:
            return None
        silent = time.monotonic() - self.last
        return silent if silent > self.limit() else None

    def message(self, silent: float) -> str:
        """Why the program was ended."""
        since = "its last record" if self.reported else "it started"
        return (
            f"the trainer gave no record for {silent:.0f} s since {since} and was ended as "
            f"hung (the inactivity limit: trainer.inactivity_s = {self.floor_s:g} s, or "
            f"{self.CADENCE:g} × the longest gap between its records, "
            f"{self.longest:.1f} s so far); raise trainer.inactivity_s if it is only slow "
            "(0: no limit)"
        )


def _no_jsonl_message(folder: Path, spec: Any) -> str:
    """Why a program that exited 0 with no record in metrics.jsonl failed: where the job
    looked, and where a script that moves must write."""
    cwd = spec.trainer.cwd
    moved = f" (it ran in {cwd})" if cwd else ""
    return (
        f"the trainer command exited without writing a record to {folder / METRICS_JSONL}, "
        f"where the job looked{moved}: a script that changes its working directory must "
        "write its records to $STEPSCALE_TRIAL_DIR/metrics.jsonl (or print them: "
        "trainer.metrics.source: stdout)"
    )


class LogTails:
    """The end of what the program wrote to the job's own stdout and stderr (the trial's
    log files, when they are files), since it started: a failure message quotes them
    (redacted), stderr last — a traceback's error ends the message."""

    READ = 16384  # bytes read from a log's end

    def __init__(self) -> None:
        self.starts: dict[str, tuple[int, int, int]] = {}  # name → (device, inode, offset)
        for name, fd in (("stdout", 1), ("stderr", 2)):
            try:
                st = os.fstat(fd)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                self.starts[name] = (st.st_dev, st.st_ino, st.st_size)

    def _tail(self, name: str) -> list[str]:
        fd = 1 if name == "stdout" else 2
        try:
            st = os.fstat(fd)
        except OSError:
            return []
        dev, ino, start = self.starts[name]
        if (st.st_dev, st.st_ino) != (dev, ino) or st.st_size <= start:
            return []
        first = max(start, st.st_size - self.READ)
        try:  # a log is opened for writing only: read it again through /proc
            with open(f"/proc/self/fd/{fd}", "rb") as f:
                f.seek(first)
                data = f.read(st.st_size - first)
        except OSError:
            return []
        lines = [
            ln.rstrip("\r").rpartition("\r")[2] for ln in data.decode(errors="replace").split("\n")
        ]
        lines = [ln for ln in lines if ln.strip() and not ln.startswith("stepscale: ")]
        if first > start and lines:
            lines = lines[1:]  # the first may be cut
        return lines[-TAIL_LINES[name] :]

    def quote(self, source: Any, secrets: list[str], skip: str | None = None) -> str:
        """``; its stdout ends: …; its stderr ends: …`` ("" when nothing is known), each
        stream once (one log file for both is quoted once), a parsed stream's own last lines
        when its log cannot be read; not ``skip`` (a stream the message quotes already)."""
        parts = []
        seen: set[tuple[int, int]] = set()
        for name in ("stdout", "stderr"):  # stderr last: a traceback's error ends the message
            if name == skip:
                continue
            lines: list[str] = []
            if name in self.starts and self.starts[name][:2] not in seen:
                seen.add(self.starts[name][:2])
                lines = self._tail(name)
            if not lines and getattr(source, "parsed", False) and source.where == name:
                lines = list(source.stream.last_lines)[-TAIL_LINES[name] :]
            if lines:
                shown = "\n".join(f"    {line[:160]}" for line in lines)
                parts.append(f"its {name} ends:\n{shown}")
        text = ("; " + "; ".join(parts)) if parts else ""
        return redact_output(text, secrets)


def _source(spec: Any, proc: subprocess.Popen[bytes], resuming: bool = False) -> Any:
    """Where the records of ``proc`` come from (`sweeps.trainers.output_sources`)."""
    metrics = spec.trainer.metrics
    folder = Path(spec.trial_dir)
    if not metrics.parsed:
        return JsonlSource(folder / METRICS_JSONL)
    values = placeholder_values(spec)
    place = Path(folder)
    if metrics.source not in ("stdout", "stderr", "output"):
        place = Path(fill(metrics.source, values))
        place = place if place.is_absolute() else Path(spec.trainer.cwd or folder) / place
    pipes = {"stdout": proc.stdout, "stderr": proc.stderr}
    return open_source(metrics, pipes, place, values, resuming)


def _signal(proc: subprocess.Popen[Any], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)


def _status_written(folder: Path) -> dict[str, Any] | None:
    """The program's own final status.json, if it wrote one."""
    written = read_json(folder / STATUS_JSON, lenient=True)
    return written if isinstance(written, dict) and written.get("state") in FINAL_STATES else None


def _at_end(folder: Path, spec: Any) -> bool:
    """Did the program report its horizon's last step (it ran to its end)?"""
    return last_step(folder / METRICS_JSONL) >= int(spec.horizon)


def _status(folder: Path, verdict: Action, steps_done: int) -> dict[str, Any]:
    """The program's own final status.json if it wrote one, else what the job saw."""
    written = _status_written(folder)
    if written is not None:
        return written
    state = PRUNED if verdict == Action.PRUNE else COMPLETE
    return {"state": state, "steps_done": steps_done}


def _exit_text(code: int) -> str:
    if code < 0:
        name = signal_name(-code)
        return f"the trainer command was killed by {name}"
    return f"the trainer command exited with code {code}"

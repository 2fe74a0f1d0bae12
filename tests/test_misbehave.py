"""A training script that misbehaves cannot hang the study, leave processes behind, eat the
job's memory or leak a secret (docs/trainers.md, "When a script misbehaves").

The fast tests run one attempt of a trial through the job's own code (`run_trial`), in a
process of its own whose stdout/stderr are log files as in a real job, on tiny stdlib
scripts: a catastrophic pattern on a long line, a silent script, a forking script, an
endless or blocking metrics source, a script that moves away from its trial folder, one
that prints a password and dies with a traceback. The slow ones run whole studies through
`sweep run` and stop the orchestrator with `sweep stop`, SIGTERM and Ctrl-C; the cluster
ones do the same on the SLURM and Ray test clusters. After each, no process started for
the study is alive (every script carries a unique marker in its command line)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from helpers import output_of, read_jsonl, user_env

from stepscale import rundir

SWEEP = str(Path(sys.executable).with_name("sweep"))

# One attempt of a trial, run as a job runs it; argv: trial folder, trainer (JSON),
# settings (JSON), result file. Its stdout/stderr are the caller's log files.
DRIVER = """import json, os, sys
from pathlib import Path
from stepscale.sweeps.job.spec import TrialSpec
from stepscale.sweeps.job.trial_job import run_trial
from stepscale.sweeps.study.storage import StorageSpec
from stepscale.sweeps.trainers.spec import read_trainer
folder = Path(sys.argv[1])
trainer = read_trainer(json.loads(sys.argv[2]), [folder.parent])
spec = TrialSpec(
    trial="p/0", study_name="s/p", trial_id=0, number=0, trial_dir=str(folder), config={},
    storage=StorageSpec("journal", str(folder / "unused.journal")), trainer=trainer, seed=0,
    target_loss=None, pruner=None, horizon=20, attempt=1, settings=json.loads(sys.argv[3]),
)
try:
    out = {"status": run_trial(spec)}
except Exception as exc:
    out = {"error": f"{type(exc).__name__}: {exc}"}
status = Path("/proc/self/status").read_text().splitlines()
out["hwm_mb"] = int(next(s for s in status if s.startswith("VmHWM")).split()[1]) / 1024
Path(sys.argv[4]).write_text(json.dumps(out))
"""

# Every mode of misbehaviour, chosen by --mode; --marker is in the command line of every
# process it starts, so that a test can look for them.
SCRIPT = """import os, subprocess, sys, time
mode, marker = "ok", "none"
for arg in sys.argv[1:]:
    key, _, val = arg[2:].partition("=")
    globals()[key] = val
SLEEPER = [sys.executable, "-c", "import time; [time.sleep(1) for _ in range(300)]", marker]

def daemon():
    # a double-forked daemon in a session of its own, and a child that keeps stdout open
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, SLEEPER)
        os._exit(0)
    subprocess.Popen(SLEEPER)

if mode in ("fork", "fork_forever"):
    daemon()
if mode == "moved":
    os.makedirs("elsewhere", exist_ok=True)
    os.chdir("elsewhere")
if mode in ("devzero", "moved"):
    if mode == "devzero":
        os.symlink("/dev/zero", "metrics.jsonl")
    else:
        with open("metrics.jsonl", "w") as f:
            f.write('{"step": 0, "eval_loss": 3.0}\\n')
    time.sleep(0.5 if mode == "moved" else 300)
    sys.exit(0)
if mode == "fifo":
    os.mkfifo("out.log")
    time.sleep(300)
if mode == "endless":  # a file of zeros without a newline, growing 2.5 GB/s (sparse: no disk)
    open("out.log", "wb").close()
    for i in range(1, 3000):
        os.truncate("out.log", i * 2**28)
        time.sleep(0.1)
step = 0
while True:
    print(f"step {step} loss {4.0 - step / 100:.3f}", flush=True)
    if mode == "long" and step == 5:
        print("a" * 5000, flush=True)
    if mode == "silent" and step == 10:
        time.sleep(300)
    if mode == "secret" and step == 10:
        url = os.environ["DATABASE_URL"]
        print(f"connecting to {url} as {os.environ['MY_CRED']}", flush=True)
        print("token hf_" + "x" * 34, flush=True)
        raise RuntimeError(f"cannot connect to {url}")
    step += 5
    if step > 20 and mode != "fork_forever":
        break
    time.sleep(0.05 if mode != "fork_forever" else 0.5)
"""

# A pattern that reads the step lines, and backtracks catastrophically (a backreference:
# RE2 refuses it, so it runs with a time limit per line) on a long line of "a".
CATASTROPHIC = r"step (?P<step>\d+) loss (?P<eval_loss>\S+)|(?P<r>a|aa)+(?P=r)b"
STEP_PATTERN = r"step (?P<step>\d+) loss (?P<eval_loss>\S+)"
PASSWORD = "hunter2-Sekr1t"
CRED = "cred-value-42xyz"


def marked(marker: str) -> list[int]:
    """The live processes (not zombies) whose command line holds ``marker``."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            state = Path(f"/proc/{name}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state not in ("Z", "X"):
            pids.append(int(name))
    return pids


def none_alive_within(marker: str, seconds: float = 10.0) -> list[int]:
    """Wait up to ``seconds`` for every process of ``marker`` to be gone; what is left."""
    deadline = time.monotonic() + seconds
    while (alive := marked(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


def secret_env() -> dict[str, str]:
    env = user_env()
    env["DATABASE_URL"] = f"postgresql://trainer:{PASSWORD}@db.example:5432/runs"
    env["MY_CRED"] = CRED
    return env


def run_attempt(
    tmp_path: Path, mode: str, metrics: Any = None, **trainer: Any
) -> tuple[dict[str, Any], Path, float, str]:
    """One attempt of a trial of SCRIPT in ``mode``: (the driver's result, the trial
    folder, seconds it took, the marker)."""
    (tmp_path / "train.py").write_text(SCRIPT)
    folder = tmp_path / "trial"
    (folder / "logs").mkdir(parents=True)
    marker = f"mark{uuid.uuid4().hex}"
    spec = {
        "command": ["{python}", "train.py"],
        "args": "--key=value",
        "metrics": metrics
        if metrics is not None
        else {"source": "stdout", "format": "regex", "pattern": STEP_PATTERN},
        **trainer,
    }
    result = tmp_path / "result.json"
    started = time.monotonic()
    with (
        open(folder / "logs" / "job_0_log.out", "wb") as out,
        open(folder / "logs" / "job_0_log.err", "wb") as err,
    ):
        subprocess.run(
            [sys.executable, "-c", DRIVER, str(folder), json.dumps(spec),
             json.dumps({"mode": mode, "marker": marker}), str(result)],
            stdout=out, stderr=err, cwd=folder, env=secret_env(), timeout=120, check=True,
        )  # fmt: skip
    return json.loads(result.read_text()), folder, time.monotonic() - started, marker


def test_a_catastrophic_pattern_fails_the_attempt_in_seconds_naming_it(tmp_path: Path) -> None:
    metrics = {"source": "stdout", "format": "regex", "pattern": CATASTROPHIC}
    out, _folder, took, marker = run_attempt(tmp_path, "long", metrics)
    assert out["error"].startswith("PatternTimeout: trainer.metrics.pattern"), out
    assert repr(CATASTROPHIC) in out["error"] and "aaaa" in out["error"]
    assert took < 60, took  # the script alone would have run 1 s; a hang, forever
    assert none_alive_within(marker, 10) == []
    # the same pattern on a normal log reads it (RE2 is not used: a backreference)
    from stepscale.sweeps.trainers.patterns import BACKTRACKING, compile_pattern

    pattern = compile_pattern(CATASTROPHIC)
    assert pattern.engine == BACKTRACKING
    assert pattern.search("step 5 loss 2.5").groupdict()["eval_loss"] == "2.5"


def test_patterns_run_in_linear_time_where_re2_allows() -> None:
    from stepscale.sweeps.trainers.patterns import RE2, PatternError, compile_pattern

    nested = compile_pattern(r"(?P<step>\d+)(?P<x>(a+)+)$")  # exponential in Python's re
    assert nested.engine == RE2 and set(nested.groupindex) == {"step", "x"}
    started = time.monotonic()
    assert nested.search("1" + "a" * 100_000 + "b") is None
    assert time.monotonic() - started < 5
    line = "step 7: loss 2.5 ü"  # the groups come back as text, unmatched ones None
    pattern = compile_pattern(r"step (?P<step>\d+): loss (?P<loss>\S+) (?P<u>.)(?P<no>x)?")
    expected = {"step": "7", "loss": "2.5", "u": "ü", "no": None}
    assert pattern.search(line).groupdict() == expected
    pattern._spans = None  # the binding's public search, as a later version may need
    assert pattern.search(line).groupdict() == expected and pattern.search("no") is None
    with pytest.raises(PatternError, match="missing"):
        compile_pattern(r"(?P<step>\d+")


def test_a_silent_script_fails_after_the_inactivity_limit(tmp_path: Path) -> None:
    out, folder, took, marker = run_attempt(tmp_path, "silent", inactivity_s=2, stop_grace_s=1)
    assert out["error"].startswith("CommandFailed: the trainer gave no record for"), out
    assert "trainer.inactivity_s = 2 s" in out["error"]
    assert took < 60, took
    assert "inactive" in [e["event"] for e in read_jsonl(folder / rundir.EVENTS_JSONL)]
    assert [r["step"] for r in read_jsonl(folder / rundir.METRICS_JSONL)] == [0, 5, 10]
    assert none_alive_within(marker, 10) == []


def test_the_inactivity_limit_scales_with_the_scripts_own_cadence() -> None:
    from stepscale.sweeps.job.command import Inactivity

    quiet = Inactivity(2.0)
    assert quiet.limit() == 2.0
    quiet.saw_record()
    quiet.last -= 30.0  # a record 30 s after the first one …
    quiet.saw_record()
    assert quiet.limit() == pytest.approx(300.0, rel=0.01)  # … allows 10 × 30 s of silence
    assert Inactivity(0.0).overdue() is None  # 0: no limit


def test_processes_a_script_leaves_behind_are_killed_and_recorded(tmp_path: Path) -> None:
    out, folder, took, marker = run_attempt(tmp_path, "fork")
    assert out["status"]["state"] == "complete", out
    assert none_alive_within(marker, 1) == []  # already gone when the job returned
    (event,) = [e for e in read_jsonl(folder / rundir.EVENTS_JSONL) if e["event"] != "start"]
    assert event["event"] == "leftovers_killed" and event["processes"] == 2, event
    assert all(marker in c for c in event["commands"]) and event["by"] == "job"
    assert took < 8, took  # the child holding the output pipe did not make the job wait 10 s


@pytest.mark.parametrize("mode", ["devzero", "fifo"])
def test_an_endless_or_blocking_metrics_source_is_refused(tmp_path: Path, mode: str) -> None:
    metrics = "jsonl" if mode == "devzero" else {"source": "out.log", "format": "kv_colon"}
    out, _folder, _took, marker = run_attempt(tmp_path, mode, metrics)
    kind = "a character device" if mode == "devzero" else "a FIFO"
    assert out["error"].startswith("UnreadableSource: the metrics source"), out
    assert f"is {kind}, not a regular file: refused" in out["error"]
    assert out["hwm_mb"] < 500, out  # (3.7 GB in 12 s when /dev/zero was read whole)
    assert none_alive_within(marker, 10) == []


def test_an_endless_regular_file_keeps_the_jobs_memory_bounded(tmp_path: Path) -> None:
    metrics = {"source": "out.log", "format": "kv_colon"}
    out, _folder, _took, marker = run_attempt(tmp_path, "endless", metrics, inactivity_s=3)
    assert out["error"].startswith("CommandFailed: the trainer gave no record for"), out
    assert out["hwm_mb"] < 500, out
    assert none_alive_within(marker, 10) == []


def test_a_growing_file_is_read_in_bounded_chunks(tmp_path: Path) -> None:
    import tracemalloc

    from stepscale.sweeps.trainers.line_formats import MetricsSpec
    from stepscale.sweeps.trainers.output_sources import FileSource

    path = tmp_path / "out.log"
    source = FileSource(MetricsSpec("out.log", "kv_colon"), path)
    with open(path, "wb") as f:  # 256 MiB without a newline (sparse: instant)
        f.truncate(256 * 2**20)
    tracemalloc.start()
    try:
        reads = 0
        while source.offset < 256 * 2**20:
            assert source.read_new() == []
            reads += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert reads >= 64 and peak < 64 * 2**20, (reads, peak)
    with open(path, "ab") as f:
        f.write(b"\nstep: 5 eval_loss: 2.5\n")
    assert source.read_new() == [{"step": 5, "eval_loss": 2.5}]


def test_a_script_that_writes_its_metrics_elsewhere_fails_saying_where(tmp_path: Path) -> None:
    out, folder, _, _ = run_attempt(tmp_path, "moved", metrics="jsonl")
    assert out["error"].startswith("CommandFailed: the trainer command exited without"), out
    assert f"{folder / rundir.METRICS_JSONL}, where the job looked" in out["error"]


def test_a_failed_scripts_message_quotes_its_traceback_without_secrets(tmp_path: Path) -> None:
    out, folder, _, _ = run_attempt(tmp_path, "secret", secret_env=["MY_CRED"])
    error = out["error"]
    assert error.startswith("CommandFailed: the trainer command exited with code 1"), out
    # stderr first: the traceback's last line, its URL's password masked
    assert "its stderr ends:" in error and "Traceback (most recent call last)" in error
    assert "RuntimeError: cannot connect to postgresql://trainer:***@db.example" in error
    assert "its stdout ends:" in error and "as ***" in error and "token ***" in error
    assert PASSWORD not in error and CRED not in error and "hf_xxx" not in error
    raw = (folder / "logs" / "job_0_log.out").read_text()
    assert f"connecting to postgresql://trainer:{PASSWORD}@" in raw  # the script's own log


def test_secret_values_come_from_marked_and_secret_looking_names() -> None:
    from stepscale.redact import redact_output, secret_values

    env = {"MY_CRED": CRED, "WANDB_API_KEY": "k" * 40, "HOME": "/root/somewhere", "X_TOKEN": "1"}
    secrets = secret_values(env, ["MY_CRED"])
    assert secrets == ["k" * 40, CRED]  # longest first; "1" is too short to mask
    text = f"{CRED} {'k' * 40} /root/somewhere AKIAABCDEFGHIJKLMNOP ghp_{'a' * 36} sk-{'b' * 30}"
    assert redact_output(text, secrets) == "*** *** /root/somewhere *** *** ***"


# ------------------------------------------------- whole studies through `sweep run`

STUDY = """# @package _global_
trainer:
  command: ["{python}", train.py]
  cwd: scripts
  args: "--key=value"
  config: {mode: ok, marker: none}
  inactivity_s: 3
  stop_grace_s: 1
  secret_env: [MY_CRED]
  metrics:
    source: stdout
    format: regex
    pattern: 'PATTERN'
scientific:
  mode: {path: mode, values: [ok, long, silent, fork, secret]}
fixed:
  marker: {path: marker, value: MARKER}
# the scripts' losses do not fall toward the target: trials that cannot learn end early by
# that rule (docs/science.md), which these tests of misbehaviour leave out
budget: {trials_per_point: 1, max_steps: 20, no_progress_by: null}
objective: {kind: steps_to_target, target_loss: 3.0}
retries: 0
parallelism: 2
launcher: {name: local}
"""


def sweep(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The real console script, with the study's secrets in its environment."""
    return subprocess.run(
        [SWEEP, *args], cwd=cwd, env=secret_env(), capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A study of every misbehaviour (conf=misbehave), and its marker."""
    root = tmp_path_factory.mktemp("misbehave")
    marker = f"mark{uuid.uuid4().hex}"
    (root / "conf").mkdir()
    text = STUDY.replace("PATTERN", CATASTROPHIC).replace("MARKER", marker)
    (root / "conf" / "misbehave.yaml").write_text(text)
    (root / "scripts").mkdir()
    (root / "scripts" / "train.py").write_text(SCRIPT)
    return root, marker


def _files_holding(run_dir: Path, secret: str) -> dict[str, int]:
    """Every file under ``run_dir`` that holds ``secret``, and how many times."""
    found = {}
    for path in run_dir.rglob("*"):
        if path.is_file() and not path.is_symlink():
            count = path.read_bytes().count(secret.encode())
            if count:
                found[str(path.relative_to(run_dir))] = count
    return found


@pytest.mark.slow
def test_a_study_of_misbehaving_scripts_finishes_and_leaves_nothing(
    project: tuple[Path, str],
) -> None:
    root, marker = project
    run_dir = root / "run"
    args = ["run", "conf=misbehave", "--config-dir", str(root), f"run_dir={run_dir}"]
    res = sweep(*args, cwd=root)
    assert res.returncode == 0, res.stderr
    assert none_alive_within(marker, 10) == []
    trials = {
        p.parent.parent.name: json.loads(p.read_text())
        for p in (run_dir / "trials").glob("*/0/trial.json")
    }
    assert {k: t["state"] for k, t in trials.items()} == {
        "mode=ok": "complete",
        "mode=fork": "complete",
        "mode=long": "failed",
        "mode=silent": "failed",
        "mode=secret": "failed",
    }, trials
    assert trials["mode=long"]["error"].startswith("PatternTimeout: trainer.metrics.pattern")
    assert "gave no record for" in trials["mode=silent"]["error"]
    secret = trials["mode=secret"]["error"]
    assert "RuntimeError: cannot connect to postgresql://trainer:***@db.example" in secret
    # the password is nowhere but in the script's own output, as it printed it (once on
    # stdout, once in its traceback on stderr): the job quoted it masked
    logs = "trials/mode=secret/0/logs/"
    holding = _files_holding(run_dir, PASSWORD)
    assert sorted(holding.values()) == [1, 1] and all(
        p.startswith(logs) and p.endswith(("_log.out", "_log.err")) for p in holding
    ), holding
    assert _files_holding(run_dir, CRED).keys() <= {p for p in holding if p.endswith(".out")}
    status = sweep("status", str(run_dir), cwd=root)
    assert status.returncode == 0, status.stderr
    assert "failed mode=secret/0: CommandFailed: the trainer command exited with code 1" in (
        status.stdout
    )
    assert "RuntimeError: cannot connect to postgresql://trainer:***@" in status.stdout
    assert "leftovers_killed): mode=fork/0 (2)" in status.stdout, status.stdout
    assert PASSWORD not in status.stdout
    # the same command again: the failed trials stay failed, nothing hangs
    again = sweep(*args, cwd=root, timeout=120)
    assert again.returncode == 0, again.stderr
    assert none_alive_within(marker, 10) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("launcher", "hows"),
    [("local", ["sweep stop", "SIGTERM", "Ctrl-C"]), ("process", ["Ctrl-C"])],
)
def test_stopping_the_orchestrator_leaves_no_process_of_the_study(
    tmp_path: Path, launcher: str, hows: list[str]
) -> None:
    stop_a_forking_study(tmp_path, tmp_path / "run", [f"launcher={launcher}"], secret_env(), hows)


def test_a_sample_log_names_a_pattern_that_hits_its_bound(project: tuple[Path, str]) -> None:
    root, _ = project
    (root / "long.log").write_text("step 0 loss 4.0\n" + "a" * 5000 + "\nstep 5 loss 3.9\n")
    res = sweep(
        "run", "conf=misbehave", "--config-dir", str(root), "--dry-run", "--sample-log",
        "long.log", cwd=root, timeout=120,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert f"--sample-log long.log: trainer.metrics.pattern {CATASTROPHIC!r} took more" in (
        res.stderr
    )
    assert "Traceback" not in res.stderr


def forking_started(marker: str) -> bool:
    """Whether the forking script of ``marker`` runs with its child and its daemon, both
    sleeping: a state that lasts. Counting 3 processes of the marker is not: the daemon's
    intermediate process (a copy of the script) is one for a moment, and a process in the
    middle of exec shows an empty command line (the count read 3, then 2, in CI)."""
    commands = []
    for pid in marked(marker):
        with contextlib.suppress(OSError):
            commands.append(Path(f"/proc/{pid}/cmdline").read_bytes())
    sleeping = sum(b"time.sleep" in c for c in commands)
    return sleeping >= 2 and any(b"train.py" in c for c in commands)


def start_sweep_until_marked(
    args: list[str], root: Path, env: dict[str, str], marker: str, timeout: float
) -> subprocess.Popen[str]:
    """`sweep ARGS` in a session of its own, once the forking script, its child and its
    daemon run (`forking_started`); its output and the processes of ``marker`` in the
    failure if they never do within ``timeout`` seconds."""
    proc = subprocess.Popen(
        [SWEEP, *args], cwd=root, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + timeout
    while not forking_started(marker) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if proc.poll() is None and forking_started(marker):
        return proc
    run_dir = Path(next(a.split("=", 1)[1] for a in args if a.startswith("run_dir=")))
    seen = diagnosis(marker, run_dir)
    raise AssertionError(f"{output_of(proc)}\n{seen}")


def diagnosis(marker: str, run_dir: Path) -> str:
    """What to read when the forking script's processes are not all there: every process
    whose command line holds ``marker`` (zombies too) with its state, parent, group and
    session, then the run's events and the tails of its logs (the script's stderr)."""
    rows = []
    for name in sorted(os.listdir("/proc"), key=lambda n: (len(n), n)):
        if not name.isdigit():
            continue
        try:
            command = Path(f"/proc/{name}/cmdline").read_bytes()
            fields = Path(f"/proc/{name}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if marker.encode() in command:
            text = command.replace(b"\0", b" ").decode(errors="replace")[:160]
            code = f" exit={fields[-1]}" if fields[0] == "Z" else ""  # waitpid's status
            rows.append(
                f"  {name} {fields[0]}{code} ppid={fields[1]} pgid={fields[2]} sid={fields[3]} "
                f"started={fields[19]} {text}"
            )
    logs = []
    for path in sorted(run_dir.rglob("*")):
        if path.is_file() and (
            path.suffix in (".err", ".out", ".log") or path.name == "events.jsonl"
        ):
            logs.append(
                f"--- {path.relative_to(run_dir)}\n{path.read_text(errors='replace')[-1500:]}"
            )
    return "\n".join(["processes of the marker:", *rows, *logs])


def stop_a_forking_study(
    root: Path, run_dir: Path, launcher: list[str], env: dict[str, str], hows: Sequence[str]
) -> None:
    """Run the forking script as a study on ``launcher`` and stop it once the script, its
    child and its daemon run, once per way in ``hows`` (`sweep stop`, SIGTERM to the
    orchestrator's pid, Ctrl-C to its process group), the same command again each time
    (it resumes the stopped trial): 10 s after each stop no process of the study is alive
    (the cluster tests of test_slurm.py and test_ray.py)."""
    marker = f"mark{uuid.uuid4().hex}"
    (root / "conf").mkdir(exist_ok=True)
    text = STUDY.replace("PATTERN", STEP_PATTERN).replace("MARKER", marker)
    text = text.replace("launcher: {name: local}\n", "")
    (root / "conf" / "forking.yaml").write_text(text)
    (root / "scripts").mkdir(exist_ok=True)
    (root / "scripts" / "train.py").write_text(SCRIPT)
    args = [
        "run", "conf=forking", "--config-dir", str(root), f"run_dir={run_dir}",
        "scientific.mode.values=[fork_forever]", "trainer.inactivity_s=0", "parallelism=1",
        *launcher,
    ]  # fmt: skip
    exits = {"sweep stop": 0, "SIGTERM": 128 + signal.SIGTERM, "Ctrl-C": 128 + signal.SIGINT}
    for how in hows:
        proc = start_sweep_until_marked(args, root, env, marker, 240)
        try:
            if how == "SIGTERM":
                os.kill(proc.pid, signal.SIGTERM)
            elif how == "Ctrl-C":  # the terminal's Ctrl-C reaches its foreground group
                os.killpg(proc.pid, signal.SIGINT)
            else:
                stop = subprocess.run(
                    [SWEEP, "stop", str(run_dir)], cwd=root, env=env, capture_output=True,
                    text=True, timeout=240,
                )  # fmt: skip
                assert stop.returncode == 0, stop.stderr
            _, err = proc.communicate(timeout=240)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        assert none_alive_within(marker, 10) == [], (how, err)
        assert proc.returncode == exits[how], (how, err)
        (trial,) = run_dir.glob("trials/*/0/trial.json")
        record = json.loads(trial.read_text())
        assert record["state"] == "stopped" and record["attempts"] == 1, (how, record)


@pytest.mark.slow
def test_a_killed_job_leaves_no_process_of_its_trial(project: tuple[Path, str]) -> None:
    """The job itself dies (the OOM killer, kill -9) before it can end its program: the
    launcher ends what the program left (by its mark) and says so."""
    root, _ = project
    marker = f"mark{uuid.uuid4().hex}"
    run_dir = root / "killed-job"
    args = [
        "run", "conf=misbehave", "--config-dir", str(root), f"run_dir={run_dir}",
        "scientific.mode.values=[fork_forever]", f"fixed.marker.value={marker}",
        "trainer.inactivity_s=0",
    ]  # fmt: skip
    proc = start_sweep_until_marked(args, root, secret_env(), marker, 120)
    try:
        alive = marked(marker)
        # the warm worker is the script's parent
        (script,) = [p for p in alive if b"train.py" in Path(f"/proc/{p}/cmdline").read_bytes()]
        worker = int(Path(f"/proc/{script}/stat").read_text().rpartition(")")[2].split()[1])
        os.kill(worker, signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err
    assert none_alive_within(marker, 10) == [], err
    folder = run_dir / "trials" / "mode=fork_forever" / "0"
    assert json.loads((folder / rundir.TRIAL_JSON).read_text())["state"] == "failed"
    killed = [
        e for e in read_jsonl(folder / rundir.EVENTS_JSONL) if e["event"] == "leftovers_killed"
    ]
    assert killed and killed[0]["by"] == "launcher" and killed[0]["processes"] >= 2, killed


def test_an_earlier_attempts_leftovers_are_ended_before_the_next_starts(tmp_path: Path) -> None:
    """A job killed with its whole process group (its program died with it: PDEATHSIG)
    left a child of the program running; the trial's next attempt on this host ends it."""
    from stepscale.sweeps.job.reaper import MARK_ENV

    folder = tmp_path / "trial"
    marker = f"mark{uuid.uuid4().hex}"
    orphan = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)", marker],
        env={**os.environ, MARK_ENV: str(folder)}, start_new_session=True,
    )  # fmt: skip
    try:
        out, folder, _, _ = run_attempt(tmp_path, "ok")
        assert out["status"]["state"] == "complete", out
        assert orphan.wait(timeout=10) is not None
        (event,) = [e for e in read_jsonl(folder / rundir.EVENTS_JSONL) if e["event"] != "start"]
        assert event["event"] == "leftovers_killed" and marker in event["commands"][0], event
    finally:
        orphan.kill()
        orphan.wait()

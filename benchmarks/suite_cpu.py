"""Where does the test suite's CPU go? Runs pytest and, beside it, reads every process's CPU
time from /proc a few times a second, then sums it by the kind of process.

The suite is CPU-bound on a 2-core machine (no core idle for most of a run), so its wall time
is about its CPU-seconds over the cores; this says which processes those seconds are spent
in: the pytest workers themselves (in-process tests), the warm trial workers and the
``sweep run`` orchestrators that tests start, SLURM's and Ray's jobs and daemons (not
children of pytest, so invisible to its own rusage), users' example scripts, reports.
A process that lives less than one sampling period is missed, and one that ends between two
samples loses its last period: the sum is a lower bound (the machine's total, from
/proc/stat, is printed beside it).

Prints a table on stderr and one JSON document on stdout.

    python benchmarks/suite_cpu.py [--period 0.3] [-- PYTEST ARGS]   # e.g. -- -q -m "not slow"
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")

# (substring of the command line, kind): the first that matches names the process.
KINDS = (
    ("exec(eval(sys.stdin", "pytest worker (in-process tests)"),
    ("-m pytest", "pytest"),
    ("worker_main", "warm worker (trial jobs)"),
    ("submitit", "submitit job (SLURM, local process launcher)"),
    ("sweep run", "sweep run (orchestrator)"),
    ("bin/sweep report", "sweep report"),
    ("bin/sweep status", "sweep status"),
    ("bin/sweep train", "sweep train"),
    ("bin/sweep", "sweep, other commands"),
    ("raylet", "Ray"),
    ("gcs_server", "Ray"),
    ("ray::", "Ray"),
    ("/site-packages/ray/", "Ray"),
    ("ray-dashboard", "Ray"),
    ("slurm", "SLURM daemons"),
    ("mariadb", "MariaDB"),
    ("postgres", "PostgreSQL"),
    ("munged", "munge"),
    ("chrom", "Chromium"),
    ("examples/", "example scripts (users' trainers)"),
    ("stepscale-consumers", "export consumers"),
)


def kind_of(cmd: str) -> str:
    """The kind of process a command line belongs to."""
    for needle, kind in KINDS:
        if needle in cmd:
            return kind
    if cmd.startswith("["):
        return "kernel threads"
    return "other Python" if "python" in cmd else "other"


def machine_cpu_s() -> float:
    """CPU-seconds the machine has spent busy since boot (/proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    return (user + nice + system + irq + softirq) / TICK


class Sampler(threading.Thread):
    """Reads utime + stime of every process every ``period`` seconds; for a process alive at
    the start, only what it spends from then on counts."""

    def __init__(self, period: float) -> None:
        super().__init__(daemon=True)
        self.period, self.done = period, threading.Event()
        self.seen: dict[tuple[int, int], list] = {}  # (pid, start) -> [cmd, base, last]

    def _sample(self, first: bool) -> None:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                rest = stat[stat.rindex(")") + 2 :].split()
                cpu = (int(rest[11]) + int(rest[12])) / TICK
                key = (int(entry), int(rest[19]))
                if key not in self.seen:
                    raw = Path(f"/proc/{entry}/cmdline").read_bytes()
                    cmd = raw.replace(b"\0", b" ").decode(errors="replace")[:300]
                    name = stat[stat.index("(") + 1 : stat.rindex(")")]
                    self.seen[key] = [cmd or f"[{name}]", cpu if first else 0.0, cpu]
                self.seen[key][2] = cpu
            except (OSError, ValueError, IndexError):
                continue

    def run(self) -> None:
        self._sample(first=True)
        while not self.done.wait(self.period):
            self._sample(first=False)

    def heaviest(self, kind: str, n: int) -> list[tuple[float, str]]:
        """The ``n`` command lines of ``kind`` that spent the most CPU-seconds (summed over
        the processes with the same command line)."""
        cpu = Counter[str]()
        for cmd, base, last in self.seen.values():
            if kind_of(cmd) == kind:
                cpu[cmd[:160]] += last - base
        return [(seconds, cmd) for cmd, seconds in cpu.most_common(n)]

    def by_kind(self) -> tuple[Counter[str], Counter[str]]:
        """CPU-seconds and number of processes by kind."""
        cpu, count = Counter[str](), Counter[str]()
        for cmd, base, last in self.seen.values():
            kind = kind_of(cmd)
            cpu[kind] += last - base
            count[kind] += 1
        return cpu, count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--period", type=float, default=0.3, help="seconds between samples")
    parser.add_argument(
        "--top", type=int, default=8, help="heaviest command lines of the unnamed kinds to show"
    )
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments")
    args = parser.parse_args(argv)
    sampler = Sampler(args.period)
    busy0, t0 = machine_cpu_s(), time.monotonic()
    sampler.start()
    cmd = [sys.executable, "-m", "pytest", *(args.pytest_args or ["-q"])]
    code = subprocess.run(cmd, cwd=REPO).returncode
    sampler.done.set()
    sampler.join()
    wall, busy = time.monotonic() - t0, machine_cpu_s() - busy0
    cpu, count = sampler.by_kind()
    sampled = sum(cpu.values())
    print(f"pytest exit {code}; wall {wall:.0f} s; machine busy {busy:.0f} CPU-s "
          f"({busy / wall:.2f} cores); sampled {sampled:.0f} CPU-s", file=sys.stderr)  # fmt: skip
    print(f"{'CPU-s':>8} {'share':>6} {'procs':>6} {'per proc':>8}  kind", file=sys.stderr)
    for kind, seconds in cpu.most_common():
        print(f"{seconds:8.1f} {seconds / sampled:6.1%} {count[kind]:6d} "
              f"{seconds / count[kind]:8.2f}  {kind}", file=sys.stderr)  # fmt: skip
    for kind in ("other Python", "other"):
        for seconds, cmd in sampler.heaviest(kind, args.top):
            print(f"{seconds:8.1f}  [{kind}] {cmd}", file=sys.stderr)
    doc = {
        "pytest_args": cmd[3:], "exit": code, "wall_s": round(wall, 1),
        "machine_busy_cpu_s": round(busy, 1), "sampled_cpu_s": round(sampled, 1),
        "by_kind": {k: {"cpu_s": round(v, 1), "processes": count[k]} for k, v in cpu.most_common()},
    }  # fmt: skip
    print(json.dumps(doc, indent=2))
    return code


if __name__ == "__main__":
    raise SystemExit(main())

"""Live progress of a study on stderr: a row per point and an overall bar of trained steps
(running trials' steps as they report them) with an ETA on a terminal; plain periodic lines
otherwise. It also clocks the command: the time from the process's start to the first step
trained (imports, workers and compiles included) and to the end."""

from __future__ import annotations

import sys
import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

import stepscale


def process_started() -> float:
    """``time.monotonic()`` when this process's Python first imported stepscale (the
    ``sweep`` command's first import): the command's own start, whatever started it.

    Not the kernel's start time of the process: a shell that ends with
    ``exec sweep …`` (``bash -c '… && sweep run …'`` does) hands its process, and its start
    time, to ``sweep``, so that clock would count what the shell did before. The
    interpreter's own start-up before the import (tens of milliseconds) is left out."""
    return stepscale.IMPORTED_AT


def duration_text(seconds: float) -> str:
    """``14.2 s``, ``2 min 31 s``, ``1 h 4 min``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    s = round(seconds)
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


class StudyProgress:
    """Callable with the scheduler's per-point stats; a context manager.

    ``first_progress`` is the time (seconds from ``started``, by default the process's
    start) at which a step was first trained by this command: the first progress a user
    sees, after the imports, the workers' start and the compiles. On a non-terminal a line
    is printed at that moment as well as every ``every_s`` seconds."""

    def __init__(
        self,
        name: str,
        plan: dict[str, Any],
        every_s: float = 15.0,
        started: float | None = None,
    ) -> None:
        self.name = name
        self.started = process_started() if started is None else started
        self.first_progress: float | None = None
        self._initial_steps: int | None = None  # steps trained before this command (resume)
        self.total_steps = int(plan["total_budget_steps"])
        self.every_s = every_s
        self.console = Console(stderr=True)
        self.tty = sys.stderr.isatty()
        self._live: Live | None = None
        self._bar = Progress(
            TextColumn(f"[bold]{name}"), BarColumn(), MofNCompleteColumn(), TextColumn("steps"),
            TimeRemainingColumn(), console=self.console,
        )  # fmt: skip
        self._task = self._bar.add_task(name, total=self.total_steps)
        self._last = -float("inf")  # the first call prints (monotonic() may be small after boot)

    def __enter__(self) -> StudyProgress:
        if self.tty:
            self._live = Live(console=self.console, refresh_per_second=4)
            self._live.start()
        return self

    def _table(self, stats: list[Any]) -> Table:
        table = Table(box=None, pad_edge=False)
        for col in ("point", "done", "running", "pruned", "diverged", "failed", "best", "steps"):
            table.add_column(col, justify="left" if col == "point" else "right")
        for st in stats:
            c = st.counts
            done = (
                c.get("complete", 0)
                + c.get("pruned", 0)
                + c.get("diverged", 0)
                + c.get("failed", 0)
            )
            best = "—" if st.best is None else f"{st.best:.5g}"
            table.add_row(
                st.label, f"{done}/{st.budget}", str(c.get("running", 0)), str(c.get("pruned", 0)),
                str(c.get("diverged", 0)), str(c.get("failed", 0)), best, str(st.steps),
            )  # fmt: skip
        return table

    def elapsed(self) -> float:
        """Seconds since ``started``."""
        return time.monotonic() - self.started

    def __call__(self, stats: list[Any]) -> None:
        steps = sum(st.steps for st in stats)
        first = False
        if self._initial_steps is None:
            self._initial_steps = steps
        elif self.first_progress is None and steps > self._initial_steps:
            self.first_progress = self.elapsed()
            first = True
        consumed = sum(st.consumed for st in stats)
        # The bar counts trained steps, out of what the study will train: a trial that
        # stopped early (target reached, pruned) takes its unused steps off the total.
        expected = max(sum(st.expected for st in stats), steps, 1)
        self._bar.update(self._task, completed=steps, total=expected)
        if self._live is not None:
            self._live.update(Group(self._table(stats), self._bar))
            return
        now = time.monotonic()
        if now - self._last < self.every_s and not first:
            return
        self._last = now
        done = sum(sum(v for k, v in st.counts.items() if k != "running") for st in stats)
        running = sum(st.counts.get("running", 0) for st in stats)
        budget = sum(st.budget for st in stats)
        print(
            f"{self.name}: {done}/{budget} trials done, {running} running, "
            f"{steps}/{expected} steps trained ({consumed}/{self.total_steps} budget steps used)",
            file=sys.stderr,
            flush=True,
        )

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()

"""Progress in optimizer steps on stderr: a rich bar on a terminal, plain periodic lines
otherwise (logs, CI, SLURM output files)."""

from __future__ import annotations

import sys
import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn


class StepProgress:
    """Callable progress sink ``(step, total, info)`` usable as a context manager."""

    def __init__(self, label: str, every_s: float = 10.0) -> None:
        self.label = label
        self.every_s = every_s
        self.console = Console(stderr=True)
        self.live = sys.stderr.isatty()
        self._bar: Progress | None = None
        self._task: Any = None
        self._last_print = 0.0

    def __enter__(self) -> StepProgress:
        if self.live:
            self._bar = Progress(
                TextColumn(f"[bold]{self.label}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("steps"),
                TextColumn("{task.fields[info]}"),
                TimeRemainingColumn(),
                console=self.console,
            )
            self._bar.start()
        return self

    def __call__(self, step: int, total: int, info: dict[str, Any]) -> None:
        text = "  ".join(f"{k} {v:.4g}" for k, v in info.items() if isinstance(v, float))
        if self._bar is not None:
            if self._task is None:
                self._task = self._bar.add_task(self.label, total=total, info=text)
            self._bar.update(self._task, completed=step, total=total, info=text)
            return
        now = time.monotonic()
        if now - self._last_print >= self.every_s or step >= total:
            self._last_print = now
            print(f"{self.label}: step {step}/{total}  {text}", file=sys.stderr, flush=True)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

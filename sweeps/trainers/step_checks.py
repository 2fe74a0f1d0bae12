"""The checks a script's records pass before they are recorded: a step sequence that is not
an optimizer-step sequence fails the trial's attempt with the lines that show it, instead
of a curve with values at the wrong steps (docs/trainers.md, "The step checks").

- **Backwards**: a record's step is below the step of the record before it (a counter that
  resets — a batch index within an epoch read as the step — does this at each epoch).
- **Repeated with another value**: a step given again with a different value of a loss (a
  metric whose name holds ``loss``, ``ppl`` or ``perplexity``) it already has (a per-epoch
  counter read as the step; two evals at one "step"). The same value again, another metric
  at the same step, or another value of a timing or throughput metric (a resumed run that
  evaluates its resumed step again) is fine.
- **An eval one step off the train grid**: once train records (a record with a metric
  whose name does not start with ``eval``/``val``/``valid``/``test``) lie on a grid of
  k ≥ 3 steps (the greatest common divisor of at least two of their steps > 0), an eval at
  step s > 0 with s mod k equal to 1 or k − 1 is refused (an eval printed before or after
  its step line), unless s is the trial's ``max_steps``. Step 0 (before training) and evals
  elsewhere off the grid (an eval interval of 75 beside a logging interval of 50) are kept.
"""

from __future__ import annotations

import math
from typing import Any

from stepscale.sweeps.trainers.metrics_file import MalformedRecord

EVAL_PREFIXES = ("eval", "val", "valid", "test")
KEPT_EARLY_EVALS = 64  # evals seen before the grid is known, checked again at the end


class UnreliableStep(MalformedRecord):
    """The script's output gives records whose step cannot be an optimizer step (or values
    that cannot be placed): the attempt fails with the offending lines."""

    def __init__(self, why: str, lines: list[tuple[int, str]]) -> None:
        quoted = "".join(f"\n    line {n}: {text[:200]}" for n, text in lines)
        ValueError.__init__(self, f"trainer.metrics: {why}{quoted}")
        self.lineno = lines[-1][0] if lines else 0


def is_loss(name: str) -> bool:
    """Is ``name`` a loss the repeated-value check compares (``eval_loss``, ``lm_ppl``)?"""
    low = name.lower()
    return "loss" in low or "ppl" in low or "perplexity" in low


def is_eval(name: str) -> bool:
    """Is ``name`` an eval metric (``eval_loss``, ``val_acc``, ``valid_ppl``, ``test_loss``)?"""
    low = name.lower()
    return any(low.startswith(p) for p in EVAL_PREFIXES)


class StepChecker:
    """Checks records one by one in the order they are printed (the rules of the module
    docstring); keeps only the current step's values and the grid, so its memory is
    bounded."""

    def __init__(self, max_steps: int | None = None) -> None:
        self.max_steps = max_steps
        self.step: int | None = None
        self.step_line: tuple[int, str] = (0, "")
        self.current: dict[str, tuple[float, int, str]] = {}
        self.grid = 0  # gcd of the train steps > 0 seen
        self.train_steps = 0
        self.early_evals: list[tuple[int, int, str]] = []

    def check(self, record: dict[str, Any], lineno: int, text: str) -> None:
        """Refuse ``record`` (from line ``lineno``, ``text``) with `UnreliableStep`."""
        step = int(record["step"])
        here = (lineno, text)
        if self.step is not None and step < self.step:
            raise UnreliableStep(
                f"the step goes backwards, from {self.step} to {step}: a counter that resets "
                "(a batch index within an epoch) or restarts is not the optimizer step; derive "
                "the step (trainer.metrics.step, e.g. 'epoch * steps_per_epoch + batch') or "
                "read another field",
                [self.step_line, here],
            )
        if step != self.step:
            self.step, self.step_line, self.current = step, here, {}
        metrics = {k: float(v) for k, v in record.items() if k != "step"}
        for name, value in metrics.items():
            seen = self.current.get(name)
            if (
                seen is not None
                and is_loss(name)
                and not (seen[0] == value or (seen[0] != seen[0] and value != value))
            ):
                raise UnreliableStep(
                    f"step {step} is given twice with different values of {name} ({seen[0]:g} "
                    f"and {value:g}): the field read as the step does not count optimizer steps "
                    "(a per-epoch counter, or no step at all — then use trainer.metrics."
                    "step_every or step)",
                    [(seen[1], seen[2]), here],
                )
            self.current[name] = (value, lineno, text)
        if any(not is_eval(k) for k in metrics) and step > 0:
            self.grid = math.gcd(self.grid, step)
            self.train_steps += 1
        if any(is_eval(k) for k in metrics) and step > 0:
            if self.train_steps >= 2:
                self._check_eval(step, here)
            elif len(self.early_evals) < KEPT_EARLY_EVALS:
                self.early_evals.append((step, lineno, text))

    def finish(self) -> None:
        """Check the evals seen before the train records' grid was known."""
        if self.train_steps >= 2:
            for step, lineno, text in self.early_evals:
                self._check_eval(step, (lineno, text))
        self.early_evals = []

    def _check_eval(self, step: int, here: tuple[int, str]) -> None:
        k = self.grid
        if k < 3 or step == self.max_steps or step % k not in (1, k - 1):
            return
        raise UnreliableStep(
            f"an eval value lands at step {step}, one step off the train records' grid of "
            f"{k} steps: an eval printed before its step line belongs to the next one "
            "(trainer.metrics.unstepped: next), one printed after it to the last",
            [here],
        )


__all__ = ["StepChecker", "UnreliableStep", "is_eval", "is_loss"]

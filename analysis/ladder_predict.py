"""`sweep predict`'s answer: a ladder's laws at a target run (N, D, devices) — η*, B_opt,
B_crit and the loss with prediction intervals, how far the target lies past the ladder,
and the settings as a trainer takes them (the global batch as per-device batch × devices ×
gradient accumulation steps, MaxText's ``global_batch_size_to_train_on``).

Pure functions of `stepscale.analysis.fits.ladder.LadderLaws` (tests/test_ladder.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from stepscale.analysis.fits.ladder import LAWS, LadderLaws
from stepscale.analysis.fits.powerlaw import Prediction
from stepscale.analysis.fits.records import Record
from stepscale.analysis.headline import LAW_SYMBOLS, NOT_DETERMINED, law_determination

__all__ = ["FAR", "Settings", "TargetPrediction", "predict_target", "trainer_settings"]

FAR = 100.0  # past this factor beyond the largest rung (in N or D) the warning is loud
MAX_ROUNDING = 2.0  # the global batch may move this factor from B_opt to fit the devices


@dataclass(frozen=True)
class Settings(Record):
    """The target run's settings: global batch = per_device_batch × devices × accum_steps."""

    learning_rate: float
    global_batch: int
    per_device_batch: int
    devices: int
    accum_steps: int
    batch_unit: str
    tokens_per_step: float
    steps: int


@dataclass(frozen=True)
class TargetPrediction(Record):
    """The laws at the target, the extrapolation and the settings."""

    n: float
    d: float
    predictions: dict[str, Prediction]
    extrapolation_n: float  # N / the largest rung's N
    extrapolation_d: float
    warnings: tuple[str, ...]
    settings: Settings | None
    laws: LadderLaws

    def _json(self, fields: dict[str, Any]) -> dict[str, Any]:
        """Each prediction says whether its law is determined (`law_determination`)."""
        preds = {}
        for name, p in fields["predictions"].items():
            det = law_determination(self.laws.laws[name])
            preds[name] = {
                **p.to_dict(),
                "determined": det.determined,
                "why_not": det.reason or None,
            }
        return fields | {"predictions": preds}

    def lines(self) -> list[str]:
        """The answer first, then the laws' values and the warnings."""
        out = [f"target: N = {self.n:.4g} parameters, D = {self.d:.4g} tokens"]
        s = self.settings
        if s is not None:
            moved = (
                f" (η* moved from B_opt to this batch along η* ∝ B^{self.laws.lr_slope:.3g})"
                if self.laws.lr_slope
                else ""
            )
            out.append(
                f"  learning rate {s.learning_rate:.4g}{moved}; global batch {s.global_batch} "
                f"{s.batch_unit} = {s.per_device_batch} per device × {s.devices} devices × "
                f"{s.accum_steps} accumulation steps; {s.steps} steps of {s.tokens_per_step:.6g} tokens"
            )
        for name in sorted(self.predictions, key=list(LAWS).index):
            p = self.predictions[name]
            ci = f"[{p.lo:.4g}, {p.hi:.4g}]" if math.isfinite(p.lo) else "(no interval)"
            unit = f" {self.laws.batch_unit}" if name in ("batch", "bcrit") else ""
            det = law_determination(self.laws.laws[name])
            label = "" if det.determined else f" — {NOT_DETERMINED.upper()} ({det.reason})"
            out.append(f"  {LAWS[name]}: {p.value:.4g}{unit} {ci}{label}")
        out.append(
            f"  extrapolation: {self.extrapolation_n:.3g}× the largest rung in N "
            f"({self.laws.n_range[1]:.4g}), {self.extrapolation_d:.3g}× in D "
            f"({self.laws.d_range[1]:.4g}); intervals at {_confidence(self.laws):g}%"
        )
        out += [f"WARNING: {w}" for w in self.warnings]
        return out


def _confidence(laws: LadderLaws) -> float:
    c = next(iter(laws.laws.values())).confidence if laws.laws else 0.95
    return 100 * c


def trainer_settings(
    lr: float,
    b_opt: float,
    d: float,
    devices: int,
    tokens_per_example: float,
    batch_unit: str,
    max_per_device: int | None = None,
    lr_slope: float = 0.0,
) -> Settings:
    """The global batch nearest B_opt that the devices divide, split into a per-device
    batch (at most ``max_per_device``, by gradient accumulation), and the steps D takes;
    the learning rate η* (at B_opt) moved to that global batch along the ladder's
    η* ∝ B^``lr_slope``. `ValueError` when no global batch within a factor `MAX_ROUNDING`
    of B_opt divides over the devices."""
    k = max(1, round(b_opt / devices))
    glob = k * devices
    if not (b_opt / MAX_ROUNDING <= glob <= b_opt * MAX_ROUNDING):
        raise ValueError(
            f"no global batch divisible by {devices} devices lies within a factor "
            f"{MAX_ROUNDING:g} of B_opt = {b_opt:.4g} {batch_unit} (the nearest is {glob}); "
            "give fewer devices (--devices)"
        )
    accum = 1
    if max_per_device is not None:
        while k // accum > max_per_device or k % accum:
            accum += 1
    per_device = k // accum
    tokens = glob * tokens_per_example
    return Settings(
        learning_rate=lr * (glob / b_opt) ** lr_slope,
        global_batch=glob,
        per_device_batch=per_device,
        devices=devices,
        accum_steps=accum,
        batch_unit=batch_unit,
        tokens_per_step=tokens,
        steps=max(1, math.ceil(d / tokens)),
    )


def predict_target(
    laws: LadderLaws,
    n: float,
    d: float,
    devices: int | None = None,
    max_per_device: int | None = None,
) -> TargetPrediction:
    """Every law at (``n``, ``d``) with its prediction interval, the extrapolation factors,
    a loud warning past `FAR` × the largest rung, and the settings on ``devices``."""
    for name, v in (("N", n), ("D", d)):
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a positive finite number, got {v}")
    at = {"N": n, "D": d}
    preds = {
        name: law.predict(**{r: at[r] for r in law.regressors}) for name, law in laws.laws.items()
    }
    ext_n, ext_d = n / laws.n_range[1], d / laws.d_range[1]
    warnings = []
    for axis, f, lo in (("N", ext_n, laws.n_range[0]), ("D", ext_d, laws.d_range[0])):
        used = any(axis in law.regressors for law in laws.laws.values())
        if not used:
            warnings.append(
                f"no law depends on {axis} (the ladder did not vary it): the prediction "
                f"holds only at the ladder's {axis}"
            )
        elif f > FAR:
            warnings.append(
                f"the target lies {f:.3g}× past the largest rung in {axis} (more than "
                f"{FAR:g}×): a change of regime there (a new loss regime, another schedule, "
                "numerics) breaks a power law unnoticed; add a larger rung"
            )
        elif (n if axis == "N" else d) < lo:
            warnings.append(f"the target lies below the smallest rung in {axis} ({lo:.4g})")
    for name in ("lr", "batch"):
        law = laws.laws.get(name)
        det = law_determination(law) if law is not None else None
        if det is not None and not det.determined and devices is not None:
            warnings.append(
                f"the settings rest on a law that is not determined (the {LAW_SYMBOLS[name]} law, "
                f"{det.reason}): add rungs, or trials per rung, before trusting them"
            )
    settings = None
    if devices is not None:
        if "lr" not in preds or "batch" not in preds:
            missing = [k for k in ("lr", "batch") if k not in preds]
            why = "; ".join(f"{k}: {laws.skipped.get(k, 'not in the laws given')}" for k in missing)
            raise ValueError(f"the settings need the η* and B_opt laws ({why})")
        settings = trainer_settings(
            preds["lr"].value,
            preds["batch"].value,
            d,
            devices,
            laws.tokens_per_example,
            laws.batch_unit,
            max_per_device,
            laws.lr_slope,
        )
    return TargetPrediction(n, d, preds, ext_n, ext_d, tuple(warnings), settings, laws)

"""The safe expression grammar of derived parameters, kept importable here: it lives in
`stepscale.sweeps.trainers.expr` (a command trainer's metrics settings use it too, and the
trainers wing is below the study wing)."""

from stepscale.sweeps.trainers.expr import (
    FUNCTIONS,
    Binary,
    Call,
    ExprError,
    Name,
    Node,
    Num,
    Unary,
    evaluate,
    names,
    parse,
)

__all__ = [
    "FUNCTIONS",
    "Binary",
    "Call",
    "ExprError",
    "Name",
    "Node",
    "Num",
    "Unary",
    "evaluate",
    "names",
    "parse",
]

"""Derived parameters: the safe grammar, the checks before anything runs (exit 2 naming
the entry, nothing written), the value in every trial's config.json, trial.json, the
told Optuna trial and space.json, and what `sweep export` keeps or says it drops."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from helpers import TEST_COMPILE_CACHE, optuna_trials

from stepscale.cli.main import main
from stepscale.sweeps.formats import FORMATS
from stepscale.sweeps.study.compose import prepare_study
from stepscale.sweeps.study.derived import derived_at
from stepscale.sweeps.study.expr import ExprError, evaluate, names, parse
from stepscale.sweeps.study.files import fingerprint
from stepscale.sweeps.study.space import build_space

BETA2 = ["conf=beta2_halflife", f"train.compile_cache_dir={TEST_COMPILE_CACHE}"]


@pytest.mark.parametrize(
    ("text", "env", "value"),
    [
        (
            "0.5 ** (batch_size * seq_len / t2)",
            {"batch_size": 4, "seq_len": 32, "t2": 512},
            0.5**0.25,
        ),
        ("-2 ** 2", {}, -4.0),  # unary minus binds looser than the power, as in Python
        ("2 ** -1 * 3", {}, 1.5),
        ("2 ** 3 ** 2", {}, 512.0),  # right-associative
        ("min(a, 3, max(1, b)) + sqrt(16) - log(exp(2)) / 2", {"a": 5, "b": 0.5}, 4.0),
        ("1e-3 * (B / 64) ** 0.5", {"B": 256}, 2e-3),
        (".5 + 1.", {}, 1.5),
    ],
)
def test_the_grammar_evaluates_like_arithmetic(
    text: str, env: dict[str, float], value: float
) -> None:
    node = parse(text)
    assert names(node) == set(env)
    assert evaluate(node, env) == pytest.approx(value, rel=1e-12)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("__import__('os').system('true')", "calling '__import__' is not in the grammar"),
        ("open(1)", "calling 'open' is not in the grammar"),
        ("(exp)(1)", "calling the value of a parenthesis is not in the grammar"),
        ("lr.real", "unexpected '.'"),
        ("b[0]", "unexpected '['"),
        ("2 ^ 3", "powers are written **"),
        ("1 +", "got the end"),
        ("log(1, 2)", "log takes 1 argument"),
        ("lambda: 1", "unexpected ':'"),
        ("", "empty expression"),
    ],
)
def test_anything_outside_the_grammar_is_a_syntax_error(text: str, message: str) -> None:
    with pytest.raises(ExprError, match=re.escape(message)):
        parse(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1 / (2 - 2)", "division by zero"),
        ("log(0)", "log of 0"),
        ("sqrt(-1)", "sqrt of -1"),
        ("exp(1000)", "overflows"),
        ("(-8) ** 0.5", "not a real number"),
    ],
)
def test_values_that_do_not_exist_are_errors(text: str, message: str) -> None:
    with pytest.raises(ExprError, match=message):
        evaluate(parse(text), {})


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ('derived.b2.expr="0.5 ** (batch_size * seq_len / t2"', "derived.b2.expr .*syntax error"),
        (
            'derived.b2.expr="0.5 ** (batch_size / halflife)"',
            "derived.b2.expr .*unknown name 'halflife'",
        ),
        (
            'derived.b2.expr="0.9 + 0.01 / (batch_size - 16)"',
            "derived.b2.expr .* at point batch_size=16.*division by zero",
        ),
        (
            "derived.b2.low=0.96",
            r"derived.b2: .* = 0.95 at point batch_size=64.*outside its declared range \[0.96, 0.9999\]",
        ),
        (
            'derived.b2.expr="getattr(lr, 1)"',
            "derived.b2.expr .*calling 'getattr' is not in the grammar",
        ),
        ("objective.claim_level=0.7", r"objective.claim_level: must be in \(0, 0.5\), got 0.7"),
        ('derived.b2.expr="0.9 * lr / lr"', None),  # fine: every point, every LR choice
    ],
)
def test_bad_expressions_exit_2_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], override: str, message: str | None
) -> None:
    run = tmp_path / "run"
    # a real run (no --dry-run) for the bad ones: refused before anything is written
    dry = ["--dry-run"] if message is None else []
    code = main(["run", *BETA2, f"run_dir={run}", override, *dry])
    _, err = capsys.readouterr()
    if message is None:
        assert code == 0, err
        return
    assert code == 2, err
    assert re.search(message, err), err
    assert "Traceback" not in err and not run.exists()


def test_a_nuisance_range_is_checked_at_its_ends_and_middle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 0.99 − lr·20 leaves [0.5, 0.9999] only inside the LR range (lr = 0.03 → 0.39).
    code = main(
        [
            "run",
            *BETA2,
            f"run_dir={tmp_path / 'r'}",
            'derived.b2.expr="0.99 - lr * 20"',
            "--dry-run",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "lr=0.03" in err and "outside its declared range" in err, err


def test_a_study_without_derived_values_keeps_the_fingerprint_of_older_run_dirs() -> None:
    # Run dirs written before derived values and claim levels existed must still resume.
    _, cfg, _ = prepare_study(["conf=smoke"], None)
    print_ = fingerprint(cfg)
    assert "derived" not in print_ and "claim_level" not in print_["objective"]
    _, with_rule, _ = prepare_study(["conf=beta2_halflife"], None)
    assert fingerprint(with_rule)["derived"]["b2"]["expr"] == "0.5 ** (batch_size * seq_len / t2)"


@pytest.fixture(scope="module")
def derived_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The NQM study with Adam and β2 by its half-life in examples, added from the command
    line (``+derived.…``): batch 4 and 64, one LR, 10 steps (a few seconds)."""
    run = tmp_path_factory.mktemp("derived") / "run"
    code = main(
        [
            "run", "conf=lr_vs_batchsize", "optimizer=adamw", f"run_dir={run}",
            "scientific.batch_size.values=[4,64]", "nuisance.lr.choices=[0.01]",
            "budget.trials_per_point=1", "budget.max_steps=10", "parallelism=1",
            "launcher=inline", "train.devices=1", f"train.compile_cache_dir={TEST_COMPILE_CACHE}",
            '+derived.t2={expr: "64 * log(0.5) / log(0.95)"}',
            '+derived.b2={path: optimizer.b2, expr: "0.5 ** (batch_size / t2)", low: 0.5}',
        ]
    )  # fmt: skip
    assert code == 0
    return run


def test_each_trial_config_holds_the_derived_value_of_its_point(derived_run: Path) -> None:
    t2 = 64 * math.log(0.5) / math.log(0.95)
    told = {p: trials[0] for p, trials in optuna_trials(derived_run, "lr_vs_batchsize").items()}
    for batch in (4, 64):
        expected = 0.5 ** (batch / t2)
        folder = derived_run / "trials" / f"batch_size={batch}" / "0"
        config = json.loads((folder / "config.json").read_text())
        assert config["optimizer"]["b2"] == pytest.approx(expected, rel=1e-12)
        assert config["optimizer"]["name"] == "adamw" and config["data"]["global_batch"] == batch
        record = json.loads((folder / "trial.json").read_text())
        assert record["derived"] == pytest.approx({"t2": t2, "b2": expected}, rel=1e-12)
        assert told[f"batch_size={batch}"].user_attrs["derived"] == record["derived"]
    assert 0.5 ** (64 / t2) == pytest.approx(0.95) and 0.5 ** (4 / t2) > 0.996
    space = json.loads((derived_run / "space.json").read_text())
    assert [(d["name"], d.get("path")) for d in space["derived"]] == [
        ("t2", None),
        ("b2", "optimizer.b2"),
    ]
    assert space["derived"][1] == {
        "name": "b2", "path": "optimizer.b2", "expr": "0.5 ** (batch_size / t2)", "low": 0.5,
    }  # fmt: skip


def test_export_keeps_derived_values_only_where_a_format_holds_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for fmt in FORMATS:
        out = tmp_path / f"space.{fmt}"
        assert main(["export", *BETA2[:1], "--format", fmt, "-o", str(out)]) == 0
        err = capsys.readouterr().err
        if fmt == "stepscale":
            assert "derived" not in err
            doc = json.loads(out.read_text())
            assert [d["name"] for d in doc["derived"]] == ["t2", "b2"]
        else:  # no other format has derived parameters: the warning names them
            assert "derived.b2: optimizer.b2 = 0.5 ** (batch_size * seq_len / t2) → —" in err, err
            assert "derived.t2:" in err


# --- the real-text study: β2 by half-life vs a fixed β2 on Tiny Shakespeare ----------------

TEXT_BETA2 = "shakespeare_beta2"
FIXED_ARM = [f"name={TEXT_BETA2}_fixed", 'derived.b2.expr="0.99"']  # README's second command


def _b2_rule(batch: float) -> float:
    """β2 = 0.5^(B·T/t2) with T = 32 and t2 such that β2 = 0.99 at batch 16."""
    t2 = 16 * 32 * math.log(0.5) / math.log(0.99)
    return 0.5 ** (batch * 32 / t2)


def test_the_real_text_study_and_its_fixed_arm_agree_at_batch_16_only() -> None:
    arms = {}
    for rule, extra in ((True, []), (False, FIXED_ARM)):
        _, cfg, _ = prepare_study([f"conf={TEXT_BETA2}", *extra], None)
        space = build_space(cfg)
        arms[rule] = {
            p.values["batch_size"]: derived_at(space, p.values, {"lr": 1e-3}) for p in space.points
        }
        assert cfg.data.name == "shakespeare_char" and cfg.fixed["seq_len"].value == 32
    assert sorted(arms[True]) == [1, 4, 16, 64, 256]
    for batch, rule in arms[True].items():
        fixed = arms[False][batch]
        assert rule["b2"] == pytest.approx(_b2_rule(batch), rel=1e-12)
        assert fixed["b2"] == 0.99
        assert (rule["b2"] == pytest.approx(0.99, rel=1e-12)) == (batch == 16)
        # the horizon and evaluation cadence are the same rule in both arms
        assert {k: v for k, v in rule.items() if k not in ("b2",)} == {
            k: v for k, v in fixed.items() if k not in ("b2",)
        }
    assert arms[True][1]["b2"] > 0.999 and arms[True][256]["b2"] < 0.86
    assert [arms[True][b]["horizon"] for b in (1, 256)] == [6250, 321]
    assert [arms[True][b]["eval_every"] for b in (1, 4, 16, 64, 256)] == [160, 80, 40, 20, 10]


@pytest.fixture(scope="module")
def text_arms(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """Both arms of the real-text study shrunk (batch 1 and 16, one layer, one LR, 1 tune
    trial and 2 confirm seeds, 6 steps, an easy target) and their comparison, all through
    the CLI in this process (the second arm reuses the first's compiled programs)."""
    root = tmp_path_factory.mktemp("text_beta2")
    shrink = [
        "scientific.batch_size.values=[1,16]", "nuisance.lr.by=null", "nuisance.lr.choices=[0.01]",
        "budget.trials_per_point=1", "budget.confirm_seeds=2", 'derived.horizon.expr="6"',
        'derived.eval_every.expr="2"', 'derived.log_every.expr="2"', "schedule.warmup_steps=1",
        "objective.target_loss=4.1", "objective.report_targets=[]", "data.eval_examples=8",
        "data.eval_batch=8", "model.n_layers=1", "parallelism=1", "launcher=inline",
        "train.devices=1", f"train.compile_cache_dir={TEST_COMPILE_CACHE}",
    ]  # fmt: skip
    rule, fixed = root / TEXT_BETA2, root / f"{TEXT_BETA2}_fixed"
    assert main(["run", f"conf={TEXT_BETA2}", f"run_dir={rule}", *shrink]) == 0
    assert main(["run", f"conf={TEXT_BETA2}", f"run_dir={fixed}", *FIXED_ARM, *shrink]) == 0
    assert main(["report", str(rule), str(fixed), "--out", str(root / "cmp")]) == 0
    return rule, fixed, root / "cmp"


@pytest.mark.slow  # two studies (three trials each) and their comparison
def test_the_shrunk_real_text_arms_run_and_the_report_tests_each_batch_size(
    text_arms: tuple[Path, Path, Path],
) -> None:
    rule, fixed, cmp = text_arms
    for run, b2 in ((rule, _b2_rule), (fixed, lambda _: 0.99)):
        for batch in (1, 16):
            for folder in sorted((run / "trials" / f"batch_size={batch}").iterdir()):
                config = json.loads((folder / "config.json").read_text())
                assert config["optimizer"]["b2"] == pytest.approx(b2(batch), rel=1e-12)
                assert config["train"]["max_steps"] == 6 and config["data"]["seq_len"] == 32
    doc = json.loads((cmp / "comparison.json").read_text())
    claims = {c["batch"]: c for c in doc["claims"]}
    assert sorted(claims) == [1, 16]
    for c in claims.values():
        assert (c["a"], c["b"], c["n_a"], c["n_b"]) == (TEXT_BETA2, f"{TEXT_BETA2}_fixed", 2, 2)
        assert 0 <= c["p"] <= 1
    # At batch 16 the arms are the same runs: the same steps, no difference to show.
    arms = {(r["study"], r["batch"]): r for r in doc["arms"]}
    assert arms[TEXT_BETA2, 16]["seeds"] == arms[f"{TEXT_BETA2}_fixed", 16]["seeds"]
    assert claims[16]["p"] == 0.5 and not claims[16]["shown"]
    assert [arms[s, 1]["b2"] for s in (TEXT_BETA2, f"{TEXT_BETA2}_fixed")] == ["0.9994", "0.99"]
    assert all(r["trials"] == 3 and r["seeds_reached"] == 2 for r in arms.values())
    report = (cmp / "report.md").read_text()
    assert "## Each study at each batch size" in report and "## Claims" in report
    assert f"batch 1 sequences: {TEXT_BETA2} reaches the target in fewer steps" in report
    assert "one-sided Welch p =" in report

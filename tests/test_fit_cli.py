"""`sweep fit steps|hparams` handlers and CSV tables, without the `sweep` entry point."""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from stepscale.analysis.table import load_table
from stepscale.cli.fit import run_fit
from stepscale.cli.main import build_parser, main
from stepscale.errors import UsageError

STEPS_KEYS = {
    "group",
    "s_min",
    "e_min",
    "b_crit",
    "b_crit_ci",
    "cbs",
    "overhead",
    "reference_batch",
    "n_points",
    "not_reached",
}


def parser() -> argparse.ArgumentParser:
    p = build_parser()
    return p


def fit(*argv: str) -> dict:
    result = run_fit(parser().parse_args(["fit", *argv]))
    json.dumps(result, allow_nan=False)  # finite floats or null only
    return result


def write_csv(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def steps_table(tmp_path: Path) -> Path:
    """Two optimizers with known S_min/B_crit; extra worse rows; a never-reached size."""
    rows: list[list[object]] = []
    truth = {"sgd": (3000.0, 128.0), "adam": (1000.0, 1024.0)}
    rng = np.random.default_rng(0)
    for opt, (s_min, b_crit) in truth.items():
        for b in [16, 32, 64, 128, 256, 512, 1024, 2048, 4096]:
            s = s_min * (1 + b_crit / b) * math.exp(rng.normal(0, 0.02))
            rows.append([opt, b, f"{s:.1f}", 100_000])
            rows.append([opt, b, f"{1.4 * s:.1f}", 100_000])  # a worse trial
        rows.append([opt, 8, "", 50_000])  # not reached: empty
        rows.append([opt, 8, "inf", 60_000])  # not reached: inf
    return write_csv(tmp_path / "steps.csv", ["opt", "batch", "steps", "horizon"], rows)


# -------------------------------------------------------------------------- fit steps


def test_fit_steps_groups(tmp_path: Path) -> None:
    path = steps_table(tmp_path)
    out = fit(
        "steps",
        "--csv",
        str(path),
        "--batch-col",
        "batch",
        "--steps-col",
        "steps",
        "--group-col",
        "opt",
        "--horizon-col",
        "horizon",
        "--overhead",
        "0.1",
    )
    groups = out["groups"]
    assert [g["group"] for g in groups] == ["adam", "sgd"]  # sorted by name
    for g in groups:
        assert set(g) >= STEPS_KEYS
        assert g["n_points"] == 9
        assert g["not_reached"] == [8]
        assert g["censored_at"] == [60_000]
        assert g["overhead"] == 0.1
        assert g["reference_batch"] == 16
        lo, hi = g["b_crit_ci"]
        assert lo <= g["b_crit"] <= hi
        assert g["e_min"] == pytest.approx(g["s_min"] * g["b_crit"])
        assert g["cbs"] == pytest.approx(1.1 * 16 + 0.1 * g["b_crit"])
    adam, sgd = groups
    assert adam["b_crit"] == pytest.approx(1024, rel=0.1)
    assert sgd["b_crit"] == pytest.approx(128, rel=0.1)
    assert sgd["s_min"] == pytest.approx(3000, rel=0.05)


def test_fit_steps_single_group_is_deterministic(tmp_path: Path) -> None:
    path = steps_table(tmp_path)
    args = (
        "steps",
        "--csv",
        str(path),
        "--batch-col",
        "batch",
        "--steps-col",
        "steps",
        "--reference-batch",
        "64",
    )
    one, two = fit(*args), fit(*args)
    assert one == two
    assert [g["group"] for g in one["groups"]] == ["all"]
    g = one["groups"][0]
    assert g["reference_batch"] == 64 and g["overhead"] == 0.2
    assert g["not_reached"] == [8]
    assert g["n_points"] == 9


def test_fit_steps_leaves_out_an_under_tuned_batch_size_unless_told(tmp_path: Path) -> None:
    # S(B) = 100 (1 + 32/B) at 8…256, but 256 took 3× the steps of 128.
    rows = [(b, 100 * (1 + 32 / b)) for b in (8, 16, 32, 64, 128)] + [(256, 3 * 125.0)]
    path = tmp_path / "s.csv"
    path.write_text("batch,steps\n" + "".join(f"{b},{s}\n" for b, s in rows))
    args = ("steps", "--csv", str(path), "--batch-col", "batch", "--steps-col", "steps")
    (g,) = fit(*args)["groups"]
    assert g["under_tuned"] == [256] and g["n_points"] == 5
    assert g["b_crit"] == pytest.approx(32, rel=1e-6)
    (kept,) = fit(*args, "--keep-under-tuned")["groups"]
    assert kept["under_tuned"] == [] and kept["n_points"] == 6 and kept["b_crit"] < 30


def test_fit_steps_bad_input(tmp_path: Path) -> None:
    path = steps_table(tmp_path)
    base = ["steps", "--batch-col", "batch", "--steps-col", "steps"]
    with pytest.raises(UsageError, match="cannot read table"):
        fit(*base, "--csv", str(tmp_path / "missing.csv"))
    with pytest.raises(UsageError, match=r"'step' not found.*available columns"):
        fit("steps", "--csv", str(path), "--batch-col", "batch", "--steps-col", "step")
    bad = write_csv(tmp_path / "bad.csv", ["batch", "steps"], [[16, 100], [32, "fast"]])
    with pytest.raises(UsageError, match=r"line 3.*'fast'.*not a number"):
        fit(*base, "--csv", str(bad))
    few = write_csv(tmp_path / "few.csv", ["batch", "steps"], [[16, 100], [32, 60], [64, ""]])
    with pytest.raises(UsageError, match="at least 3 batch sizes"):
        fit(*base, "--csv", str(few))
    with pytest.raises(UsageError, match="overhead"):
        fit(*base, "--csv", str(path), "--overhead", "-1")
    zero = write_csv(tmp_path / "zero.csv", ["batch", "steps"], [[0, 1], [2, 1], [4, 1]])
    with pytest.raises(UsageError, match="positive"):
        fit(*base, "--csv", str(zero))


# ------------------------------------------------------------------------ fit hparams


def hparam_table(tmp_path: Path) -> Path:
    """lr* = 0.3·N^-0.25·D^0.1 with a loss bowl; wd* = 0.01·D^-0.2 (independent of N)."""
    rng = np.random.default_rng(1)
    rows = []
    for n in np.geomspace(1e6, 1e9, 4):
        for d in np.geomspace(1e8, 1e11, 4):
            lr_opt = 0.3 * n**-0.25 * d**0.1
            wd_opt = 0.01 * d**-0.2
            for _ in range(60):
                lr = lr_opt * math.exp(rng.uniform(-1, 1))
                wd = wd_opt * math.exp(rng.uniform(-1, 1))
                loss = 2.0 * (
                    1 + 0.02 * math.log(lr / lr_opt) ** 2 + 0.02 * math.log(wd / wd_opt) ** 2
                )
                rows.append([f"{loss:.7f}", lr, wd, n, d])
    return write_csv(tmp_path / "hp.csv", ["loss", "lr", "wd", "N", "D"], rows)


def test_fit_hparams(tmp_path: Path) -> None:
    path = hparam_table(tmp_path)
    out = fit(
        "hparams",
        "--csv",
        str(path),
        "--loss-col",
        "loss",
        "--hparams",
        "lr,wd",
        "--by",
        "N,D",
        "--law",
        "wd:D",
        "--band",
        "0.005",
    )
    assert out["band"] == 0.005
    assert out["n_cells"] == 16
    lr, wd = out["laws"]["lr"], out["laws"]["wd"]
    assert set(lr) >= {"coefficient", "exponents", "ci"}
    assert set(lr["exponents"]) == {"N", "D"} and set(wd["exponents"]) == {"D"}
    assert lr["exponents"]["N"] == pytest.approx(-0.25, abs=0.05)
    assert lr["exponents"]["D"] == pytest.approx(0.1, abs=0.05)
    assert wd["exponents"]["D"] == pytest.approx(-0.2, abs=0.05)
    lo, hi = lr["ci"]["N"]
    assert lo <= lr["exponents"]["N"] <= hi
    again = fit(
        "hparams",
        "--csv",
        str(path),
        "--loss-col",
        "loss",
        "--hparams",
        "lr,wd",
        "--by",
        "N,D",
        "--law",
        "wd:D",
        "--band",
        "0.005",
    )
    assert again == out


@pytest.mark.parametrize(
    "law",
    ["wd", "wd:", ":D", "wd:D:N", "wd:D,,N", "nope:D"],
)
def test_fit_hparams_bad_law(tmp_path: Path, law: str) -> None:
    path = hparam_table(tmp_path)
    with pytest.raises(UsageError, match="--law"):
        fit(
            "hparams",
            "--csv",
            str(path),
            "--loss-col",
            "loss",
            "--hparams",
            "lr,wd",
            "--by",
            "N,D",
            "--law",
            law,
        )


def test_fit_hparams_bad_input(tmp_path: Path) -> None:
    path = hparam_table(tmp_path)
    base = ["hparams", "--csv", str(path), "--loss-col", "loss"]
    with pytest.raises(UsageError, match="'mom' not found"):
        fit(*base, "--hparams", "mom", "--by", "N,D")
    with pytest.raises(UsageError, match="--hparams"):
        fit(*base, "--hparams", "lr,", "--by", "N")
    with pytest.raises(UsageError, match="--band"):
        fit(*base, "--hparams", "lr", "--by", "N", "--band", "nan")
    one_cell = write_csv(tmp_path / "one.csv", ["loss", "lr", "N"], [[1.0, 0.1, 5], [1.0, 0.2, 5]])
    with pytest.raises(UsageError, match="single value"):
        fit(
            "hparams",
            "--csv",
            str(one_cell),
            "--loss-col",
            "loss",
            "--hparams",
            "lr",
            "--by",
            "N",
            "--band",
            "0.1",
        )


def test_main_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = steps_table(tmp_path)
    code = main(
        [
            "fit",
            "steps",
            "--csv",
            str(path),
            "--batch-col",
            "batch",
            "--steps-col",
            "steps",
            "--n-boot",
            "100",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["groups"][0]["n_points"] == 9
    code = main(
        [
            "fit",
            "steps",
            "--csv",
            str(tmp_path / "none.csv"),
            "--batch-col",
            "b",
            "--steps-col",
            "s",
        ]
    )
    assert code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "none.csv" in captured.err


# ------------------------------------------------------------------------------ tables


def test_load_table_parsing(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("\ufeffname, a ,b\nx,1,\ny, nan ,inf\n\nz,-inf,NULL\n", encoding="utf-8")
    table = load_table(path, ["a", "b"], text=["name"])
    assert table.n_rows == 3
    assert list(table["name"]) == ["x", "y", "z"]
    a, b = table["a"], table["b"]
    assert a[0] == 1 and math.isnan(a[1]) and a[2] == -math.inf
    assert math.isnan(b[0]) and b[1] == math.inf and math.isnan(b[2])


def test_load_table_errors(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "t.csv", ["a", "b"], [[1, 2]])
    with pytest.raises(ValueError, match=r"column 'c' not found .*\['a', 'b'\]"):
        load_table(path, ["c"])
    with pytest.raises(ValueError, match="cannot read table"):
        load_table(tmp_path / "nope.csv", ["a"])
    with pytest.raises(ValueError, match="cannot read table"):
        load_table(tmp_path, ["a"])  # a directory
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"a,b\n\xff\xfe,1\n")
    with pytest.raises(ValueError, match="cannot read table"):
        load_table(binary, ["a"])
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("a,b\n1,2\n3\n")
    with pytest.raises(ValueError, match="line 3: 1 fields"):
        load_table(ragged, ["a"])
    # Why the table is read with the csv module and not pandas: pandas pads a short row with
    # an empty cell (a missing step would pass as NaN) where a result table must be refused.
    import pandas as pd

    assert pd.read_csv(ragged, dtype=str, keep_default_na=False)["b"].tolist() == ["2", ""]
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty"):
        load_table(empty, ["a"])

"""Reading external result tables (CSV) for reanalysis, with the standard library only.

Not pandas: ``read_csv`` pads a row with too few fields with empty cells, so a result
table missing a value would pass as NaN; here such a row is refused naming its line
(tests/test_fit_cli.py shows both)."""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["MISSING", "Table", "load_table", "parse_number"]

# Cell texts read as "no value" (NaN) in numeric columns, compared case-insensitively.
MISSING = frozenset({"", "nan", "null", "none", "na", "n/a"})


@dataclass(frozen=True)
class Table:
    """Columns of a CSV file: numeric ones as float arrays, text ones as arrays of str."""

    path: str
    header: tuple[str, ...]
    columns: Mapping[str, np.ndarray]
    n_rows: int

    def __getitem__(self, name: str) -> np.ndarray:
        """One loaded column."""
        try:
            return self.columns[name]
        except KeyError:
            raise ValueError(
                f"column {name!r} was not loaded from {self.path}; loaded: {list(self.columns)}"
            ) from None

    def __len__(self) -> int:
        return self.n_rows

    def __iter__(self) -> Iterator[str]:
        return iter(self.columns)


def parse_number(text: str) -> float:
    """A CSV cell as a float: empty / "nan" / "null" / "none" / "na" → NaN, "inf" → inf.

    Raises ValueError for anything else that is not a number.
    """
    s = text.strip()
    if s.lower() in MISSING:
        return math.nan
    return float(s)


def load_table(
    path: str | os.PathLike[str],
    columns: Sequence[str] = (),
    *,
    text: Sequence[str] = (),
) -> Table:
    """Load the named columns of a CSV file with a header row.

    ``columns`` are parsed as numbers (see :func:`parse_number`), ``text`` columns are kept
    as stripped strings. Raises ValueError naming the file for a missing or unreadable
    file, naming the column and the available columns for a missing column, and naming
    the column, line and value for a non-numeric value or a row of the wrong length.
    """
    p = Path(path)
    wanted = list(dict.fromkeys([*columns, *text]))
    both = set(columns) & set(text)
    if both:
        raise ValueError(f"columns {sorted(both)} requested both as numbers and as text")
    try:
        with p.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None:
                raise ValueError(f"table {p} is empty: no header row")
            header = [h.strip() for h in header]
            missing = [c for c in wanted if c not in header]
            if missing:
                raise ValueError(
                    f"column {missing[0]!r} not found in {p}; available columns: {header}"
                )
            dupes = sorted({c for c in wanted if header.count(c) > 1})
            if dupes:
                raise ValueError(f"table {p} has several columns named {dupes}")
            index = {c: header.index(c) for c in wanted}
            raw: dict[str, list[str]] = {c: [] for c in wanted}
            lines: list[int] = []
            for row in reader:
                if not row:
                    continue  # blank line
                if len(row) != len(header):
                    raise ValueError(
                        f"table {p}, line {reader.line_num}: {len(row)} fields, but the "
                        f"header has {len(header)}"
                    )
                lines.append(reader.line_num)
                for c, i in index.items():
                    raw[c].append(row[i])
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"cannot read table {p}: not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    except (OSError, csv.Error) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ValueError(f"cannot read table {p}: {reason}") from None

    out: dict[str, np.ndarray] = {}
    for c in columns:
        values = np.empty(len(raw[c]), dtype=float)
        for i, cell in enumerate(raw[c]):
            try:
                values[i] = parse_number(cell)
            except ValueError:
                raise ValueError(
                    f"table {p}, line {lines[i]}: column {c!r} holds {cell!r}, which is not "
                    f"a number"
                ) from None
        out[c] = values
    for c in text:
        out[c] = np.array([cell.strip() for cell in raw[c]], dtype=object)
    return Table(path=str(p), header=tuple(header), columns=out, n_rows=len(lines))

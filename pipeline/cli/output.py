"""How commands print: messages, tables (rich or plain aligned text), CSV, JSON and Parquet.

Nothing here ever wraps a line: ids, paths and numbers stay whole and copyable. A table is drawn
with rich only on a terminal wide enough for every cell on one line; otherwise (piped, captured,
or a narrow terminal) it is printed as plain aligned columns, one row per line.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from pipeline.errors import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa

console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)

MAX_ROWS = 60
_UNBOUNDED = 1_000_000  # measure a table's natural width, not the width the terminal would squeeze it to
FORMATS = ("table", "csv", "json")
SQL_FORMATS = ("table", "csv", "json", "parquet")


def check_format(fmt: str, allowed: tuple[str, ...] = FORMATS) -> str:
    """The ``--format`` value, lower-cased; ``ConfigError`` when it is not one of ``allowed``."""
    value = fmt.lower()
    if value not in allowed:
        raise ConfigError(f"unknown --format {fmt!r}; use {', '.join(allowed[:-1])} or {allowed[-1]}")
    return value


def say(message: str, fmt: str = "table") -> None:
    """A status line, as is (no markup, never wrapped): on standard output beside tables, on
    standard error when the output is CSV or JSON, so that standard output stays machine-readable."""
    (console if fmt == "table" else err_console).print(message, markup=False, highlight=False)


def cell(value: object) -> str:
    """One table cell as text on one line."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, datetime):
        return value.isoformat(sep=" ", timespec="seconds")
    text = str(value)
    return text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", " ")


def _numeric(table: pa.Table) -> list[bool]:
    import pyarrow.types as pt

    return [pt.is_integer(t) or pt.is_floating(t) or pt.is_decimal(t) for t in table.schema.types]


def plain_table(table: pa.Table, title: str | None = None) -> str:
    """The table as aligned columns of plain text (numbers right-aligned), one row per line."""
    header = list(table.column_names)
    rows = [[cell(v) for v in row.values()] for row in table.to_pylist()]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    right = _numeric(table)

    def line(values: list[str]) -> str:
        padded = [v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right, strict=True)]
        return "  ".join(padded).rstrip()

    lines = [title] if title else []
    lines += [line(header), line(["-" * w for w in widths])]
    lines += [line(r) for r in rows]
    return "\n".join(lines) + "\n"


def _rich_table(table: pa.Table, title: str | None):
    from rich.table import Table

    view = Table(title=title)
    for name, right in zip(table.column_names, _numeric(table), strict=True):
        view.add_column(name, no_wrap=True, overflow="ignore", justify="right" if right else "left")
    for row in table.to_pylist():
        view.add_row(*(cell(v) for v in row.values()))
    return view


def print_table(
    table: pa.Table, title: str | None = None, max_rows: int = MAX_ROWS, out: Console | None = None
) -> None:
    """Print the first ``max_rows`` rows: a rich table on a terminal wide enough, else plain text."""
    out = out or console
    shown = table.slice(0, max_rows)
    view = _rich_table(shown, title) if out.is_terminal else None
    if view is not None and out.measure(view, options=out.options.update(max_width=_UNBOUNDED)).maximum <= out.width:
        out.print(view, soft_wrap=False)
    else:
        out.print(plain_table(shown, title), end="", markup=False, highlight=False, soft_wrap=True)
    if table.num_rows > max_rows:
        out.print(f"... {table.num_rows - max_rows} more rows (use --format csv or --output)", highlight=False)


def _csv_text(table: pa.Table) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(table.column_names)
    for row in table.to_pylist():
        writer.writerow(["" if v is None else v for v in row.values()])
    return buffer.getvalue()


def _json_text(data: object) -> str:
    return json.dumps(data, default=str, indent=1) + "\n"


def emit(table: pa.Table, fmt: str, output: Path | None = None, title: str | None = None) -> None:
    """Write a result as a table, CSV, JSON (a list of rows) or Parquet, to a file or standard output."""
    fmt = check_format(fmt, SQL_FORMATS)
    if fmt == "parquet" and output is None:
        raise ConfigError("--format parquet needs --output PATH")
    if fmt == "table" and output is None:
        print_table(table, title)
        return
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, output)
        return
    text = _csv_text(table) if fmt == "csv" else _json_text(table.to_pylist()) if fmt == "json" else plain_table(table)
    if output is None:
        sys.stdout.write(text)
    else:
        Path(output).write_text(text)


def emit_sections(sections: Sequence[tuple[str, str, pa.Table]], fmt: str) -> None:
    """Several tables, each ``(key, title, table)``: titled tables; JSON, one object of row lists
    by key; or CSV, one block per table after a ``# key`` line, blocks separated by a blank line."""
    fmt = check_format(fmt)
    if fmt == "table":
        for _, title, table in sections:
            print_table(table, title)
    elif fmt == "json":
        sys.stdout.write(_json_text({key: table.to_pylist() for key, _, table in sections}))
    else:
        sys.stdout.write("\n".join(f"# {key}\n{_csv_text(table)}" for key, _, table in sections))

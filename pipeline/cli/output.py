"""How commands print: messages, tables (rich or plain aligned text), CSV, JSON and Parquet.

Nothing here ever wraps a line: ids, paths and numbers stay whole and copyable. A table is drawn
with rich only on a terminal wide enough for every cell on one line; otherwise (piped, captured,
or a narrow terminal) it is printed as plain aligned columns, one row per line. Standard output
that is not a terminal gets its plain text without rich, whose consoles (``console``,
``err_console``) are made on first use: importing rich costs a quick command 0.04 s.

A result is an Arrow table or a DuckDB relation (``difficulty sql``: its rows are printed as
DuckDB gives them, with no Arrow table built, so the query pays no pyarrow import); both become
``Rows`` before they are printed. Only ``--format parquet`` writes an Arrow table.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import re
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pipeline.errors import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa
    from rich.console import Console

MAX_ROWS = 60
_UNBOUNDED = 1_000_000  # measure a table's natural width, not the width the terminal would squeeze it to
FORMATS = ("table", "csv", "json")
SQL_FORMATS = ("table", "csv", "json", "parquet")


@functools.cache
def consoles() -> dict[str, Console]:
    """The rich consoles of standard output (``console``) and standard error (``err_console``)."""
    from rich.console import Console

    # No emoji codes: a source or prompt named ``zero`` must not print as an emoji (``:zero:``).
    return {
        "console": Console(soft_wrap=True, emoji=False),
        "err_console": Console(stderr=True, soft_wrap=True, emoji=False),
    }


def __getattr__(name: str) -> Console:
    """``output.console`` and ``output.err_console``, made on first use."""
    if name in ("console", "err_console"):
        return consoles()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _stdout_piped() -> bool:
    """Whether standard output is not a terminal (piped, redirected, captured)."""
    isatty = getattr(sys.stdout, "isatty", None)
    return isatty is None or not isatty()


def check_format(fmt: str, allowed: tuple[str, ...] = FORMATS) -> str:
    """The ``--format`` value, lower-cased; ``ConfigError`` when it is not one of ``allowed``."""
    value = fmt.lower()
    if value not in allowed:
        raise ConfigError(f"unknown --format {fmt!r}; use {', '.join(allowed[:-1])} or {allowed[-1]}")
    return value


def say(message: str, fmt: str = "table") -> None:
    """A status line, as is (no markup, never wrapped): on standard output beside tables, on
    standard error when the output is CSV or JSON, so that standard output stays machine-readable."""
    consoles()["console" if fmt == "table" else "err_console"].print(message, markup=False, highlight=False)


def plural(count: int, noun: str) -> str:
    """``1 step``, ``2 steps``, ``1,000 steps``."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


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


class Rows(NamedTuple):
    """A result as printed: column names, which columns are numbers (right-aligned), the rows (the
    first ones only when ``total``, the count of all, is given)."""

    names: list[str]
    numeric: list[bool]
    rows: list[tuple]
    total: int | None = None


# DuckDB's number types, as its relations name them.
_DUCKDB_NUMBER = re.compile(r"^(U?(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT)|FLOAT|DOUBLE|DECIMAL\(.*\))$")


def as_rows(result: Any, limit: int | None = None) -> Rows:
    """An Arrow table, a DuckDB relation (run now) or None (a statement with no result) as ``Rows``:
    all of them, or the first ``limit`` and the count of all."""
    if result is None:
        return Rows([], [], [])
    if isinstance(result, Rows):
        return result
    if hasattr(result, "fetchall"):  # a DuckDB relation
        numeric = [bool(_DUCKDB_NUMBER.match(str(t))) for t in result.types]
        if limit is None:
            return Rows(list(result.columns), numeric, result.fetchall())
        rows = result.limit(limit + 1).fetchall()
        # More than a table shows: counted by DuckDB (the query runs again) rather than every row
        # made a Python tuple.
        total = result.count("*").fetchall()[0][0] if len(rows) > limit else len(rows)
        return Rows(list(result.columns), numeric, rows[:limit], total)
    import pyarrow.types as pt

    numeric = [pt.is_integer(t) or pt.is_floating(t) or pt.is_decimal(t) for t in result.schema.types]
    shown = result if limit is None else result.slice(0, limit)
    rows = list(zip(*(c.to_pylist() for c in shown.columns), strict=True))
    return Rows(list(result.column_names), numeric, rows, result.num_rows)


def fetch(result: Any, fmt: str, output: Path | None = None) -> Rows:
    """What ``emit`` prints of a result: the rows a table shows (``MAX_ROWS`` and the count), or all."""
    return as_rows(result, MAX_ROWS if fmt == "table" and output is None else None)


def plain_table(table: pa.Table | Rows, title: str | None = None) -> str:
    """The table as aligned columns of plain text (numbers right-aligned), one row per line."""
    header, right, values, _ = as_rows(table)
    rows = [[cell(v) for v in row] for row in values]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]

    def line(values: list[str]) -> str:
        padded = [v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right, strict=True)]
        return "  ".join(padded).rstrip()

    lines = [title] if title else []
    lines += [line(header), line(["-" * w for w in widths])]
    lines += [line(r) for r in rows]
    return "\n".join(lines) + "\n"


def _rich_table(table: Rows, title: str | None):
    """A rich table whose cells, headers and title are text, never console markup (a ``[b]`` in a
    problem, a source named ``zero`` beside a colon)."""
    from rich.table import Table
    from rich.text import Text

    view = Table(title=None if title is None else Text(title))
    for name, right in zip(table.names, table.numeric, strict=True):
        view.add_column(Text(name), no_wrap=True, overflow="ignore", justify="right" if right else "left")
    for row in table.rows:
        view.add_row(*(Text(cell(v)) for v in row))
    return view


def print_table(
    table: pa.Table | Rows, title: str | None = None, max_rows: int = MAX_ROWS, out: Console | None = None
) -> None:
    """Print the first ``max_rows`` rows: a rich table on a terminal wide enough, else plain text."""
    table = as_rows(table, max_rows)
    shown = table._replace(rows=table.rows[:max_rows])
    total = len(table.rows) if table.total is None else table.total
    more = f"... {total - max_rows} more rows (use --format csv or --output)"
    if out is None and _stdout_piped():  # plain text whatever rich would say: no rich to import
        sys.stdout.write(plain_table(shown, title) + (more + "\n" if total > max_rows else ""))
        return
    out = out or consoles()["console"]
    view = _rich_table(shown, title) if out.is_terminal else None
    if view is not None and out.measure(view, options=out.options.update(max_width=_UNBOUNDED)).maximum <= out.width:
        out.print(view, soft_wrap=False)
    else:
        out.print(plain_table(shown, title), end="", markup=False, highlight=False, soft_wrap=True)
    if total > max_rows:
        out.print(more, markup=False, highlight=False)


def _csv_text(table: Rows) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(table.names)
    for row in table.rows:
        writer.writerow(["" if v is None else v for v in row])
    return buffer.getvalue()


def _dicts(table: Rows) -> list[dict]:
    return [dict(zip(table.names, row, strict=True)) for row in table.rows]


def _json_text(data: object) -> str:
    return json.dumps(data, default=str, indent=1) + "\n"


def emit(table: pa.Table | Rows, fmt: str, output: Path | None = None, title: str | None = None) -> None:
    """Write a result (an Arrow table, or ``Rows``) as a table, CSV, JSON (a list of rows) or
    Parquet (an Arrow table only), to a file or standard output."""
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
    rows = as_rows(table)
    text = _csv_text(rows) if fmt == "csv" else _json_text(_dicts(rows)) if fmt == "json" else plain_table(rows)
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
        sys.stdout.write(_json_text({key: _dicts(as_rows(table)) for key, _, table in sections}))
    else:
        sys.stdout.write("\n".join(f"# {key}\n{_csv_text(as_rows(table))}" for key, _, table in sections))

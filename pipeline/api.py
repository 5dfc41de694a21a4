"""The Python entry point for notebooks and scripts: ``pipeline.open(data_dir)``, read-only.

``open`` gives a ``Tables``: one DuckDB connection with a view per table (the views of
``difficulty sql``), confined the same way: one SELECT or EXPLAIN per call, no file or URL outside
the data directory, no extension, no ``SET``. Results are DuckDB relations, so ``.pl()``,
``.arrow()``, ``.df()`` and ``.fetchall()`` work on each, and nothing is read before one of them is
called. The views list the files present when the directory was opened: open it again to see a
run written since.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import duckdb

from pipeline import schema
from pipeline.errors import StoreError
from pipeline.store import DERIVED_VIEWS, Location, Store, query, resolve_data_dir

__all__ = ["Analysis", "Tables", "open"]

# The tables of a run's analysis, in the order ``difficulty analyze`` and ``allocate`` write them.
ANALYSIS_TABLES = ("prompt_stats", "weights", "summary", "allocation")


class Analysis(NamedTuple):
    """A run's analysis: one relation per table, each holding only that run's rows."""

    prompt_stats: duckdb.DuckDBPyRelation
    weights: duckdb.DuckDBPyRelation
    summary: duckdb.DuckDBPyRelation
    allocation: duckdb.DuckDBPyRelation


class Tables:
    """A data directory opened read-only (see ``open``)."""

    views = (*schema.TABLES, *DERIVED_VIEWS)

    def __init__(self, data_dir: str | os.PathLike | None = None, *, timeout_s: float | None = None) -> None:
        self._timeout_s = query.check_timeout(timeout_s)
        root = resolve_data_dir(data_dir)
        self._store = Store(root)
        # Opening never creates anything: a mistyped path is an error, not an empty directory.
        if not self._store.exists(self._store.root):
            raise StoreError(f"no data directory at {str(root)!r}: nothing to open (a profile run makes one)")
        self._con = self._store.connect(confined=True)

    @property
    def root(self) -> Location:
        return self._store.root

    def sql(self, sql: str, params: list | dict | None = None) -> query.UserRelation:
        """One SELECT (or EXPLAIN) over the views, parameters bound (``$name`` or ``?``): a DuckDB
        relation whose errors are ``StoreError`` when it is made and when it is read. Reading it
        stops on SIGINT (a notebook's interrupt: ``KeyboardInterrupt``) or past the time limit.

        Raises:
            StoreError: not one read statement, a file outside the data directory, or DuckDB's error.
        """
        return query.user_relation(self._store, self._con, sql, params, self._timeout_s)

    def runs(self) -> duckdb.DuckDBPyRelation:
        """Every run, newest first, as ``difficulty runs`` lists them (a ``sampling`` run that no
        process holds shows as ``interrupted``)."""
        return self._con.from_arrow(self._store.list_runs())

    def analysis(self, run_id: str) -> Analysis:
        """The run's prompt_stats, weights, summary and allocation.

        Raises:
            StoreError: no such run, or the run has not been analysed.
        """
        self._check_run(run_id)
        # An expression, not SQL text: the run id is a constant, never formatted into a query.
        of_run = duckdb.ColumnExpression("run_id") == duckdb.ConstantExpression(run_id)
        found = Analysis(*(self._con.view(table).filter(of_run) for table in ANALYSIS_TABLES))
        if not found.prompt_stats.limit(1).fetchall():
            raise StoreError(
                f"run {run_id!r} has no analysis under {self.root}; compute it with `difficulty analyze --run {run_id}`"
            )
        return found

    def report_path(self, run_id: str) -> Location:
        """Where the run's HTML report is (a Path, or a URL on an object store).

        Raises:
            StoreError: no such run, or no report written for it yet.
        """
        self._check_run(run_id)
        path = self._store.report_path(run_id)
        if not self._store.exists(path):
            raise StoreError(
                f"run {run_id!r} has no report at {path}; write it with `difficulty report --run {run_id}`"
            )
        return path

    def close(self) -> None:
        self._con.close()

    def __enter__(self) -> Tables:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<pipeline.Tables {self.root}>"

    def _check_run(self, run_id: str) -> None:
        if self._store.get_run(run_id, missing_ok=True) is None:
            newest = self._store.list_runs().column("run_id").to_pylist()[:5]
            raise StoreError(f"no run {run_id!r} under {self.root}; newest runs: {newest or 'none'}")


def open(data_dir: str | os.PathLike | None = None, *, timeout_s: float | None = None) -> Tables:  # noqa: A001 - the package's entry point
    """The data directory ``data_dir`` (a folder or ``s3://bucket/prefix``; default as the command
    line: ``$DIFFICULTY_DATA``, then ``./difficulty-data``), read-only. Every query stops on SIGINT
    and, with ``timeout_s``, after that many seconds (a ``StoreError`` naming the limit).

    Raises:
        StoreError: no data directory there, or its tables cannot be opened.
        ConfigError: ``timeout_s`` not a number above 0.
    """
    return Tables(data_dir, timeout_s=timeout_s)

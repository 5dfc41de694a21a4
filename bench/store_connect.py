"""Bench: ``Store.connect()`` over a local store of 2,000 small shard files.

Builds ``samples/run_id=bench/shard-NNNNN.parquet`` (the layout ``Store.write_shard`` writes, each
file a few rows) in a temporary folder, then times ``Store.connect()`` (every table listed, each
file checked, one view per table): the first call (footers read and checked) and the best of
``--repeat`` later ones (checks cached per process, so the listing and DuckDB's views remain).

Runs against whichever ``pipeline`` is importable, so the same script measures two versions::

    PYTHONPATH=/tmp/store-base python bench/store_connect.py
    PYTHONPATH=$PWD python bench/store_connect.py
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from pipeline.store import Store, shard_name

RUN_ID = "bench"


def build(root: Path, shards: int) -> Store:
    store = Store.open(root)
    for shard in range(shards):
        samples = pa.table(
            {
                "run_id": [RUN_ID] * 4,
                "prompt_id": [f"p{shard}-{i // 2}" for i in range(4)],
                "sample_idx": [i % 2 for i in range(4)],
                "extracted_answer": [str(i) for i in range(4)],
                "correct": [i % 2 == 0 for i in range(4)],
            }
        )
        store.write_table("samples", samples, {"run_id": RUN_ID}, part=shard_name(shard))
    return store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-store-connect-"))
    try:
        t0 = time.perf_counter()
        store = build(tmp / "data", args.shards)
        print(f"built {args.shards} shard files in {time.perf_counter() - t0:.2f} s")
        times = []
        for _ in range(args.repeat + 1):
            t0 = time.perf_counter()
            con = store.connect()
            times.append(time.perf_counter() - t0)
            assert con.sql("select count(*) from samples").fetchall() == [(4 * args.shards,)]
            con.close()
        print(f"connect, first (files checked): {times[0] * 1000:.1f} ms")
        print(f"connect, best of {args.repeat}: {min(times[1:]) * 1000:.1f} ms")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Benchmark: the same profile and analysis on a local data directory and on S3 (loopback).

Starts moto's S3 server in a child process on a free loopback port (the same server the tests
use), then, for a local folder and for ``s3://difficulty-bench/data`` in turn, times:

1. the profile: ``--backend simulate`` over a synthetic problems file (default 20,000 prompts x
   16 samples), shards of 1,000 prompts, no report, no Prefect (its overhead is the same on both);
2. the analysis: ``counts_from_samples`` (the answer histograms included) + ``analyze`` with the
   default estimators + ``write_analysis``: what ``difficulty analyze`` does.

Prints each time and the S3/local ratios. Target (issue 15): analysis on S3 within 3x of local.

    python bench/storage.py                    # 20,000 x 16
    python bench/storage.py --prompts 2000     # quicker
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def start_s3_server() -> tuple[subprocess.Popen, str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2)
            return proc, endpoint
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("moto_server did not start")


def problems_file(folder: Path, prompts: int) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = folder / "synthetic.parquet"
    pq.write_table(
        pa.table(
            {
                "problem": [f"What is {i} + {i % 97}?" for i in range(prompts)],
                "answer": [str(i + i % 97) for i in range(prompts)],
            }
        ),
        path,
    )
    return path


def measure(data_dir: str, data_file: Path, prompts: int, n: int) -> dict[str, float]:
    from pipeline.flows.executors import profile_direct

    from pipeline import analyze, finish, run
    from pipeline.store import Store

    store = Store.open(data_dir)
    cfg = run.ProfileConfig.build(
        backend="simulate",
        data_file=str(data_file),
        limit=prompts,
        n=n,
        shard_size=1000,
        grade_workers=1,
        report=False,
    )
    start = time.perf_counter()
    run_id = profile_direct(cfg, store).run_id
    profile_s = time.perf_counter() - start
    start = time.perf_counter()
    counts = finish.counts_from_samples(store, run_id)
    result = analyze.analyze(counts, run_id)
    finish.write_analysis(store, run_id, result)
    analysis_s = time.perf_counter() - start
    assert counts.num_rows == prompts and int(sum(counts.column("n").to_pylist())) == prompts * n
    return {"profile": profile_s, "analysis": analysis_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=20_000)
    ap.add_argument("--n", type=int, default=16)
    args = ap.parse_args()
    proc, endpoint = start_s3_server()
    tmp = Path(tempfile.mkdtemp(prefix="bench-storage-"))
    try:
        os.environ.update(
            AWS_ACCESS_KEY_ID="bench",
            AWS_SECRET_ACCESS_KEY="bench",
            AWS_ENDPOINT_URL=endpoint,
            AWS_DEFAULT_REGION="us-east-1",
            AWS_CONFIG_FILE=str(tmp / "none"),
            AWS_SHARED_CREDENTIALS_FILE=str(tmp / "none"),
        )
        import s3fs

        s3fs.S3FileSystem(skip_instance_cache=True).mkdir("difficulty-bench")
        data_file = problems_file(tmp, args.prompts)
        print(f"{args.prompts} prompts x {args.n} samples; S3: moto_server at {endpoint}")
        local = measure(str(tmp / "local"), data_file, args.prompts, args.n)
        remote = measure("s3://difficulty-bench/data", data_file, args.prompts, args.n)
        for stage in ("profile", "analysis"):
            ratio = remote[stage] / local[stage]
            print(f"{stage:9s} local {local[stage]:7.2f} s   s3 {remote[stage]:7.2f} s   s3/local {ratio:5.2f}x")
        verdict = "met" if remote["analysis"] / local["analysis"] <= 3 else "NOT met"
        print(f"target: analysis on S3 within 3x of local: {verdict}")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()

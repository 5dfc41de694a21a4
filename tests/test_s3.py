"""An s3:// data directory on a real S3-compatible server (moto's server mode on loopback, started
by conftest): profile, SQL, report, resume after kill -9, a two-node Ray cluster, bad input, and
no secret in anything a run writes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
import s3fs
from typer.testing import CliRunner

from pipeline import run
from pipeline.cli import app
from pipeline.errors import StoreError
from pipeline.store import Store

PROFILE = ["profile", "--backend", "simulate", "--limit", "12", "--n", "4", "--shard-size", "4", "--grade-workers", "1"]


def _fs() -> s3fs.S3FileSystem:
    return s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False)


def _objects(url: str) -> dict[str, bytes]:
    fs = _fs()
    bucket = url.split("://", 1)[1].split("/", 1)[0]
    return {key: fs.cat_file(key) for key in fs.find(bucket)}


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by([("prompt_id", "ascending"), ("sample_idx", "ascending")])


@pytest.mark.slow
def test_profile_sql_and_report_on_s3_keep_no_secret(s3_data, s3_env, prefect_api, tmp_path, caplog, check_complete):
    secret_text = s3_env["AWS_SECRET_ACCESS_KEY"]
    """The whole profile (Prefect flow), `sql` and `report` on s3://; the tables equal a local run's,
    and the secret access key is in no object, no output line, no log and no flow parameter."""
    runner = CliRunner()
    caplog.set_level("DEBUG")
    out = runner.invoke(app, PROFILE)
    assert out.exit_code == 0, out.output
    store = Store(s3_data)
    [run_id] = store.list_runs().column("run_id").to_pylist()
    assert store.get_run(run_id).status == "done"
    samples = check_complete(store, run_id, 4, 12)

    sql = runner.invoke(app, ["sql", "select count(*) as n from samples", "--format", "json"])
    assert sql.exit_code == 0, sql.output
    assert json.loads(sql.output)[0]["n"] == 48
    outside = runner.invoke(app, ["sql", f"select * from read_parquet('{tmp_path}/x.parquet')"])
    assert outside.exit_code != 0 and "refused" in outside.output

    rep = runner.invoke(app, ["report", "--run", run_id])
    assert rep.exit_code == 0, rep.output
    objects = _objects(s3_data)
    html = objects[f"{s3_data.split('://')[1]}/reports/{run_id}.html"]
    assert b"Difficulty report" in html and len(html) > 100_000
    assert any("/samples/run_id=" in k and k.endswith("shard-00002.parquet") for k in objects)

    # The same profile on a local folder gives the same samples and statistics.
    local = Store.open(tmp_path / "local")
    assert runner.invoke(app, [*PROFILE, "--no-prefect", "--no-report", "--data-dir", str(local.root)]).exit_code == 0
    assert _sorted(local.read_table("samples")).equals(_sorted(samples))
    stats = [s.read_table("prompt_stats").sort_by("prompt_id").drop(["run_id"]) for s in (local, store)]
    assert stats[0].equals(stats[1])

    secret = secret_text.encode()
    assert os.environ["AWS_SECRET_ACCESS_KEY"] == secret_text
    assert not [k for k, body in objects.items() if secret in body], "the secret was written to the bucket"
    for text in (out.output, sql.output, rep.output, caplog.text):
        assert secret_text not in text
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        params = json.dumps([f.parameters for f in client.read_flow_runs()], default=str)
        logs = json.dumps([log.message for log in client.read_logs()])
    assert s3_data in params and secret_text not in params and secret_text not in logs


@pytest.mark.slow
@pytest.mark.faults
def test_kill_9_on_s3_leaves_only_whole_shards_and_resumes(s3_data, tmp_path, check_complete):
    """kill -9 of a profile writing to S3: every object under samples/ is a complete shard of the
    plan (one PUT each), the run reads interrupted at once, and a rerun finishes the rest without
    rewriting a finished shard."""
    cmd = [str(Path(sys.executable).parent / "difficulty"), "profile", "--backend", "simulate", "--no-prefect"]
    cmd += ["--limit", "1500", "--n", "8", "--shard-size", "50", "--no-report", "--grade-workers", "1"]
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stderr=subprocess.PIPE, start_new_session=True)
    fs = _fs()
    prefix = s3_data.split("://", 1)[1] + "/samples"
    try:
        deadline = time.monotonic() + 240
        while not [k for k in (fs.find(prefix) if fs.exists(prefix) else []) if k.endswith(".parquet")]:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "no shard written in time"
            time.sleep(0.05)
        proc.kill()
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    store = Store(s3_data)
    [row] = store.list_runs().to_pylist()
    assert row["status"] == "interrupted"
    assert store.doctor() == [], "a half-written or foreign object under the data directory"
    before = {k: v["ETag"] for k, v in fs.find(prefix, detail=True).items()}
    assert 1 <= len(before) < 30, f"{len(before)} of 30 shards written before the kill"

    rerun = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    check_complete(store, row["run_id"], 8, 1500)
    after = {k: v["ETag"] for k, v in fs.find(prefix, detail=True).items()}
    assert len(after) == 30 and all(after[k] == etag for k, etag in before.items()), "a finished shard was redone"


@pytest.fixture
def two_node_ray(s3_data):
    """A Ray cluster of two raylets on this machine (one CPU each), started after the AWS
    environment is set, as each node of a real cluster has its own."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.mark.slow
def test_two_node_ray_actors_write_their_shards_to_s3(s3_data, two_node_ray, monkeypatch, check_complete, tmp_path):
    """Each actor writes its shards straight to S3; the driver never writes a shard (its
    ``write_shard`` fails here) and receives only counts; the result equals a local run's."""
    import ray

    assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    cfg = run.ProfileConfig.build(
        backend="simulate", limit=12, n=4, shard_size=2, grade_workers=1, report=False, executor="ray", replicas=2
    )

    def driver_writes(*args, **kwargs):
        raise AssertionError("the driver wrote a shard")

    from pipeline.flows import executors

    with monkeypatch.context() as patched:
        patched.setattr(Store, "write_shard", driver_writes)
        result = executors.profile_direct(cfg, Store.open(s3_data))
    store = Store(s3_data)
    samples = check_complete(store, result.run_id, 4, 12)
    assert len(store.finished_shards(result.run_id)) == 6
    local = Store.open(tmp_path / "local")
    executors.profile_direct(run.ProfileConfig.build(**{**cfg.flat(), "executor": "local", "replicas": 1}), local)
    assert _sorted(local.read_table("samples")).equals(_sorted(samples))


def _fails_fast(args: list[str], env: dict[str, str], cwd: Path) -> str:
    secret = env["AWS_SECRET_ACCESS_KEY"]
    start = time.monotonic()
    out = subprocess.run(
        [str(Path(sys.executable).parent / "difficulty"), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    elapsed = time.monotonic() - start
    assert out.returncode != 0, out.stdout
    assert elapsed < 30, f"took {elapsed:.1f} s to fail"
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    assert secret not in out.stdout + out.stderr
    return out.stdout + out.stderr


@pytest.mark.faults
def test_missing_bucket_and_unreachable_endpoint_fail_fast_and_write_nothing(s3_env, tmp_path):
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    args = ["profile", "--backend", "simulate", "--limit", "4", "--no-prefect"]
    text = _fails_fast([*args, "--data-dir", "s3://no-such-bucket-here/data"], env, tmp_path)
    assert "bucket 'no-such-bucket-here' does not exist" in text
    assert not _fs().exists("no-such-bucket-here")

    bucket = "difficulty-unreachable"
    _fs().mkdir(bucket)
    closed = {**env, "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}  # nothing listens on the discard port
    text = _fails_fast([*args, "--data-dir", f"s3://{bucket}/data"], closed, tmp_path)
    assert "cannot reach the object store at http://127.0.0.1:9" in text
    assert _fs().find(bucket) == []
    assert not (tmp_path / "difficulty-data").exists()


@pytest.fixture
def auth_s3(tmp_path, s3_tools):
    """A second S3 server that checks signatures: an IAM user with a key, and a bucket holding one run."""
    import boto3

    proc, endpoint = s3_tools.start({"INITIAL_NO_AUTH_ACTION_COUNT": "4"})
    try:
        kw = {"endpoint_url": endpoint, "region_name": "us-east-1"}
        iam = boto3.client("iam", aws_access_key_id="setup", aws_secret_access_key="setup", **kw)
        iam.create_user(UserName="profiler")
        key = iam.create_access_key(UserName="profiler")["AccessKey"]
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        iam.put_user_policy(UserName="profiler", PolicyName="all", PolicyDocument=json.dumps(policy))
        s3 = boto3.client(
            "s3", aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"], **kw
        )
        s3.create_bucket(Bucket="guarded")
        yield endpoint, key["AccessKeyId"], key["SecretAccessKey"], s3
    finally:
        s3_tools.stop(proc)


@pytest.mark.faults
def test_wrong_credentials_fail_fast_and_leave_the_data_as_it_was(auth_s3, s3_tools, tmp_path, monkeypatch):
    endpoint, key_id, secret, s3 = auth_s3
    good = s3_tools.aws_env(endpoint, tmp_path, key_id, secret)
    for name, value in good.items():
        monkeypatch.setenv(name, value)
    url = "s3://guarded/data"
    from pipeline.flows import executors

    cfg = run.ProfileConfig.build(backend="simulate", limit=4, n=2, grade_workers=1, report=False)
    run_id = executors.profile_direct(cfg, Store.open(url)).run_id
    before = {o["Key"]: o["ETag"] for o in s3.list_objects_v2(Bucket="guarded")["Contents"]}
    wrong = {**os.environ, **s3_tools.aws_env(endpoint, tmp_path, key_id, s3_tools.secret)}
    wrong["PREFECT_HOME"] = str(tmp_path / "p")
    for args in (
        ["profile", "--backend", "simulate", "--limit", "4", "--n", "2", "--no-prefect"],
        ["analyze", "--run", run_id],
        ["sql", "select count(*) from samples"],
        ["runs"],
    ):
        text = _fails_fast([*args, "--data-dir", url], wrong, tmp_path)
        assert "refused the credentials" in text, text[-1500:]
    after = {o["Key"]: o["ETag"] for o in s3.list_objects_v2(Bucket="guarded")["Contents"]}
    assert after == before
    with pytest.raises(StoreError, match="refused the credentials"):
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
        Store(url).list_runs()


@pytest.mark.faults
def test_truncated_object_is_quarantined_on_s3(s3_data):
    """A half object (written by another tool) is moved aside by doctor, logged, and never read."""
    store = Store.open(s3_data)
    table = pa.table({"run_id": ["r1"] * 3, "prompt_id": ["a", "b", "c"], "sample_idx": [0, 0, 0]})
    good = store.write_shard("r1", 0, table)
    body = store.read_bytes(good)
    store.write_bytes(store.shard_location("r1", 1), body[: len(body) // 2])
    found = store.doctor()
    assert [(f.file, f.table) for f in found] == [("samples/run_id=r1/shard-00001.parquet", "samples")]
    assert found[0].action.startswith("moved to quarantine/")
    assert store.finished_shards("r1") == {0} and store.read_table("samples").num_rows == 3
    log = [json.loads(line) for line in store.read_bytes(store.location("quarantine", "log.jsonl")).splitlines()]
    assert log[0]["file"] == "samples/run_id=r1/shard-00001.parquet"
    assert store.doctor() == []


def test_a_store_travels_as_its_url_only(s3_data, s3_env):
    """A pickled store (a Ray argument) holds the URL, not the filesystem or its credentials."""
    import pickle

    store = Store.open(s3_data)
    store.fs.ls(s3_data.split("://")[1].split("/")[0])  # a live session inside
    blob = pickle.dumps(store)
    assert s3_env["AWS_SECRET_ACCESS_KEY"].encode() not in blob and b"testing" not in blob
    assert pickle.loads(blob) == store and pickle.loads(blob).read_table("runs").num_rows == 0

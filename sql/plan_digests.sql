-- Each planned shard's digest, from the given plan files ($files), with the file it is read from:
-- one row per shard, where a plan has one per (shard, prompt). Which shard files a run owns
-- (store/files.py planned_digests).
SELECT DISTINCT filename, run_id, shard, digest
FROM read_parquet($files, hive_partitioning = false, union_by_name = true, filename = true)

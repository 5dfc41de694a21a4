-- Per (prompt, extracted answer) counts of a run from its shards' stored answer counts ($files:
-- the answer_counts files, one per shard, written with it): the same rows as answer_histogram.sql
-- from one row per distinct answer instead of one per sample. A prompt sampled in several shards
-- (adaptive rounds) has a row in each; the sums merge them.
SELECT prompt_id, extracted_answer AS a, sum(cnt)::BIGINT AS cnt, sum(cc)::BIGINT AS cc
FROM read_parquet($files, hive_partitioning = false)
GROUP BY prompt_id, extracted_answer

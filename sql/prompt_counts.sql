-- Per-prompt sample and correct counts over a run's sample files ($files: their paths).
-- Ungradable samples (unparsed, timeout, error) count as samples, not as correct.
SELECT prompt_id, count(*)::BIGINT AS n, (count(*) FILTER (WHERE correct))::BIGINT AS c
FROM read_parquet($files, hive_partitioning = false)
GROUP BY prompt_id
ORDER BY prompt_id

-- Per prompt, its answers cut by the token limit (finish_reason = 'length') over a run's sample
-- files ($files: their paths), and how many of those were not graded correct. Only prompts with
-- such an answer come back (the others have none): the filter lets DuckDB skip the row groups
-- whose statistics show no cut answer, so a run that hit no limit costs almost nothing.
SELECT prompt_id,
       count(*)::BIGINT AS n_truncated,
       (count(*) FILTER (WHERE NOT coalesce(correct, false)))::BIGINT AS n_truncated_wrong
FROM read_parquet($files, hive_partitioning = false)
WHERE finish_reason = 'length'
GROUP BY prompt_id
ORDER BY prompt_id

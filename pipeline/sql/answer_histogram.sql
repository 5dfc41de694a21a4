-- Per (prompt, extracted answer) counts over a run's sample files ($files: their paths): the
-- answer histograms behind the answer-concentration columns; per-prompt n and c are their sums.
SELECT prompt_id, extracted_answer AS a, count(*)::BIGINT AS cnt,
       (count(*) FILTER (WHERE correct))::BIGINT AS cc
FROM read_parquet($files, hive_partitioning = false)
GROUP BY prompt_id, extracted_answer

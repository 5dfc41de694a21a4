-- Per (prompt, extracted answer) counts over a run's sample files ($files: their paths): the
-- answer histograms behind the answer-concentration columns; per-prompt n and c are their sums.
-- One pass over the samples, and no ORDER BY: grouping the rows by prompt afterwards
-- (analyze._counts_from_histogram, integers only) costs less than DuckDB sorting them.
SELECT prompt_id, extracted_answer AS a, count(*)::BIGINT AS cnt,
       (count(*) FILTER (WHERE correct))::BIGINT AS cc
FROM read_parquet($files, hive_partitioning = false)
GROUP BY prompt_id, extracted_answer

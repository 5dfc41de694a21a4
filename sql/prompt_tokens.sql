-- Per prompt, over a run's sample files ($files: their paths), in one pass: its answers cut by the
-- token limit (finish_reason = 'length') and of those the ones not graded correct; and the lengths
-- in tokens (n_tokens) of the answers whose length is known: their count, total and total of
-- squares, and count and total of the right ones (graded correct) and of the cut ones (cut off and
-- not correct). The wrong and finished ones are the rest (analyze.with_tokens). An ungradable
-- answer (correct null) counts as not correct, as in sql/prompt_counts.sql. Plain sums and CASE
-- rather than FILTER, coalesce or stddev_samp: this pass runs at every finish, and those cost it
-- 2 to 4 times as much (bench/analysis.py).
SELECT prompt_id,
       coalesce(sum((finish_reason = 'length')::INTEGER), 0)::BIGINT AS n_truncated,
       coalesce(sum((finish_reason = 'length' AND correct IS NOT TRUE)::INTEGER), 0)::BIGINT AS n_truncated_wrong,
       count(n_tokens)::BIGINT AS tokens_counted,
       sum(n_tokens)::BIGINT AS tokens_spent,
       sum(n_tokens::BIGINT * n_tokens)::BIGINT AS tokens_sumsq,
       count(CASE WHEN correct THEN n_tokens END)::BIGINT AS right_counted,
       sum(CASE WHEN correct THEN n_tokens END)::BIGINT AS right_spent,
       count(CASE WHEN finish_reason = 'length' AND correct IS NOT TRUE THEN n_tokens END)::BIGINT AS cut_counted,
       sum(CASE WHEN finish_reason = 'length' AND correct IS NOT TRUE THEN n_tokens END)::BIGINT AS cut_spent
FROM read_parquet($files, hive_partitioning = false)
GROUP BY prompt_id
ORDER BY prompt_id

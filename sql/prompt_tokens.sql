-- Per prompt, over a run's sample files ($files: their paths), in one pass: its answers cut by the
-- token limit (finish_reason = 'length') and of those the ones not graded correct; and the lengths
-- in tokens (n_tokens) of the answers whose length is known: their count, total and sample sd
-- (ddof 1), and count and total by outcome: right (graded correct), wrong (not correct and
-- finished), cut (cut off by the token limit and not correct). An ungradable answer (correct null)
-- counts as not correct, as in sql/prompt_counts.sql.
SELECT prompt_id,
       (count(*) FILTER (WHERE finish_reason = 'length'))::BIGINT AS n_truncated,
       (count(*) FILTER (WHERE finish_reason = 'length' AND NOT coalesce(correct, false)))::BIGINT
           AS n_truncated_wrong,
       count(n_tokens)::BIGINT AS tokens_counted,
       sum(n_tokens)::BIGINT AS tokens_spent,
       stddev_samp(n_tokens) AS tokens_sd,
       (count(n_tokens) FILTER (WHERE coalesce(correct, false)))::BIGINT AS right_counted,
       (sum(n_tokens) FILTER (WHERE coalesce(correct, false)))::BIGINT AS right_spent,
       (count(n_tokens) FILTER (WHERE NOT coalesce(correct, false)
                                  AND coalesce(finish_reason, '') <> 'length'))::BIGINT AS wrong_counted,
       (sum(n_tokens) FILTER (WHERE NOT coalesce(correct, false)
                                AND coalesce(finish_reason, '') <> 'length'))::BIGINT AS wrong_spent,
       (count(n_tokens) FILTER (WHERE NOT coalesce(correct, false) AND finish_reason = 'length'))::BIGINT
           AS cut_counted,
       (sum(n_tokens) FILTER (WHERE NOT coalesce(correct, false) AND finish_reason = 'length'))::BIGINT
           AS cut_spent
FROM read_parquet($files, hive_partitioning = false)
GROUP BY prompt_id
ORDER BY prompt_id

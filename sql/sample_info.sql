-- One row about one run's samples ($run_id): how many, their mean completion length, how many
-- stopped at the token limit (finish_reason = 'length') and how many have an extracted answer.
SELECT
    count(*)::BIGINT AS samples,
    avg(n_tokens)::DOUBLE AS mean_tokens,
    (count(*) FILTER (WHERE finish_reason = 'length'))::BIGINT AS truncated,
    (count(*) FILTER (WHERE extracted_answer IS NOT NULL))::BIGINT AS answered
FROM samples
WHERE run_id = $run_id

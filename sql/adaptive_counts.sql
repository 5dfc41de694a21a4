-- Per-prompt counts of an adaptive run's samples ($files: its shard files): n and c over every
-- sample, and n0, c0 over the round-0 samples (sample_idx < $n_min), which the prior is fitted to.
-- Ungradable samples (unparsed, timeout, error) count as samples, not as correct.
-- k_tok, tok, tok2: the answers of known length (n_tokens not null), their tokens and the sum of their
-- squares, which a run priced in tokens learns each prompt's expected length from (docs/tokens.md).
SELECT
    prompt_id,
    count(*)::BIGINT AS n,
    (count(*) FILTER (WHERE correct))::BIGINT AS c,
    (count(*) FILTER (WHERE sample_idx < $n_min))::BIGINT AS n0,
    (count(*) FILTER (WHERE correct AND sample_idx < $n_min))::BIGINT AS c0,
    count(n_tokens)::BIGINT AS k_tok,
    coalesce(sum(n_tokens::DOUBLE), 0)::DOUBLE AS tok,
    coalesce(sum(n_tokens::DOUBLE * n_tokens::DOUBLE), 0)::DOUBLE AS tok2
FROM read_parquet($files, hive_partitioning = false)
GROUP BY prompt_id
ORDER BY prompt_id

-- Zero-signal (silent group) rate per prompt, checkpoint and group size G, with its change since
-- the previous checkpoint (unbiased for n >= G, posterior mean for n < G; see prompt_stats).
SELECT
    dataset,
    prompt_id,
    checkpoint,
    step,
    prev_checkpoint,
    G,
    zero_signal,
    prev_zero_signal,
    zero_signal - prev_zero_signal AS zero_signal_change
FROM (
    SELECT
        dataset, prompt_id, checkpoint, step, prev_checkpoint,
        unnest(group_sizes) AS G,
        unnest(zero_signal) AS zero_signal,
        unnest(prev_zero_signal) AS prev_zero_signal
    FROM history_drift
)
ORDER BY dataset, prompt_id, step NULLS LAST, checkpoint, G

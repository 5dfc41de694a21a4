-- Per prompt and checkpoint: the change since the previous checkpoint (same dataset), in step order.
-- silent: all n samples of the prompt agreed (c = 0 or c = n), so a GRPO group of them is silent.
-- became_silent / became_live: the prompt crossed that line between the two checkpoints.
SELECT
    dataset,
    prompt_id,
    checkpoint,
    step,
    run_id,
    LAG(checkpoint) OVER w AS prev_checkpoint,
    LAG(step) OVER w AS prev_step,
    n,
    c,
    pass_rate,
    LAG(pass_rate) OVER w AS prev_pass_rate,
    pass_rate - LAG(pass_rate) OVER w AS pass_rate_change,
    silent,
    LAG(silent) OVER w AS prev_silent,
    coalesce(silent AND NOT LAG(silent) OVER w, false) AS became_silent,
    coalesce(NOT silent AND LAG(silent) OVER w, false) AS became_live,
    CASE WHEN silent THEN CASE WHEN c = 0 THEN 'all_wrong' ELSE 'all_correct' END END AS silent_kind,
    group_sizes,
    zero_signal,
    LAG(zero_signal) OVER w AS prev_zero_signal,
    profiled_at
FROM history
WINDOW w AS (PARTITION BY dataset, prompt_id ORDER BY step NULLS LAST, profiled_at, checkpoint)

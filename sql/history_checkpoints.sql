-- One row per checkpoint: mean pass rate, share of silent prompts, and the drift since the
-- previous checkpoint (prompts that became silent or live, mean absolute pass-rate change).
SELECT
    dataset,
    checkpoint,
    step,
    any_value(run_id) AS run_id,
    count(*) AS n_prompts,
    round(avg(pass_rate), 4) AS mean_pass_rate,
    round(avg(silent::INTEGER), 4) AS share_silent,
    count(*) FILTER (WHERE became_silent) AS became_silent,
    count(*) FILTER (WHERE became_live) AS became_live,
    round(avg(abs(pass_rate_change)), 4) AS mean_abs_pass_rate_change
FROM history_drift
GROUP BY dataset, checkpoint, step
ORDER BY dataset, step NULLS LAST, min(profiled_at), checkpoint

-- The $limit largest pass-rate changes of a prompt between consecutive checkpoints (difficulty drift).
SELECT
    dataset,
    prompt_id,
    prev_checkpoint,
    checkpoint,
    prev_pass_rate,
    pass_rate,
    pass_rate_change
FROM history_drift
WHERE pass_rate_change IS NOT NULL
ORDER BY abs(pass_rate_change) DESC, prompt_id
LIMIT $limit

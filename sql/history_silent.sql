-- Prompts that became silent (all samples agree) since the previous checkpoint.
SELECT
    dataset,
    prompt_id,
    prev_checkpoint,
    checkpoint,
    step,
    prev_pass_rate,
    pass_rate,
    silent_kind
FROM history_drift
WHERE became_silent
ORDER BY step NULLS LAST, checkpoint, prompt_id

-- The first $limit prompts that became silent since the previous checkpoint (difficulty drift).
SELECT *
FROM history_silent
ORDER BY step NULLS LAST, checkpoint, prompt_id
LIMIT $limit

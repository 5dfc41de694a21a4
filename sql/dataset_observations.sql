-- Every observation of one dataset (profiles, training steps, labels): the report's training section.
SELECT * FROM observations WHERE dataset = $dataset ORDER BY source, step, prompt_id

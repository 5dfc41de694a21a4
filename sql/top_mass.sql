-- The $top prompts of one run ($run_id) with the largest stored update mass under one estimator
-- ($estimator, its spec) at one group size ($G); ties broken by prompt_id.
SELECT prompt_id::VARCHAR AS prompt_id, weight, mass
FROM weights
WHERE run_id::VARCHAR = $run_id AND estimator::VARCHAR = $estimator AND G = $G AND mass IS NOT NULL
ORDER BY mass DESC, prompt_id
LIMIT $top

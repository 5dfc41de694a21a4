-- Per-prompt sample and correct counts of one run (ungradable samples count as not correct).
SELECT prompt_id, count(*) AS n, count(*) FILTER (WHERE correct) AS c
FROM samples
WHERE run_id = $run_id
GROUP BY prompt_id
ORDER BY prompt_id

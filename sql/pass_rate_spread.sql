-- How a run's prompts spread over pass-rate bands (silent-at-every-G bands first and last).
SELECT
    CASE
        WHEN c = 0 THEN '0 (all wrong)'
        WHEN c = n THEN '1 (all right)'
        WHEN c / n < 0.1 THEN '(0, 0.1)'
        WHEN c / n < 0.4 THEN '[0.1, 0.4)'
        WHEN c / n <= 0.6 THEN '[0.4, 0.6]'
        WHEN c / n <= 0.9 THEN '(0.6, 0.9]'
        ELSE '(0.9, 1)'
    END AS pass_rate,
    count(*) AS prompts,
    round(100.0 * count(*) / sum(count(*)) OVER (), 1) AS percent
FROM prompt_stats
WHERE run_id = $run_id AND n > 0
GROUP BY 1
ORDER BY min(c / n), 1

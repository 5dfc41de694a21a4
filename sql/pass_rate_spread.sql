-- How a run's prompts spread over pass-rate bands (silent-at-every-G bands first and last), split at
-- the band edges bound as $lo < $mid_lo <= $mid_hi < $hi (schema.edge_params).
SELECT
    CASE
        WHEN c = 0 THEN '0 (all wrong)'
        WHEN c = n THEN '1 (all right)'
        WHEN c / n < $lo THEN format('(0, {})', $lo)
        WHEN c / n < $mid_lo THEN format('[{}, {})', $lo, $mid_lo)
        WHEN c / n <= $mid_hi THEN format('[{}, {}]', $mid_lo, $mid_hi)
        WHEN c / n <= $hi THEN format('({}, {}]', $mid_hi, $hi)
        ELSE format('({}, 1)', $hi)
    END AS pass_rate,
    count(*) AS prompts,
    round(100.0 * count(*) / sum(count(*)) OVER (), 1) AS percent
FROM prompt_stats
WHERE run_id = $run_id AND n > 0
GROUP BY 1
ORDER BY min(c / n), 1

-- Share of each estimator's expected update mass that goes to each difficulty band, at one G: the
-- five default bands cover every pass rate, so a row sums to 1 (analyze.DEFAULT_BANDS).
SELECT
    estimator,
    round(max(value) FILTER (WHERE band = 'hard'), 4) AS hard,
    round(max(value) FILTER (WHERE band = 'informative_hard'), 4) AS informative_hard,
    round(max(value) FILTER (WHERE band = 'informative_mid'), 4) AS informative_mid,
    round(max(value) FILTER (WHERE band = 'informative_easy'), 4) AS informative_easy,
    round(max(value) FILTER (WHERE band = 'easy'), 4) AS easy,
    round(max(value) FILTER (WHERE band = 'all' AND metric = 'mean_mass'), 5) AS mean_mass
FROM summary
WHERE run_id = $run_id AND section = 'gradient_share' AND G = $G
GROUP BY estimator
ORDER BY estimator

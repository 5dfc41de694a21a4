-- Share of each estimator's expected update mass that goes to each difficulty band, at one G.
SELECT
    estimator,
    round(max(value) FILTER (WHERE band = 'extreme'), 4) AS extreme_share,
    round(max(value) FILTER (WHERE band = 'medium'), 4) AS medium_share,
    round(max(value) FILTER (WHERE band = 'all' AND metric = 'mean_mass'), 5) AS mean_mass
FROM summary
WHERE run_id = $run_id AND section = 'gradient_share' AND G = $G
GROUP BY estimator
ORDER BY estimator

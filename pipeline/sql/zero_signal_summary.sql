-- Silent-group rate per G: observed (unbiased), predicted from per-prompt rates, iid from the mean.
SELECT
    G,
    round(max(value) FILTER (WHERE metric = 'observed'), 4) AS observed,
    round(max(value) FILTER (WHERE metric = 'observed_all_correct'), 4) AS all_correct,
    round(max(value) FILTER (WHERE metric = 'observed_all_wrong'), 4) AS all_wrong,
    round(max(value) FILTER (WHERE metric = 'iid'), 4) AS iid_from_mean,
    round(max(value) FILTER (WHERE metric = 'jensen_gap'), 4) AS jensen_gap
FROM summary
WHERE run_id = $run_id AND section = 'zero_signal'
GROUP BY G
ORDER BY G

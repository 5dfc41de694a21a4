-- Silent-group rate per G: the share of groups of G answers that are all wrong or all right (no
-- signal). Where some prompt has fewer than G answers (estimated), its rate is the Beta posterior's
-- estimate, not a count; the Jensen gap against the iid rate is left out there, and an adaptive
-- run gives the range every population of pass rates that fits the counts allows (90%, identify).
SELECT
    G,
    round(max(value) FILTER (WHERE metric = 'observed'), 4) AS silent,
    round(max(value) FILTER (WHERE metric = 'observed_all_wrong'), 4) AS all_wrong,
    round(max(value) FILTER (WHERE metric = 'observed_all_correct'), 4) AS all_right,
    coalesce(max(value) FILTER (WHERE metric = 'share_posterior'), 0) > 0 AS estimated,
    round(max(value) FILTER (WHERE metric = 'iid'), 4) AS iid_from_mean,
    CASE
        WHEN coalesce(max(value) FILTER (WHERE metric = 'share_posterior'), 0) > 0 THEN NULL
        ELSE round(max(value) FILTER (WHERE metric = 'jensen_gap'), 4)
    END AS jensen_gap,
    round(max(value) FILTER (WHERE metric = 'observed_lo'), 4) AS counts_allow_lo,
    round(max(value) FILTER (WHERE metric = 'observed_hi'), 4) AS counts_allow_hi
FROM summary
WHERE run_id = $run_id AND section = 'zero_signal'
GROUP BY G
ORDER BY G

-- A run's stored calibrations (difficulty calibrate): section 'calibration' of the summary table.
SELECT metric, band, value, n_prompts
FROM summary
WHERE run_id = $run_id AND section = 'calibration'
ORDER BY band, metric

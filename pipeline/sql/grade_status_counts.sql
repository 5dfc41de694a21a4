-- Samples of one run by grade status.
SELECT grade_status, count(*) AS n
FROM samples
WHERE run_id = $run_id
GROUP BY 1
ORDER BY 1

-- Samples of one run per grade status ($run_id), most frequent first; a null status is '(none)'.
SELECT coalesce(grade_status, '(none)') AS status, count(*)::BIGINT AS n
FROM samples
WHERE run_id = $run_id
GROUP BY 1
ORDER BY 2 DESC, 1

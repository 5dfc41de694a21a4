-- Verdicts that a regrade ($new) changed against its source run ($old): old -> new status counts.
SELECT o.grade_status AS old, n.grade_status AS new, count(*)::BIGINT AS n
FROM samples o
JOIN samples n USING (prompt_id, sample_idx)
WHERE o.run_id = $old AND n.run_id = $new AND o.grade_status IS DISTINCT FROM n.grade_status
GROUP BY 1, 2
ORDER BY 3 DESC, 1, 2

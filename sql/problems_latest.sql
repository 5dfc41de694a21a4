-- The problems in $files (oldest load first, files.load_order): one row per (dataset, prompt_id),
-- the one of its latest load, so a load adds and updates problems and never drops one.
SELECT * EXCLUDE (filename, file_row_number)
FROM read_parquet($files, hive_partitioning = false, union_by_name = true, filename = true, file_row_number = true)
QUALIFY row_number() OVER (
    PARTITION BY dataset, prompt_id ORDER BY list_position($files, filename) DESC, file_row_number DESC
) = 1
ORDER BY list_position($files, filename), file_row_number

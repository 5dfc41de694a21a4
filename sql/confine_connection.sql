-- Confine a connection that runs a user's SQL (`difficulty sql`) to the data directory.
-- Run after the views exist, one statement at a time (Store.connect(confined=True)), in this order:
-- allowed_directories cannot change once external access is off, and nothing can once locked.
-- $temp_directory: spill files go inside the data directory, since DuckDB adds the temporary
-- directory to the allowed ones (the default is ./.tmp in the working directory).
-- $allowed_directories: the data directory; the views' own files are under it.
-- Then no file or URL outside those folders, no extension install or autoload (httpfs), and no
-- SET that undoes any of this.
SET temp_directory = $temp_directory;
SET allowed_directories = $allowed_directories;
SET autoinstall_known_extensions = false;
SET autoload_known_extensions = false;
SET enable_external_access = false;
SET lock_configuration = true;

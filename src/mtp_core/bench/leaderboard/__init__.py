"""The leaderboard: `plan` (rows, jobs, result files, check) and `table` (its table and figure)."""

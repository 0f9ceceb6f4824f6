"""USL: a user-centric subjective leaderboard of LLMs, as Dagster assets over a DuckDB warehouse."""

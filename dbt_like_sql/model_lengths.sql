-- Mean response length per model over the prompts the leaderboard scored: the "rank by length" baseline
-- that external validity compares the leaderboard with.
-- unique: pool, model
-- not_null: mean_length_chars
SELECT
    pool,
    model,
    count(*) AS n_responses,
    avg(length_chars) AS mean_length_chars
FROM leaderboard.response_scores
WHERE profile = 'default'
GROUP BY pool, model

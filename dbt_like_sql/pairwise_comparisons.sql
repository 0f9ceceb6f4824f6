-- Every pair of models on every prompt, per profile: the comparisons the Bradley–Terry fit reads.
-- a_score = 1 when model_a's reward is higher, 0.5 when equal, 0 when lower; each pair once (model_a < model_b).
-- unique: pool, profile, prompt_id, model_a, model_b
-- not_null: a_score
SELECT
    a.pool,
    a.profile,
    a.prompt_id,
    a.scenario,
    a.scenario_group,
    a.model AS model_a,
    b.model AS model_b,
    CASE WHEN a.reward > b.reward THEN 1.0 WHEN a.reward = b.reward THEN 0.5 ELSE 0.0 END AS a_score
FROM leaderboard.response_scores AS a
JOIN leaderboard.response_scores AS b
    ON b.pool = a.pool AND b.profile = a.profile AND b.prompt_id = a.prompt_id AND a.model < b.model

-- Per prompt and profile: does each model's response beat the pool's reference model's response?
-- win = 1 (higher reward), 0.5 (equal reward), 0 (lower). The USL score is the mean of `win` in percent;
-- reward_diff and length_diff (characters) feed usl_soft and usl_lc (leaderboards/ranking.py).
-- The reference model of a pool comes from leaderboard.reference_models (asset config).
-- unique: pool, profile, prompt_id, model
-- not_null: win
SELECT
    m.pool,
    m.profile,
    m.prompt_id,
    m.scenario,
    m.scenario_group,
    m.model,
    ref.model AS reference_model,
    CASE WHEN m.reward > ref.reward THEN 1.0 WHEN m.reward = ref.reward THEN 0.5 ELSE 0.0 END AS win,
    m.reward - ref.reward AS reward_diff,
    m.length_chars - ref.length_chars AS length_diff,
    m.checkpoint_id
FROM leaderboard.response_scores AS m
JOIN leaderboard.reference_models AS c
    ON c.pool = m.pool
JOIN leaderboard.response_scores AS ref
    ON ref.pool = m.pool AND ref.profile = m.profile AND ref.prompt_id = m.prompt_id
    AND ref.model = c.reference_model

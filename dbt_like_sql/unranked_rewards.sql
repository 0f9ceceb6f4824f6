-- Rewards the leaderboard leaves out, each with its reason, so nothing is dropped silently: a profile not in
-- scoring.criteria_profiles, a response no longer in responses.responses or changed since it was scored,
-- a non-finite reward, or a scenario default profile scored for a response of another scenario.
-- not_null: pool, prompt_id, model, profile, reason
SELECT pool, prompt_id, model, profile, reward, reason
FROM (
    SELECT
        r.pool,
        r.prompt_id,
        r.model,
        r.profile,
        r.reward,
        p.kind,
        CASE
            WHEN p.profile IS NULL THEN 'unknown_profile'
            WHEN s.model IS NULL THEN 'response_missing'
            WHEN s.response_hash <> r.response_hash THEN 'stale_response'
            WHEN r.reward IS NULL OR NOT isfinite(r.reward) THEN 'non_finite_reward'
            WHEN p.kind = 'scenario_default' AND p.scenario IS DISTINCT FROM s.scenario THEN 'other_scenario_default'
        END AS reason
    FROM scoring.response_rewards AS r
    LEFT JOIN scoring.criteria_profiles AS p
        ON p.profile = r.profile AND p.criteria_hash = r.criteria_hash
    LEFT JOIN responses.responses AS s
        ON s.pool = r.pool AND s.prompt_id = r.prompt_id AND s.model = r.model
) AS checked
WHERE reason IS NOT NULL AND kind IS DISTINCT FROM 'adhoc'

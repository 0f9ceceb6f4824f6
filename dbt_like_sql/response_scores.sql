-- One reward per (pool, prompt, model, leaderboard profile), with the facts the rankings group by.
-- A response's reward under its own scenario's default criteria is profile 'default'; named profiles keep
-- their names; ad hoc profiles (the CLI's) stay out of the nightly leaderboard. Rewards of a response that
-- has since changed (another response_hash) and non-finite rewards are left out; unranked_rewards lists them.
-- unique: pool, prompt_id, model, profile
-- not_null: pool, prompt_id, model, profile, scenario, scenario_group, reward
SELECT
    r.pool,
    r.prompt_id,
    r.model,
    CASE WHEN p.kind = 'scenario_default' THEN 'default' ELSE p.profile END AS profile,
    s.scenario,
    s.scenario_group,
    s.length_chars,
    r.reward,
    r.checkpoint_id
FROM scoring.response_rewards AS r
JOIN scoring.criteria_profiles AS p
    ON p.profile = r.profile AND p.criteria_hash = r.criteria_hash
JOIN responses.responses AS s
    ON s.pool = r.pool AND s.prompt_id = r.prompt_id AND s.model = r.model AND s.response_hash = r.response_hash
WHERE (p.kind = 'named' OR (p.kind = 'scenario_default' AND p.scenario = s.scenario))
    AND isfinite(r.reward)

-- Per pool and loaded model: how many of the pool's scored (sampled) prompts have its reward under the default
-- profile. The rankings rank only models with enough coverage (RankingConfig.min_coverage, 0.9 by default) and
-- list the others in leaderboard.unranked_models with the reason; a model none of whose prompts is sampled has 0.
-- unique: pool, model
-- not_null: pool, model, scored_prompts, sampled_prompts, coverage
WITH sampled AS (
    SELECT pool, count(*) AS sampled_prompts FROM responses.prompt_sample WHERE sampled GROUP BY pool
),
scored AS (
    SELECT pool, model, count(DISTINCT prompt_id) AS scored_prompts
    FROM leaderboard.response_scores WHERE profile = 'default' GROUP BY pool, model
),
models AS (
    SELECT DISTINCT pool, model FROM responses.responses
)
SELECT
    m.pool,
    m.model,
    coalesce(s.scored_prompts, 0) AS scored_prompts,
    p.sampled_prompts,
    coalesce(s.scored_prompts, 0) / p.sampled_prompts AS coverage
FROM models AS m
JOIN sampled AS p ON p.pool = m.pool
LEFT JOIN scored AS s ON s.pool = m.pool AND s.model = m.model

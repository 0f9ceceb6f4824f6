"""The scoring sample: which of the pools' prompts the CRM scores (table responses.prompt_sample).

A seeded draw stratified by (pool, scenario), so every scenario is represented and a rerun draws the same prompts.
"""

from dataclasses import dataclass

import pandas as pd

from usl_assets.settings import UslConfigError

DEFAULT_PER_SCENARIO = 4  # prompts per (pool, scenario) when the sample is not the full pool


@dataclass(frozen=True)
class SampleRule:
    per_scenario: int = DEFAULT_PER_SCENARIO
    full_pool: bool = False
    seed: int = 0

    def describe(self) -> str:
        if self.full_pool:
            return "full pool"
        return f"stratified: up to {self.per_scenario} prompts per (pool, scenario), seed {self.seed}"


def stratified_sample(prompts: pd.DataFrame, rule: SampleRule) -> pd.DataFrame:
    """Every prompt with `sampled` true for up to `per_scenario` of each (pool, scenario), drawn with a seed."""
    if not rule.full_pool and rule.per_scenario < 1:
        raise UslConfigError(f"per_scenario must be at least 1 (got {rule.per_scenario}); use full_pool for all")
    frame = prompts[["pool", "prompt_id", "scenario"]].sort_values(["pool", "prompt_id"], ignore_index=True)
    if rule.full_pool:
        chosen = frame.index
    else:
        shuffled = frame.sample(frac=1.0, random_state=rule.seed)
        chosen = shuffled.groupby(["pool", "scenario"]).head(rule.per_scenario).index
    frame["sampled"] = frame.index.isin(chosen)
    frame["sample_rule"] = rule.describe()
    return frame


def sample_gaps(warehouse) -> dict[str, int]:
    """Prompts missing from or repeated in the sample, and (pool, scenario) strata with nothing sampled."""
    found = warehouse.query(
        """
        SELECT
            (SELECT count(*) FROM responses.prompts p ANTI JOIN responses.prompt_sample s USING (pool, prompt_id))
                AS prompts_not_listed,
            (SELECT count(*) - count(DISTINCT (pool, prompt_id)) FROM responses.prompt_sample) AS listed_twice,
            (SELECT count(*) FROM (SELECT pool, scenario FROM responses.prompt_sample GROUP BY ALL
                                   HAVING NOT bool_or(sampled))) AS strata_without_sample
        """
    ).iloc[0]
    return {name: int(value) for name, value in found.items()}

import numpy as np
import pandas as pd
import pytest

from usl_assets.crm.interface import ScoreItem
from usl_assets.resources import Warehouse
from usl_assets.responses.pools import content_hash
from usl_assets.scoring import cache, score
from usl_assets.scoring.profiles import DEFAULT_PROFILES_FILE, build_profiles
from usl_assets.settings import UslConfigError
from usl_assets_tests.test_scoring_support import (  # noqa: F401  (fixtures)
    alpaca_responses, crm_models, cross_scorer, factorized_scorer, prompt_sample, write_upstream)

MODELS = ["gpt4_1106_preview", "claude-2.1"]


@pytest.fixture
def warehouse(tmp_path) -> Warehouse:
    return Warehouse(path=str(tmp_path / "warehouse.duckdb"))


@pytest.fixture
def requests(shared_data_dir) -> pd.DataFrame:
    responses = alpaca_responses(shared_data_dir, MODELS, n_prompts=6)
    profiles, _ = build_profiles(shared_data_dir, DEFAULT_PROFILES_FILE)
    return score.reward_requests(responses, profiles)[0]


def test_input_hash_covers_prompt_and_response():
    assert content_hash("a", "same answer") != content_hash("b", "same answer")
    assert content_hash("a", "x") == content_hash("a", "x")


def test_requests_pair_each_response_with_its_default_and_every_named_profile(shared_data_dir):
    responses = alpaca_responses(shared_data_dir, MODELS, n_prompts=8)
    profiles, _ = build_profiles(shared_data_dir, DEFAULT_PROFILES_FILE)
    requests, quarantine = score.reward_requests(responses, profiles)
    n_named = (profiles["kind"] == "named").sum()
    no_default = responses["scenario"].eq("not_a_scenario").sum()
    assert len(requests) == len(responses) * (1 + n_named) - no_default
    assert len(quarantine) == no_default > 0 and set(quarantine["rule"]) == {"no_default_profile"}
    code = requests[(requests["scenario"] == "code_generation") & requests["profile"].str.startswith("default:")]
    assert set(code["profile"]) == {"default:code_generation"}


def test_cross_rewards_match_the_scorer_and_are_never_scored_twice(warehouse, requests, cross_scorer):
    first, stats = cache.rewards_for(warehouse, cross_scorer, requests, batch_size=4)
    again, stats_again = cache.rewards_for(warehouse, cross_scorer, requests, batch_size=7)
    unique = requests.drop_duplicates(["criteria_hash", "input_hash"])
    assert stats.scored == len(unique) and stats.cache_hits == 0
    assert stats_again.scored == 0 and stats_again.cache_hits == len(unique)
    merged = first.merge(again, on=["criteria_hash", "input_hash"])
    assert np.allclose(merged["reward_x"], merged["reward_y"])
    row = unique.iloc[3]
    direct = cross_scorer.score([ScoreItem(row["prompt"], row["response"], tuple(row["criteria"]))])[0]
    cached = first.set_index(["criteria_hash", "input_hash"]).loc[(row["criteria_hash"], row["input_hash"]), "reward"]
    assert cached == pytest.approx(direct, abs=1e-5)


def test_factorized_scorer_embeds_each_response_once(warehouse, requests, factorized_scorer):
    named = requests[~requests["profile"].str.startswith("default:")]
    first_profile = named[named["profile"] == named["profile"].iloc[0]]
    _, stats = cache.rewards_for(warehouse, factorized_scorer, first_profile)
    rewards, stats_rest = cache.rewards_for(warehouse, factorized_scorer, named)
    stored = warehouse.query(f"SELECT count(*) AS n FROM {cache.EMBEDDINGS_TABLE}")["n"][0]
    assert stats.embedded == len(first_profile) and stats_rest.embedded == 0
    assert stats_rest.scored == len(named) - len(first_profile) and stored == len(first_profile)
    row = named.iloc[-1]
    expected = factorized_scorer.score([ScoreItem(row["prompt"], row["response"], tuple(row["criteria"]))])[0]
    got = rewards.set_index(["criteria_hash", "input_hash"]).loc[(row["criteria_hash"], row["input_hash"]), "reward"]
    assert got == pytest.approx(expected, rel=1e-4, abs=1e-4)


def test_non_finite_rewards_are_quarantined_not_written(requests):
    rewards = requests[["criteria_hash", "input_hash"]].drop_duplicates().assign(reward=1.0)
    rewards.iloc[0, rewards.columns.get_loc("reward")] = np.nan
    rows, bad = score.attach_rewards(requests, rewards, "ckpt")
    assert len(bad) >= 1 and set(bad["rule"]) == {"non_finite_reward"}
    assert len(rows) + len(bad) == len(requests) and np.isfinite(rows["reward"]).all()


@pytest.fixture
def adhoc_warehouse(warehouse, shared_data_dir, cross_scorer, monkeypatch) -> Warehouse:
    responses = alpaca_responses(shared_data_dir, MODELS, n_prompts=8)
    write_upstream(warehouse, responses, prompt_sample(responses, every=2))
    monkeypatch.setattr(score, "load_scorer", lambda root, checkpoint="", architecture=None: cross_scorer)
    return warehouse


def test_adhoc_profile_scores_the_sample_once_and_is_recorded(adhoc_warehouse, tmp_path):
    criteria = ["Answers in one sentence.", "Uses no jargon."]
    first = score.score_adhoc_profile(adhoc_warehouse, tmp_path, "alpaca_eval", criteria)
    assert list(first.columns) == ["pool", "prompt_id", "model", "scenario", "length_chars", "reward"]
    assert len(first) == 2 * 4 and first["reward"].notna().all()
    assert first.attrs["stats"].scored == 8
    again = score.score_adhoc_profile(adhoc_warehouse, tmp_path, "alpaca_eval", criteria)
    assert again.attrs["stats"].scored == 0 and np.allclose(first["reward"], again["reward"])
    topic = score.score_adhoc_profile(adhoc_warehouse, tmp_path, "alpaca_eval", criteria, scenarios=["Code"])
    assert set(topic["scenario"]) == {"code_generation"} and topic.attrs["stats"].scored == 0
    recorded = adhoc_warehouse.query("SELECT * FROM scoring.criteria_profiles WHERE kind = 'adhoc'")
    assert list(recorded["profile"]) == [first.attrs["profile"]]


@pytest.mark.parametrize("pool, criteria, topics, message", [
    ("mt_bench", ["Be brief."], None, "unknown pool 'mt_bench'"),
    ("alpaca_eval", [], None, "bad --criteria: criteria must be a non-empty list"),
    ("alpaca_eval", ["Be brief.", ""], None, "is not a non-empty text line"),
    ("alpaca_eval", ["Be brief."], ["astrology"], "unknown topic"),
])
def test_adhoc_bad_arguments_are_one_clear_error(adhoc_warehouse, tmp_path, pool, criteria, topics, message):
    with pytest.raises(UslConfigError, match=message):
        score.score_adhoc_profile(adhoc_warehouse, tmp_path, pool, criteria, scenarios=topics)

"""The preference assets and checks materialized on the real files plus a deliberately broken user file."""

import hashlib
import json
import shutil
from pathlib import Path

import dagster as dg
import pytest

from usl_assets.preferences import assets as preference_assets
from usl_assets.preferences.sources import USER_PREFERENCES_ENV
from usl_assets.resources import DataDir, UslHome, Warehouse

FIXTURES = Path(__file__).parent / "fixtures" / "preferences"
BROKEN_USER_FILE = FIXTURES / "broken_user_preferences.jsonl"
ALL = [*preference_assets.defs.assets, *preference_assets.defs.asset_checks]
JUDGE_PROMPTS = 20  # the AI judge's rows of the first 20 instructions: 42 judged models each


def resources_at(home: Path, data: Path) -> dict:
    return {"data_dir": DataDir(path=str(data)), "usl_home": UslHome(path=str(home)),
            "warehouse": Warehouse(path=str(home / "warehouse.duckdb"))}


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, shared_data_dir):
    """One run of every preference asset and check: the real files and the broken user file."""
    resources = resources_at(tmp_path_factory.mktemp("usl_home"), shared_data_dir)
    config = {"ops": {"raw_user_preferences": {"config": {"path": str(BROKEN_USER_FILE)}},
                      "raw_alpaca_eval_judgments": {"config": {"max_prompts": JUDGE_PROMPTS}}}}
    result = dg.materialize(ALL, resources=resources, run_config=config)
    return result, resources["warehouse"]


def count(warehouse, sql):
    return int(warehouse.query(sql).iloc[0, 0])


def test_run_succeeds_and_every_check_passes(full_run):
    result, _ = full_run
    assert result.success
    evaluations = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert evaluations == {
        "validated_preferences_pandera": True, "validated_preferences_gx": True, "preferences_raw_balance": True,
        "canonical_preferences_complete": True, "scenario_criteria_complete": True,
        "raw_autoj_pairwise_readable": True, "raw_pandalm_readable": True, "raw_hh_rlhf_harmless_readable": True,
        "raw_alpaca_eval_judgments_readable": True,
        "raw_user_preferences_readable": False,  # a warning: the broken file has 3 unreadable lines
    }
    user = next(e for e in result.get_asset_check_evaluations() if e.check_name == "raw_user_preferences_readable")
    assert user.severity == dg.AssetCheckSeverity.WARN
    assert user.metadata["unreadable_rows"].value == 3


def test_raw_tables_hold_the_files_as_they_are(full_run, shared_data_dir):
    result, warehouse = full_run
    assert count(warehouse, "SELECT count(*) FROM raw.autoj_pairwise") == 1392
    assert count(warehouse, "SELECT count(*) FROM raw.pandalm") == 500
    assert count(warehouse, "SELECT count(*) FROM raw.hh_rlhf_harmless") == 2312
    assert count(warehouse, "SELECT count(*) FROM raw.user_preferences") == 12  # 13 lines, one blank
    booleans = warehouse.query("SELECT response1 FROM raw.pandalm WHERE json_type(response1) = 'BOOLEAN'")
    assert booleans["response1"].tolist() == ["true", "true"]
    metadata = next(m for m in result.get_asset_materialization_events()
                    if m.asset_key == dg.AssetKey("raw_autoj_pairwise")).materialization.metadata
    autoj_file = shared_data_dir / "preferences" / "autoj_pairwise.jsonl"
    assert metadata["source_sha256"].value == hashlib.sha256(autoj_file.read_bytes()).hexdigest()
    assert metadata["source_size_bytes"].value == autoj_file.stat().st_size
    assert metadata["dagster/row_count"].value == 1392


def test_every_raw_row_is_valid_or_quarantined(full_run):
    _, warehouse = full_run
    per_source = warehouse.query(
        "SELECT source, count(*) FILTER (WHERE rule IS NULL) AS valid, count(rule) AS quarantined FROM ("
        "  SELECT source, NULL AS rule FROM validated.preferences"
        "  UNION ALL SELECT source, rule FROM quality.quarantine"
        ") GROUP BY source"
    ).set_index("source")
    raw = {"autoj": 1392, "pandalm": 500, "hh_rlhf_harmless": 2312, "user": 12, "alpaca_eval_judge": 42 * JUDGE_PROMPTS}
    for source, rows in raw.items():
        assert per_source.loc[source, "valid"] + per_source.loc[source, "quarantined"] == rows
    assert per_source.loc["autoj", "valid"] == 1382  # 9 identical pairs, 1 empty response
    assert per_source.loc["pandalm", "quarantined"] == 57
    assert count(warehouse, "SELECT count(*) FROM validated.preferences WHERE source = 'pandalm' AND "
                            "len(votes) = 3") == per_source.loc["pandalm", "valid"]


def test_broken_user_rows_land_in_quarantine_with_their_rule(full_run):
    _, warehouse = full_run
    rules = warehouse.query("SELECT idx, rule FROM quality.quarantine WHERE source = 'user'")
    assert dict(zip(rules["idx"], rules["rule"])) == {
        "user:3": "invalid_json", "user:4": "non_string_text", "user:5": "identical_responses",
        "user:6": "unknown_label", "user:7": "duplicate_pair", "user:8": "invalid_utf8",
        "user:9": "unknown_scenario", "user:10": "empty_text", "user:12": "not_an_object",
        "user:13": "malformed_conversation",
    }
    valid = warehouse.query("SELECT * FROM validated.preferences WHERE source = 'user' ORDER BY idx")
    assert valid["idx"].tolist() == ["user:1", "user:2"]
    assert valid["model_a_name"].tolist() == ["poet-7b", None]
    assert len(valid.loc[0, "a_criteria"]) > 0 and len(valid.loc[0, "b_criteria"]) == 0
    assert list(valid.loc[1, "a_criteria"]) == list(valid.loc[1, "b_criteria"]) == [
        "Accuracy: the explanation is technically correct.", "Brevity: exactly two sentences."]
    unreadable = warehouse.query("SELECT record FROM quality.quarantine WHERE idx = 'user:8'")["record"].iloc[0]
    assert "\\xe9" in json.loads(unreadable)["raw_line"]


def test_quarantine_metadata_shows_counts_by_rule(full_run):
    result, _ = full_run
    metadata = next(m for m in result.get_asset_materialization_events()
                    if m.asset_key == dg.AssetKey("preference_quarantine")).materialization.metadata
    table = metadata["quarantined_by_rule"].value
    assert "| pandalm | duplicate_pair | 29 |" in table
    assert "| user | invalid_utf8 | 1 |" in table


def test_checks_fail_when_validated_table_is_tampered(full_run, tmp_path):
    _, warehouse = full_run
    copy = Warehouse(path=str(tmp_path / "tampered.duckdb"))
    shutil.copyfile(warehouse.database_path(), copy.database_path())
    with copy.connect() as conn:
        conn.execute("INSERT INTO validated.preferences SELECT * FROM validated.preferences WHERE idx = ?",
                     ["autoj:1"])
    assert not preference_assets.validated_preferences_pandera(warehouse=copy).passed
    assert not preference_assets.validated_preferences_gx(warehouse=copy).passed
    balance = preference_assets.preferences_raw_balance(warehouse=copy)
    assert not balance.passed
    assert "| autoj | 1392 | 1383 | 10 | False |" in balance.metadata["by_source"].value


@pytest.mark.parametrize("configured", ["none", "env"])
def test_user_file_from_env_or_none(usl_env, monkeypatch, configured):
    if configured == "env":
        monkeypatch.setenv(USER_PREFERENCES_ENV, str(FIXTURES / "user_preferences_example.jsonl"))
    else:
        monkeypatch.delenv(USER_PREFERENCES_ENV, raising=False)
    result = dg.materialize([preference_assets.raw_user_preferences], resources=usl_env)
    metadata = result.get_asset_materialization_events()[0].materialization.metadata
    expected_rows = 2 if configured == "env" else 0
    assert metadata["dagster/row_count"].value == expected_rows
    if configured == "none":
        assert metadata["source_file"].value == "none configured: empty table"
    assert count(usl_env["warehouse"], "SELECT count(*) FROM raw.user_preferences") == expected_rows


def test_scenario_criteria_table(usl_env):
    dg.materialize([preference_assets.scenario_criteria], resources=usl_env)
    frame = usl_env["warehouse"].read_table("validated.scenario_criteria")
    assert list(frame.columns) == ["scenario", "scenario_group", "description", "criterion", "content", "weight",
                                   "type"]
    assert frame["scenario"].nunique() == 60  # the 58 grouped ones Auto-J's pairs use, plus peer_review, rejecting
    assert frame.dropna(subset=["scenario_group"])["scenario"].nunique() == 58
    assert frame["scenario_group"].nunique() == 8
    assert frame["weight"].between(1, 5).all() and frame["content"].str.len().gt(0).all()


def test_judge_rows_carry_their_kind_and_the_judges_probability(full_run):
    _, warehouse = full_run
    judged = warehouse.query("SELECT label_kind, soft_label, human_winner, model_a_name, model_b_name "
                             "FROM validated.preferences WHERE source = 'alpaca_eval_judge'")
    assert set(judged["label_kind"]) == {"ai_judge"} and judged["model_a_name"].eq("gpt4_1106_preview").all()
    assert judged["model_b_name"].nunique() == 42
    assert ((judged["soft_label"] > 0.5) == (judged["human_winner"] == "model_a")).all()
    assert 0.05 < judged["soft_label"].std()  # the judge's probabilities, not hard labels
    human = warehouse.query("SELECT DISTINCT label_kind FROM validated.preferences WHERE source <> 'alpaca_eval_judge'")
    assert human["label_kind"].tolist() == ["human"]

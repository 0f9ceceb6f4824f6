import dagster as dg
import pandas as pd
import pytest
import yaml

from usl_assets.crm import data, judge_pairs
from usl_assets.crm.data_assets import EXCLUDED_TABLE, PAIRS_TABLE, crm_training_pairs, graded_answers_out_of_sample
from usl_assets.crm.data_assets import defs as crm_data_defs
from usl_assets.crm.features import response_counts
from usl_assets.settings import UslConfigError
from usl_assets_tests.crm_data_inputs import scenario_criteria_frame, tagged_preferences_frame


def words(n: int) -> str:
    return " ".join(["word"] * n) + "."


@pytest.fixture(scope="module")
def real_inputs(shared_data_dir) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Real pairs from every source in the contract schema: every 2nd Auto-J pair, 200 PandaLM, 600 hh-rlhf."""
    return (tagged_preferences_frame(shared_data_dir, autoj_step=2, pandalm=200, hh=600),
            scenario_criteria_frame(shared_data_dir))


@pytest.fixture(scope="module")
def built(real_inputs) -> tuple[pd.DataFrame, pd.DataFrame]:
    return data.build_training_pairs(*real_inputs, data.PairsConfig())[:2]


# ------------------------------------------------------------------------------------- property rules

def test_length_needs_both_ratio_and_absolute_gap():
    rule = data.PROPERTIES["length"].more_side
    assert rule(response_counts(words(100)), response_counts(words(50))) == "a"  # 2x and +50 words
    assert rule(response_counts(words(30)), response_counts(words(10))) is None  # 3x but only +20 words
    assert rule(response_counts(words(170)), response_counts(words(100))) is None  # +70 words but 1.7x
    assert rule(response_counts(words(10)), response_counts(words(60))) == "b"


def test_structure_code_questions_rules():
    listed, prose = "Steps:\n- one\n- two\n- three", "Just do it in one go, then check it."
    assert data.PROPERTIES["structure"].more_side(response_counts(prose), response_counts(listed)) == "b"
    assert data.PROPERTIES["structure"].more_side(response_counts("- a\n- b"), response_counts(prose)) is None
    code, inline = "Run:\n```\nls\n```", "Run `ls` there."
    assert data.PROPERTIES["code"].more_side(response_counts(code), response_counts(prose)) == "a"
    assert data.PROPERTIES["code"].more_side(response_counts(code), response_counts(inline)) is None
    assert data.PROPERTIES["questions"].more_side(response_counts("Which one?"), response_counts(prose)) == "a"


def test_numbers_rule_needs_density_and_a_side_without_digits():
    rule = data.PROPERTIES["numbers"].more_side
    dense, none = "It costs 12,500 dollars in 2024.", "It is quite expensive nowadays."
    assert rule(response_counts(dense), response_counts(none)) == "a"
    assert rule(response_counts(dense), response_counts("It was 5 years ago.")) is None


def test_every_property_has_several_phrasings_per_direction():
    for prop in data.PROPERTIES.values():
        for direction in ("more", "less"):
            phrasings = prop.phrasings(direction)
            assert len(phrasings) >= 3 and len(set(phrasings)) == len(phrasings)


def test_phrasings_come_from_the_yaml_and_a_broken_file_fails_loudly(tmp_path):
    from usl_assets.crm.properties import PHRASINGS_FILE, load_properties

    assert load_properties(PHRASINGS_FILE) == data.PROPERTIES
    assert data.PROPERTIES["length"].less[0] == "The user prefers brief answers."
    text = PHRASINGS_FILE.read_text(encoding="utf-8")
    without_code = tmp_path / "no_code.yaml"
    without_code.write_text(text.replace("  code:", "  kode:"), encoding="utf-8")
    with pytest.raises(ValueError, match="differ from the measured ones"):
        load_properties(without_code)
    one_phrasing = tmp_path / "one.yaml"
    one_phrasing.write_text(yaml.safe_dump({"properties": {name: {"more": ["Only one."], "less": ["A.", "B."]}
                                                           for name in data.PROPERTIES}}), encoding="utf-8")
    with pytest.raises(ValueError, match="length.more needs at least two"):
        load_properties(one_phrasing)


# ------------------------------------------------------------------------------------- splits and leakage

def test_prompt_shared_across_splits_goes_to_the_most_held_out_one():
    pairs = pd.DataFrame([
        {"source": "autoj", "scenario_group": "Rewriting", "prompt": "Fix this text", "origin_idx": "autoj:1"},
        {"source": "hh_rlhf_harmless", "scenario_group": "General Communication", "prompt": "fix  THIS text ",
         "origin_idx": "hh:1"},
        {"source": "pandalm", "scenario_group": "NLP Tasks", "prompt": "Other", "origin_idx": "pandalm:1"},
    ])
    splits = data.assign_splits(pairs, data.PairsConfig(heldout_groups=("Rewriting",)))
    assert splits.tolist() == ["new_scenario", "new_scenario", "pandalm_majority"]


def test_no_prompt_in_train_and_a_test_split(built):
    table, _ = built
    assert data.prompt_leaks(table).empty
    by_prompt = table[table["split"] != "judge_heldout_models"]  # held out by model: its prompts also train
    keys = by_prompt["prompt"].map(data.prompt_key)
    assert (by_prompt.assign(key=keys).groupby("key")["split"].nunique() == 1).all()


def test_judge_pairs_hold_out_by_model_and_never_train_on_the_reference(built):
    table, excluded = built
    judge = table[table["source"] == "alpaca_eval_judge"]
    train, held = judge[judge["split"] == "train"], judge[judge["split"] == "judge_heldout_models"]
    held_models = set(held["chosen_model"]) | set(held["rejected_model"])
    train_models = set(train["chosen_model"].dropna()) | set(train["rejected_model"].dropna())
    assert len(held_models - train_models) >= 7  # >= 6 judged models and the reference
    assert "gpt4_1106_preview" in held_models and "gpt4_1106_preview" not in train_models
    assert (judge["label_kind"] == "ai_judge").all() and judge["soft_label"].between(0, 1).all()
    original = train[train["augmentation"] == "original"]
    assert original["soft_label"].between(0.5, 1).all() and (original["soft_label"] < 1).any()


def test_judge_answers_found_in_a_response_pool_never_train(real_inputs):
    tagged, criteria = real_inputs
    judged = tagged[tagged["source"] == "alpaca_eval_judge"]
    in_pool = judged["response_b"].iloc[0]
    table, excluded, _ = data.build_training_pairs(tagged, criteria, data.PairsConfig(), pool_texts={in_pool.strip()})
    assert excluded.loc[excluded["origin_idx"] == judged["idx"].iloc[0], "reason"].tolist() == ["text_in_pool"]
    train = table[table["split"] == "train"]
    assert in_pool not in set(train["chosen"]) | set(train["rejected"])


def test_leak_detector_finds_a_leak(built):
    table, _ = built
    leaked = table[table["split"] == "human_heldout"].head(1).assign(split="train")
    assert len(data.prompt_leaks(pd.concat([table, leaked]))) == 1


def test_splits_follow_the_rules(built):
    table, _ = built
    assert set(data.split_sizes(table)) == set(data.SPLITS) and min(data.split_sizes(table).values()) > 0
    assert set(table.loc[table["split"] == "pandalm_majority", "source"]) == {"pandalm"}
    assert set(table.loc[table["source"] == "pandalm", "split"]) == {"pandalm_majority"}
    assert set(table.loc[table["split"] == "new_scenario", "scenario_group"]) <= {"Rewriting", "Summarization"}
    assert not set(table.loc[table["split"] == "train", "scenario_group"]) & {"Rewriting", "Summarization"}
    assert set(table.loc[table["split"] == "human_heldout", "augmentation"]) == {"original"}
    assert table.loc[table["split"] == "human_heldout", "human_label"].all()


def test_new_criteria_holds_properties_and_phrasings_never_trained(built):
    table, _ = built
    train_criteria = {text for criteria in table.loc[table["split"] == "train", "criteria"] for text in criteria}
    new = table[table["split"] == "new_criteria"]
    assert not {text for criteria in new["criteria"] for text in criteria} & train_criteria
    assert set(new["property"]) & {"numbers", "sentence_length"}
    assert not set(table.loc[table["split"] == "train", "property"].dropna()) & {"numbers", "sentence_length"}


def test_criteria_reversed_has_each_pair_under_opposite_criteria(built):
    table, _ = built
    reversed_rows = table[table["split"] == "criteria_reversed"]
    for (_, _), both in reversed_rows.groupby(["origin_idx", "property"]):
        assert sorted(both["property_direction"]) == ["less", "more"]
        assert both["chosen"].iloc[0] == both["rejected"].iloc[1]


def test_ties_do_not_train_as_human_labels(built, real_inputs):
    table, excluded = built
    tagged, _ = real_inputs
    ties = set(tagged.loc[tagged["human_winner"] == "tie", "idx"])
    tie_rows = table[table["origin_idx"].isin(ties)]
    assert not tie_rows.empty and tie_rows["human_label"].isna().all()
    assert set(tie_rows["augmentation"]) <= {"contrastive", "random", "noise_add", "noise_replace"}
    used = {row for idx in pd.concat([table["origin_idx"], excluded["origin_idx"]])
            for row in judge_pairs.source_row_ids(idx)}
    assert used == set(tagged["idx"])  # every source row is used or listed with a reason


def test_hh_pairs_train_with_a_harmlessness_criterion(built):
    table, _ = built
    hh = table[(table["source"] == "hh_rlhf_harmless") & (table["augmentation"] == "original")]
    assert not hh.empty
    assert all(criteria[0] in data.HARMLESS_CRITERIA for criteria in hh["criteria"])


def test_splits_are_deterministic_and_follow_the_seed(real_inputs, built):
    table, _ = built
    again, _, _ = data.build_training_pairs(*real_inputs, data.PairsConfig())
    pd.testing.assert_frame_equal(table, again)
    other, _, _ = data.build_training_pairs(*real_inputs, data.PairsConfig(seed=18))
    assert data.split_sizes(other) != data.split_sizes(table)


# ------------------------------------------------------------------------------------- augmentations

def test_contrastive_rows_flip_chosen_with_the_criteria(built):
    table, _ = built
    train = table[(table["split"] == "train") & table["augmentation"].isin(["contrastive", "reverse"])]
    reverse = train[train["augmentation"] == "reverse"].iloc[0]
    partner = train[(train["origin_idx"] == reverse["origin_idx"]) & (train["property"] == reverse["property"])
                    & (train["pair_id"] != reverse["pair_id"])].iloc[0]
    assert partner["chosen"] == reverse["rejected"] and partner["property_direction"] != reverse["property_direction"]
    assert reverse["human_label"] is not pd.NA and bool(reverse["human_label"]) is False  # the human loser wins
    assert data.direction_balance(table)["minority_share"].min() >= 0.4


def test_noise_rows_apply_the_papers_three_kinds(built):
    table, _ = built
    train = table[table["split"] == "train"]
    assert {"noise_add", "noise_remove", "noise_replace"} <= set(train["augmentation"])
    originals = train[train["augmentation"] == "original"].set_index("origin_idx")
    removed = train[(train["augmentation"] == "noise_remove") & train["property"].isna()]
    for _, row in removed.head(20).iterrows():
        source_criteria = originals.loc[row["origin_idx"], "criteria"]
        assert set(row["criteria"]) < set(source_criteria) and len(row["criteria"]) * 2 >= len(source_criteria)
    replaced = train[train["augmentation"] == "noise_replace"].iloc[0]
    source = train[(train["origin_idx"] == replaced["origin_idx"]) & (train["property"] == replaced["property"])
                   & (train["augmentation"] != "noise_replace")]
    assert replaced["chosen"] in set(source["rejected"])
    assert set(table.loc[table["split"] != "train", "augmentation"]) <= {"original", "contrastive", "reverse"}


def test_bad_config_is_one_clear_error():
    with pytest.raises(UslConfigError, match="not Auto-J groups"):
        data.PairsConfig(heldout_groups=("Poetry",)).validate({"Rewriting"})
    with pytest.raises(UslConfigError, match="between 0 and 1"):
        data.PairsConfig(noise_add_rate=1.5).validate({"Rewriting", "Summarization"})


def test_bad_rows_are_excluded_with_a_reason(real_inputs):
    tagged, criteria = real_inputs
    broken = tagged.head(3).copy()
    broken["idx"] = ["bad:1", "bad:2", "bad:3"]
    broken.loc[broken.index[0], "response_b"] = "  "
    broken.loc[broken.index[1], "response_b"] = broken.loc[broken.index[1], "response_a"]
    broken.loc[broken.index[2], "human_winner"] = "model_c"
    _, excluded, _ = data.build_training_pairs(broken, criteria, data.PairsConfig())
    assert excluded.set_index("origin_idx")["reason"].to_dict() == {
        "bad:1": "empty_response", "bad:2": "identical_responses", "bad:3": "bad_winner"}


# ------------------------------------------------------------------------------------- the asset

def metadata_value(result, key):
    return result.asset_materializations_for_node("crm_training_pairs")[0].metadata[key].value


def test_materialize_training_pairs(usl_env, real_inputs):
    from usl_assets.preferences.assets import scenario_criteria

    tagged, _ = real_inputs
    usl_env["warehouse"].replace_table("validated.tagged_preferences", tagged)
    result = dg.materialize([scenario_criteria, crm_training_pairs, *crm_data_defs.asset_checks],
                            resources=usl_env, selection=[scenario_criteria.key, crm_training_pairs.key])
    assert result.success
    checks = result.get_asset_check_evaluations()
    assert len(checks) == 5 and all(check.passed for check in checks)
    table = usl_env["warehouse"].read_table(PAIRS_TABLE)
    graded = usl_env["warehouse"].read_table("crm.graded_answers")
    assert len(graded) and metadata_value(result, "graded_answers") == len(graded)
    # One held-out model's answer slipped in: the blocking check says so.
    leaked = {**graded.iloc[0].to_dict(), "model": judge_pairs.heldout_model_names(table)[0]}
    usl_env["warehouse"].replace_table("crm.graded_answers", pd.concat([graded, pd.DataFrame([leaked])]))
    failed = graded_answers_out_of_sample(warehouse=usl_env["warehouse"])
    assert not failed.passed and failed.metadata["held_out_model"].value == 1
    assert list(table.columns) == list(data.COLUMNS)
    assert min(data.split_sizes(table).values()) > 0
    assert usl_env["warehouse"].read_table(EXCLUDED_TABLE)["reason"].notna().all()
    metadata = result.asset_materializations_for_node("crm_training_pairs")[0].metadata
    assert "rows per split x augmentation" in metadata and metadata["dagster/row_count"].value == len(table)


def test_materialize_without_upstream_is_one_clear_error(usl_env):
    with pytest.raises(UslConfigError, match="materialize tagged_preferences first"):
        dg.materialize([crm_training_pairs], resources=usl_env)

import dagster as dg
import pandas as pd
import pytest
import yaml

from usl_assets.crm import data, judge_pairs
from usl_assets.crm.data_assets import EXCLUDED_TABLE, PAIRS_TABLE, crm_training_pairs, graded_answers_out_of_sample
from usl_assets.crm.data_assets import defs as crm_data_defs
from usl_assets.crm.features import FEATURE_NAMES, response_counts, response_features
from usl_assets.crm.phrasings import CombinedCriterion
from usl_assets.crm.properties import (COMBINED, HELDOUT_FAMILIES, MEASURED_FEATURES, MEASURED_VIEW_FEATURES,
                                       PHRASINGS_FILE, PROPERTY_FEATURES, TRAIN_FAMILIES, heldout_phrasings,
                                       load_properties, measured_row, measured_view_row, property_value)
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


def test_new_rules_examples_steps_formality_direct_answer():
    rule = {name: data.PROPERTIES[name].more_side for name in ("examples", "steps", "formality", "direct_answer")}
    plain = "Paris is the capital of France and its largest city."
    examples = "Many fruits are sweet, for example mangoes. Others, such as lemons, are sour."
    assert rule["examples"](response_counts(plain), response_counts(examples)) == "b"
    assert rule["examples"](response_counts("Fruits such as mangoes are sweet."), response_counts(plain)) is None
    steps = "First, open the box. Then take out the part.\n1. Install it.\n2. Restart the machine."
    assert rule["steps"](response_counts(steps), response_counts(plain)) == "a"
    assert rule["steps"](response_counts("First, open the box. Then close it."), response_counts(plain)) is None
    casual = "Hey! It's gonna be awesome, don't worry."
    assert rule["formality"](response_counts(plain), response_counts(casual)) == "a"
    assert rule["formality"](response_counts(plain), response_counts("Paris! It is lovely.")) is None  # one marker
    preamble = "Sure! I'd be happy to help. Paris is the capital of France."
    assert rule["direct_answer"](response_counts(preamble), response_counts(plain)) == "b"
    assert rule["direct_answer"](response_counts("Yes, Paris is."), response_counts(plain)) is None


# a (less, more) pair of answers per property: property_value and the property's features rise from one to the other
MONOTONE = {
    "length": ("Short answer.", "A much longer answer that keeps going with many more words than the other one."),
    "structure": ("Just prose here.", "# Plan\n- one\n- two"),
    "code": ("Use a loop.", "Use a loop:\n```\nfor x in y:\n    print(x)\n```"),
    "numbers": ("It is quite old.", "It was built in 1889 and is 330 m tall."),
    "questions": ("Here it is.", "Here it is. Do you need more? Which city?"),
    "emphasis": ("Remember the key point.", "Remember the **key** point."),
    "paragraphs": ("One block of text.", "One block.\n\nAnother block."),
    "sentence_length": ("Go now. Eat. Sleep well.", "Go now, and when you arrive, eat something warm, then sleep."),
    "examples": ("Fruits vary in taste.", "Fruits vary in taste, for example lemons and mangoes."),
    "steps": ("Bake the cake.", "First, mix the flour. Then bake the cake."),
    "formality": ("Hey, it's gonna be awesome!", "It will be excellent."),
    "direct_answer": ("Great question! Paris is the capital.", "Paris is the capital."),
}


def test_property_value_and_property_features_rise_with_the_property():
    assert set(MONOTONE) == set(data.PROPERTIES) == set(PROPERTY_FEATURES)
    for name, (less, more) in MONOTONE.items():
        assert property_value(name, response_counts(less)) < property_value(name, response_counts(more)), name
        assert all(feature in FEATURE_NAMES or feature in (f"measured_{name}", f"measured_view_{name}")
                   for feature in PROPERTY_FEATURES[name])
        assert f"measured_{name}" in PROPERTY_FEATURES[name], name
        low, high = ({**response_features(text), **dict(zip(MEASURED_FEATURES, measured_row(response_counts(text)))),
                      **dict(zip(MEASURED_VIEW_FEATURES, measured_view_row(response_counts(text))))}
                     for text in (less, more))
        assert high[f"measured_{name}"] > low[f"measured_{name}"], name
        assert all(high[f] >= low[f] for f in PROPERTY_FEATURES[name]), name
        assert any(high[f] > low[f] for f in PROPERTY_FEATURES[name]), name
    assert property_value("length", response_counts(words(12))) == 12.0
    assert property_value("direct_answer", response_counts("")) == 0.0
    with pytest.raises(KeyError, match="unknown property"):
        property_value("colour", response_counts("x"))


def test_every_direction_has_its_phrasings_in_families():
    assert HELDOUT_FAMILIES == ("first_person", "long_form") and set(TRAIN_FAMILIES).isdisjoint(HELDOUT_FAMILIES)
    for prop in data.PROPERTIES.values():
        for direction in ("more", "less"):
            families = prop.family_phrasings(direction)
            assert set(HELDOUT_FAMILIES) <= set(families) and set(families) - set(HELDOUT_FAMILIES)
            assert all(len(texts) >= 4 and len(set(texts)) == len(texts) for texts in families.values())
            assert prop.phrasings(direction) == tuple(t for texts in families.values() for t in texts)


def test_phrasing_pools_split_each_direction_without_overlap():
    for prop in data.PROPERTIES.values():
        for direction in ("more", "less"):
            families = prop.family_phrasings(direction)
            pools = {pool: set(prop.phrasings(direction, pool)) for pool in ("train", "new_criteria", "paraphrase")}
            assert pools["new_criteria"] == {families[f][-1] for f in families if f in TRAIN_FAMILIES}
            assert pools["paraphrase"] == {t for f in HELDOUT_FAMILIES for t in families[f]}
            assert pools["train"] == {t for f in TRAIN_FAMILIES if f in families for t in families[f][:-1]}
            assert not (pools["train"] & pools["new_criteria"] or pools["train"] & pools["paraphrase"]
                        or pools["new_criteria"] & pools["paraphrase"])
            assert set().union(*pools.values()) == set(prop.phrasings(direction, "any"))
    with pytest.raises(ValueError, match="unknown phrasing pool"):
        data.PROPERTIES["length"].phrasings("more", "heldout")


def test_heldout_phrasings_list_every_heldout_family_phrasing():
    found = heldout_phrasings()
    assert {family for _, _, family, _ in found} == set(HELDOUT_FAMILIES)
    for name, prop in data.PROPERTIES.items():
        for direction in ("more", "less"):
            listed = [text for p, d, _, text in found if (p, d) == (name, direction)]
            assert listed and set(listed) == set(prop.phrasings(direction, "paraphrase"))
    with_combined = heldout_phrasings(combined=True)
    extra = [row for row in with_combined if row[2] == "combined"]
    assert extra and len(with_combined) == len(found) + len(extra)
    assert {text for _, _, _, text in extra} == {t for entry in COMBINED if entry.heldout for t in entry.texts}


def test_combined_criteria_win_only_when_every_named_direction_agrees():
    short_plain = CombinedCriterion((("length", "less"), ("structure", "less")), ("Short, no bullets.",))
    assert short_plain.name == "length+structure" and short_plain.direction == "less+less"
    assert short_plain.winner({"length": "a", "structure": "a"}) == "b"  # a: longer and listed; b wins both
    assert short_plain.winner({"length": "a", "structure": "b"}) is None  # the directions disagree
    assert short_plain.winner({"length": "a"}) is None  # structure does not clearly differ
    assert {entry.heldout for entry in COMBINED} == {True, False}
    assert all(len(entry.directions) == 2 for entry in COMBINED)


def test_phrasings_come_from_the_yaml_and_a_broken_file_fails_loudly(tmp_path):
    assert load_properties(PHRASINGS_FILE) == data.PROPERTIES
    assert data.PROPERTIES["length"].less[0] == "The user prefers brief answers."
    good = yaml.safe_load(PHRASINGS_FILE.read_text(encoding="utf-8"))

    def fails(change, match: str) -> None:
        broken = yaml.safe_load(yaml.safe_dump(good))
        change(broken)
        path = tmp_path / "broken.yaml"
        path.write_text(yaml.safe_dump(broken), encoding="utf-8")
        with pytest.raises(ValueError, match=match):
            load_properties(path)

    fails(lambda raw: raw["properties"].update(kode=raw["properties"].pop("code")), "differ from the measured ones")
    fails(lambda raw: raw["properties"]["code"]["less"].pop("long_form"),
          r"code.less lacks the held-out families \['long_form'\]")
    fails(lambda raw: raw.update(heldout_families=["first_person", "anecdote"]), "not declared under `families`")
    fails(lambda raw: raw.pop("heldout_families"), "heldout_families must be a non-empty list")
    fails(lambda raw: raw["properties"]["length"]["more"].update(slang=["a", "b", "c", "d"]), "undeclared families")
    fails(lambda raw: raw["properties"]["length"]["more"]["request"].pop(), "length.more.request needs at least 4")
    fails(lambda raw: raw["properties"]["steps"]["less"].update(description=[]), "steps.less.description needs")
    fails(lambda raw: raw["properties"]["emphasis"]["more"]["request"].append("Keep it short."), "appears twice")
    fails(lambda raw: raw["combined"].append({"properties": {"length": "less"}, "texts": ["Short."]}),
          "at least two properties")
    fails(lambda raw: raw["combined"].append({"properties": {"length": "fewer", "code": "more"}, "texts": ["X."]}),
          "direction more/less")


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
    # judge_heldout_models is held out by model (its prompts also train); criteria_paraphrase re-asks the pairs of
    # criteria_reversed / new_criteria under held-out phrasings (test_criteria_paraphrase_... checks its prompts);
    # gaming_pairs and gaming_wishes re-use test pairs too (test_crm_gaming)
    by_prompt = table[~table["split"].isin(["judge_heldout_models", "criteria_paraphrase", "gaming_pairs",
                                            "gaming_wishes"])]
    keys = by_prompt["prompt"].map(data.prompt_key)
    assert (by_prompt.assign(key=keys).groupby("key")["split"].nunique() == 1).all()


def test_judge_pairs_hold_out_by_model_and_never_train_on_the_reference(built):
    table, excluded = built
    judge = table[(table["source"] == "alpaca_eval_judge") & (table["label_kind"] != "gaming")]
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
    leaks = data.prompt_leaks(pd.concat([table, leaked]))
    assert set(leaks["prompt"]) == set(leaked["prompt"]) and "human_heldout" in set(leaks["split"])


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


def test_no_heldout_family_phrasing_ever_reaches_a_train_row(built):
    table, _ = built
    train_criteria = {text for criteria in table.loc[table["split"] == "train", "criteria"] for text in criteria}
    heldout = {text for _, _, _, text in heldout_phrasings(combined=True)}
    assert not train_criteria & heldout
    trained = {text for prop in data.PROPERTIES.values() for direction in ("more", "less")
               for text in prop.phrasings(direction, "train")}
    assert train_criteria & trained  # the check above looks at the rows that carry phrasings


def test_criteria_paraphrase_holds_heldout_phrasings_of_test_prompts(built):
    table, _ = built
    para = table[table["split"] == "criteria_paraphrase"]
    assert len(para) > 0 and set(para["augmentation"]) <= {"contrastive", "reverse"}
    heldout = {text for _, _, _, text in heldout_phrasings(combined=True)}
    assert {text for criteria in para["criteria"] for text in criteria} <= heldout
    families = {text: family for _, _, family, text in heldout_phrasings()}
    used = {families[criteria[0]] for criteria in para["criteria"] if criteria[0] in families}
    assert used == set(HELDOUT_FAMILIES)
    sources = set(table.loc[table["split"].isin(["criteria_reversed", "new_criteria"]), "prompt"].map(data.prompt_key))
    assert set(para["prompt"].map(data.prompt_key)) <= sources
    assert set(para["property"]) & {"length", "numbers"} and para["property"].str.contains("+", regex=False).any()
    assert "criteria_paraphrase" not in set(data.prompt_leaks(table)["split"])


def test_every_property_row_follows_its_criteria(built):
    """Single-property and combined rows, in every split: the chosen side has more of each property named 'more'
    and less of each named 'less' (by the property's own rule). A gaming row under a wish is the other way round:
    the trick's answer meets the wish better, and the real answer wins all the same (crm/gaming_pairs.py)."""
    table, _ = built
    rows = table[table["property"].notna()]
    assert rows["property"].str.contains("+", regex=False).any()  # combined criteria train and test
    assert len(rows[(rows["split"] == "train") & rows["property"].str.contains("+", regex=False)]) > 0
    assert (rows["label_kind"] == "gaming").any()
    for row in rows.sample(min(len(rows), 3000), random_state=0).itertuples():
        chosen, rejected = response_counts(row.chosen), response_counts(row.rejected)
        more, less = ("b", "a") if row.label_kind == "gaming" else ("a", "b")
        for prop, direction in zip(row.property.split("+"), row.property_direction.split("+")):
            assert data.PROPERTIES[prop].more_side(chosen, rejected) == (more if direction == "more" else less)


def test_train_property_rows_carry_two_phrasings_per_direction(built):
    table, _ = built
    rows = table[(table["split"] == "train") & table["augmentation"].isin(["contrastive", "reverse"])
                 & table["property"].isin(list(data.PROPERTIES))]
    per_direction = rows.groupby(["label_kind", "origin_idx", "property", "property_direction"]).size()
    assert (per_direction.loc["human"] == 2).all()  # two distinct train phrasings: more of them reach training
    assert (per_direction.loc["ai_judge"] == 1).all()  # the judge's many pairs cover them with one
    assert rows.groupby(["origin_idx", "property", "property_direction"])["criteria"].agg(
        lambda texts: len({t[0] for t in texts}) == len(texts)).all()


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
                    & (train["property_direction"] != reverse["property_direction"])].iloc[0]
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
    tests = table[(table["split"] != "train") & ~table["augmentation"].str.startswith("gaming_")]
    assert set(tests["augmentation"]) <= {"original", "contrastive", "reverse"}


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

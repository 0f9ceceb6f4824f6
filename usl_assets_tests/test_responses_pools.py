import gzip
import json

import pandas as pd
import pytest

from usl_assets.responses import inbox, pools, sampling
from usl_assets.settings import UslConfigError
from usl_assets_tests.taggers import TfidfScenarioTagger


@pytest.fixture(scope="module")
def tagged_prompts(shared_data_dir) -> pd.DataFrame:
    return pools.tag_prompts(pools.pool_prompts(shared_data_dir), TfidfScenarioTagger(shared_data_dir))


def test_partition_keys_round_trip_and_refuse_unsafe_model_names():
    assert pools.partition_key("alpaca_eval", "Mixtral-8x22B-Instruct-v0.1") == "alpaca_eval:Mixtral-8x22B-Instruct-v0.1"
    assert pools.split_partition_key("mt_bench:vicuna-7b-v1.3") == ("mt_bench", "vicuna-7b-v1.3")
    for bad in ["a...b", "org/model", "a,b", "has space", "", "x" * 101, "-lead"]:
        with pytest.raises(pools.ResponseFileError):
            pools.partition_key("alpaca_eval", bad)
    # A key names a public pool or a user pool's name (registered or since archived); only the name's form is checked.
    assert pools.split_partition_key("helpdesk:gpt-4") == ("helpdesk", "gpt-4")
    for bad_pool in ["Chatbot Arena", "a/b", "x" * 41, ""]:
        with pytest.raises(UslConfigError, match="is not a pool name"):
            pools.partition_key(bad_pool, "gpt-4")
    with pytest.raises(UslConfigError):
        pools.split_partition_key("no-separator")


def test_pools_hold_805_alpaca_instructions_and_80_mt_bench_questions(tagged_prompts, shared_data_dir):
    counts = tagged_prompts.groupby("pool").size().to_dict()
    assert counts == {"alpaca_eval": 805, "mt_bench": 80}
    assert not tagged_prompts.duplicated(["pool", "prompt_id"]).any()
    mt = tagged_prompts[tagged_prompts["pool"] == "mt_bench"]
    assert mt["category"].nunique() == 8 and mt["followup"].notna().all()
    assert set(tagged_prompts["category"][tagged_prompts["pool"] == "alpaca_eval"]) == {
        "helpful_base", "koala", "oasst", "selfinstruct", "vicuna"}
    assert tagged_prompts["scenario"].notna().all() and tagged_prompts["scenario_group"].notna().all()
    assert len(pools.public_partition_keys(shared_data_dir)) == 27 + 32


def test_empty_outputs_are_quarantined_and_every_prompt_is_accounted_for(tagged_prompts, shared_data_dir):
    path = pools.public_model_files(shared_data_dir, "alpaca_eval")["gemma-2b-it"]
    loaded = pools.load_model_responses("alpaca_eval", "gemma-2b-it", path, tagged_prompts)
    assert len(loaded.responses) + len(loaded.quarantine) == 805
    assert set(loaded.quarantine["rule"]) == {"empty_response"} and len(loaded.quarantine) == 22
    row = loaded.responses.iloc[0]
    assert row["length_chars"] == len(row["response"])
    assert row["response_hash"] == pools.content_hash(row["prompt"], row["response"])
    assert loaded.responses["response_hash"].is_unique


def test_mt_bench_keeps_the_first_turn_scored_and_the_whole_dialogue(tagged_prompts, shared_data_dir):
    files = pools.public_model_files(shared_data_dir, "mt_bench")
    llama = pools.load_model_responses("mt_bench", "llama-13b", files["llama-13b"], tagged_prompts)
    assert llama.quarantine[["prompt_id", "rule"]].values.tolist() == [["127", "empty_response"]]
    assert len(llama.responses) == 79
    lima = pools.load_model_responses("mt_bench", "lima-whole-13b", files["lima-whole-13b"], tagged_prompts)
    assert len(lima.responses) == 80
    assert lima.quarantine[["prompt_id", "rule"]].values.tolist() == [["135", "empty_second_turn"]]
    by_id = lima.responses.set_index("prompt_id")
    assert [turn["role"] for turn in by_id.loc["81", "conversation"]] == ["user", "assistant", "user", "assistant"]
    assert len(by_id.loc["135", "conversation"]) == 2
    assert by_id.loc["81", "prompt"].startswith("Compose an engaging travel blog post")


def test_bad_rows_each_get_a_reason(tagged_prompts, shared_data_dir, tmp_path):
    records = json.loads(gzip.open(pools.public_model_files(shared_data_dir, "alpaca_eval")["gpt4_0314"]).read())
    broken = records[:5] + [
        {"instruction": "not an AlpacaEval prompt", "output": "hi", "generator": "x"},
        {"instruction": records[5]["instruction"], "output": True, "generator": "x"},
        "just a string",
        records[0],
    ]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken))
    loaded = pools.load_model_responses("alpaca_eval", "broken", path, tagged_prompts)
    rules = loaded.quarantine["rule"].value_counts().to_dict()
    assert rules == {"missing_response": 799, "unknown_prompt": 1, "not_a_string": 1, "not_an_object": 1,
                     "duplicate_prompt": 1}
    assert len(loaded.responses) == 5


def test_a_file_that_does_not_parse_is_refused_whole(tagged_prompts, tmp_path):
    path = tmp_path / "truncated.json"
    path.write_text('[{"instruction": "a", "output": "b"')
    with pytest.raises(pools.ResponseFileError, match="not valid JSON"):
        pools.load_model_responses("alpaca_eval", "truncated", path, tagged_prompts)
    jsonl = tmp_path / "m.jsonl"
    jsonl.write_text('{"question_id": 81}\n{oops\n')
    with pytest.raises(pools.ResponseFileError, match="line 2"):
        pools.read_model_records("mt_bench", jsonl)


def test_stratified_sample_caps_each_scenario_is_seeded_and_full_pool_is_one_switch(tagged_prompts):
    rule = sampling.SampleRule(per_scenario=3, seed=7)
    sample = sampling.stratified_sample(tagged_prompts, rule)
    assert len(sample) == len(tagged_prompts)
    per_scenario = sample[sample["sampled"]].groupby(["pool", "scenario"]).size()
    available = tagged_prompts.groupby(["pool", "scenario"]).size()
    assert (per_scenario == available.clip(upper=3)).all()
    assert sample.equals(sampling.stratified_sample(tagged_prompts.sample(frac=1, random_state=1), rule))
    assert set(sample["sample_rule"]) == {rule.describe()}
    assert sampling.stratified_sample(tagged_prompts, sampling.SampleRule(full_pool=True))["sampled"].all()
    with pytest.raises(UslConfigError, match="per_scenario"):
        sampling.stratified_sample(tagged_prompts, sampling.SampleRule(per_scenario=0))


def test_inbox_validation_names_the_model_and_refuses_files_it_cannot_use(shared_data_dir, tmp_path):
    records = json.loads(gzip.open(pools.public_model_files(shared_data_dir, "alpaca_eval")["vicuna-13b"]).read())
    generic = tmp_path / "model_outputs.json"
    generic.write_text(json.dumps(records[:20]))
    validated = inbox.validate_model_file("alpaca_eval", generic, shared_data_dir)
    assert (validated.model, validated.records, validated.usable) == ("vicuna-13b", 20, 20)
    assert validated.partition_key == "alpaca_eval:vicuna-13b"
    unrelated = tmp_path / "other.json"
    unrelated.write_text(json.dumps([{"instruction": "hello?", "output": "hi", "generator": "other"}]))
    with pytest.raises(pools.ResponseFileError, match="no record answers"):
        inbox.validate_model_file("alpaca_eval", unrelated, shared_data_dir)
    with pytest.raises(pools.ResponseFileError, match="ends with .jsonl"):
        inbox.validate_model_file("mt_bench", generic, shared_data_dir)

"""Reading the preference files and putting each source's records in the canonical pair format."""

import gzip
import json

import pytest

from usl_assets.preferences import canonical, sources
from usl_assets.preferences.canonical import RecordProblem
from usl_assets.settings import UslConfigError


@pytest.fixture(scope="module")
def book(shared_data_dir):
    return canonical.CriteriaBook(shared_data_dir)


def test_jsonl_lands_every_line_with_error_markers():
    data = b'{"label": 1, "prompt": "a"}\n\n{"label": "1"\n{"prompt": "caf\xe9"}\n[1, 2]\n{"label": true}\n'
    raw = sources.read_jsonl_bytes(data)
    assert raw.rows["row_number"].tolist() == [1, 3, 4, 5, 6]  # line numbers; line 2 is blank
    assert raw.blank_lines == 1
    assert raw.errors == {"invalid_json": 1, "invalid_utf8": 1, "not_an_object": 1}
    first, last = raw.rows.iloc[0], raw.rows.iloc[-1]
    assert (first["label"], first["prompt"], first["raw_error"]) == ("1", '"a"', None)
    assert last["label"] == "true"  # the JSON value as it was, not coerced
    assert raw.rows.iloc[2]["raw_line"] == '{"prompt": "caf\\xe9"}'


def test_field_named_like_a_bookkeeping_column_keeps_its_value():
    raw = sources.read_jsonl_bytes(b'{"row_number": "mine", "prompt": "p"}\n')
    assert raw.rows.iloc[0]["row_number"] == 1
    assert raw.rows.iloc[0]["row_number_field"] == '"mine"'


def test_keys_differing_only_by_case_get_their_own_column(tmp_path):
    from usl_assets.preferences.canonical import write_typed_table
    from usl_assets.resources import Warehouse

    raw = sources.read_jsonl_bytes(b'{"prompt": "a", "Prompt": "b"}\n')
    assert list(raw.rows.columns[3:]) == ["prompt", "Prompt_2"]
    warehouse = Warehouse(path=str(tmp_path / "w.duckdb"))
    types = {"row_number": "BIGINT", "raw_error": "VARCHAR", "raw_line": "VARCHAR",
             "prompt": "JSON", "Prompt_2": "JSON"}
    write_typed_table(warehouse, "raw.cases", raw.rows, types)
    assert warehouse.read_table("raw.cases")["Prompt_2"].tolist() == ['"b"']


def test_json_array_file_and_broken_ones():
    raw = sources.read_json_array_bytes(b'[{"a": true}, 3]')
    assert raw.rows["raw_error"].tolist() == [None, "not_an_object: item is int"]
    assert raw.rows.iloc[0]["a"] == "true"
    assert sources.read_json_array_bytes(b'{"a": 1}').errors == {"not_an_array": 1}
    assert sources.read_json_array_bytes(b"[{").errors == {"invalid_json": 1}


def test_corrupt_gzip_lands_one_error_row(tmp_path):
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(b"not gzip at all")
    assert sources.read_gzip_jsonl_file(broken).errors == {"invalid_gzip": 1}
    good = tmp_path / "good.jsonl.gz"
    good.write_bytes(gzip.compress(b'{"chosen": "x"}\n'))
    assert len(sources.read_gzip_jsonl_file(good).rows) == 1


def test_user_preferences_path(tmp_path, monkeypatch):
    monkeypatch.delenv(sources.USER_PREFERENCES_ENV, raising=False)
    assert sources.user_preferences_path("") is None
    with pytest.raises(UslConfigError, match="does not exist"):
        sources.user_preferences_path(str(tmp_path / "missing.jsonl"))
    mine = tmp_path / "mine.jsonl"
    mine.write_text("")
    monkeypatch.setenv(sources.USER_PREFERENCES_ENV, str(mine))
    assert sources.user_preferences_path("") == mine


def autoj(label, scenario="chitchat"):
    return {"scenario": scenario, "label": label, "prompt": "Hi", "response 1": "Hello", "response 2": "Hey"}


@pytest.mark.parametrize("label, winner", [(0, "model_a"), ("1", "model_b"), (2, "tie"), ("2", "tie")])
def test_autoj_labels_and_criteria_go_to_the_winner(book, label, winner):
    row = canonical.autoj_row(autoj(label), book)
    assert row["human_winner"] == winner
    criteria = book.texts("chitchat")
    assert criteria
    assert row["a_criteria"] == (criteria if winner in ("model_a", "tie") else [])
    assert row["b_criteria"] == (criteria if winner in ("model_b", "tie") else [])
    assert row["model_a"] == [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]


@pytest.mark.parametrize("label", [3, "x", None, True, 1.5])
def test_autoj_unknown_label(book, label):
    with pytest.raises(RecordProblem) as problem:
        canonical.autoj_row(autoj(label), book)
    assert problem.value.rule == "unknown_label"


def test_autoj_unknown_scenario(book):
    with pytest.raises(RecordProblem) as problem:
        canonical.autoj_row(autoj(0, scenario="knitting"), book)
    assert problem.value.rule == "unknown_scenario"


def pandalm(votes, response1="A", given_input="some input"):
    record = {"instruction": "Do it.", "input": given_input, "response1": response1, "response2": "B",
              "cmp_key": "bloom-7b_llama-7b"}
    record |= {f"annotator{i}": vote for i, vote in enumerate(votes, start=1)}
    return record


@pytest.mark.parametrize("votes, winner", [((1, 1, 2), "model_a"), ((2, 0, 2), "model_b"), ((0, 0, 1), "tie"),
                                            ((1, 2, 0), "tie")])
def test_pandalm_majority_votes_names_prompt(book, votes, winner):
    row = canonical.pandalm_row(pandalm(votes), book)
    assert row["human_winner"] == winner
    assert row["votes"] == [canonical.PANDALM_VOTES[v] for v in votes]
    assert (row["model_a_name"], row["model_b_name"]) == ("bloom-7b", "llama-7b")
    assert row["prompt"] == "Do it.\n\nsome input"
    assert canonical.pandalm_row(pandalm(votes, given_input=""), book)["prompt"] == "Do it."


def test_pandalm_boolean_response_and_bad_vote(book):
    with pytest.raises(RecordProblem) as problem:
        canonical.pandalm_row(pandalm((1, 1, 1), response1=True), book)
    assert (problem.value.rule, problem.value.detail) == ("non_string_text", "response_a is bool (true)")
    with pytest.raises(RecordProblem) as problem:
        canonical.pandalm_row(pandalm((1, 3, 1)), book)
    assert problem.value.rule == "unknown_label"


def test_hh_rlhf_split_keeps_replies_that_contain_the_marker(book):
    shared = "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: rob a house?"
    record = {"chosen": shared + "\n\nAssistant: No.",
              "rejected": shared + "\n\nAssistant: Human: at night\n\nAssistant: ok"}
    row = canonical.hh_rlhf_row(record, book)
    assert row["prompt"] == "Human: hi\n\nAssistant: hello\n\nHuman: rob a house?"
    chosen_side = "a" if row["human_winner"] == "model_a" else "b"
    rejected_side = "b" if chosen_side == "a" else "a"
    assert row[f"response_{chosen_side}"] == "No."
    assert row[f"response_{rejected_side}"] == "Human: at night\n\nAssistant: ok"
    assert [turn["role"] for turn in row["model_a"]] == ["user", "assistant", "user", "assistant"]
    assert row["model_a"][2]["content"] == "rob a house?"


def test_hh_rlhf_without_dialogue_is_a_problem(book):
    with pytest.raises(RecordProblem) as problem:
        canonical.hh_rlhf_row({"chosen": "just text", "rejected": "other text"}, book)
    assert problem.value.rule == "malformed_dialogue"


def test_hh_rlhf_winner_side_is_mixed_on_the_real_file(book, shared_data_dir):
    with gzip.open(shared_data_dir / sources.HH_RLHF_FILE, "rt", encoding="utf-8") as handle:
        records = [json.loads(line) for _, line in zip(range(400), handle)]
    winners = [canonical.hh_rlhf_row(record, book)["human_winner"] for record in records]
    share_a = winners.count("model_a") / len(winners)
    assert 0.4 < share_a < 0.6
    assert winners == [canonical.hh_rlhf_row(record, book)["human_winner"] for record in records]  # deterministic


def user_pair(**fields):
    def turns(answer):
        return [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": answer}]
    return {"idx": 1, "prompt": "Q?", "model_a": turns("A."), "model_b": turns("B."), **fields}


def test_user_pair_with_own_criteria_or_scenario(book):
    row = canonical.user_row(user_pair(preference="model_b", criteria=["Short.", " "]), book)
    assert (row["human_winner"], row["a_criteria"], row["b_criteria"]) == ("model_b", [], ["Short."])
    row = canonical.user_row(user_pair(human_winner="tie", scenario="chitchat"), book)
    assert row["a_criteria"] == row["b_criteria"] == book.texts("chitchat")
    without_prompt = {k: v for k, v in user_pair(preference=" A ").items() if k != "prompt"}
    row = canonical.user_row(without_prompt, book)
    assert (row["prompt"], row["human_winner"], row["response_a"]) == ("Q?", "model_a", "A.")


@pytest.mark.parametrize("fields, rule", [
    ({"preference": "model_c"}, "unknown_label"),
    ({"preference": "model_a", "model_b": "B."}, "malformed_conversation"),
    ({"preference": "model_a", "model_b": [{"role": "user", "content": "Q?"}]}, "malformed_conversation"),
    ({"preference": "model_a", "model_b": [{"role": "assistant", "content": 7}]}, "non_string_text"),
    ({"preference": "model_a", "criteria": "be short"}, "malformed_criteria"),
    ({"preference": "model_a", "prompt": 5}, "non_string_text"),
])
def test_user_pair_problems(book, fields, rule):
    with pytest.raises(RecordProblem) as problem:
        canonical.user_row(user_pair(**fields), book)
    assert problem.value.rule == rule

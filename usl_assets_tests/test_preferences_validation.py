"""The validation rules, the pandera schema and the Great Expectations suite, on small real and broken slices."""

import json

import pandas as pd
import pytest

from usl_assets.preferences import canonical, sources, validation


@pytest.fixture(scope="module")
def book(shared_data_dir):
    return canonical.CriteriaBook(shared_data_dir)


@pytest.fixture(scope="module")
def autoj_valid(shared_data_dir, book):
    """The first 60 real Auto-J pairs, converted and validated."""
    lines = (shared_data_dir / sources.AUTOJ_FILE).read_bytes().split(b"\n")[:60]
    raw = sources.read_jsonl_bytes(b"\n".join(lines))
    split = validation.split_preferences(canonical.canonical_rows("autoj", raw.rows, book))
    return canonical.to_python_lists(split.valid)


def staged(source, records, book):
    raw = sources.read_jsonl_bytes("\n".join(json.dumps(r) for r in records).encode())
    return canonical.canonical_rows(source, raw.rows, book)


def autoj(prompt="Hi", first="Hello", second="Hey", label=0, scenario="chitchat"):
    record = {"label": label, "prompt": prompt, "response 1": first, "response 2": second}
    return record if scenario is None else record | {"scenario": scenario}


def test_each_rule_quarantines_with_its_name(book):
    records = [
        autoj(),                                    # 1 valid
        autoj(first="  "),                          # 2 empty_text
        autoj(second="x" * (validation.MAX_TEXT_CHARS + 1)),  # 3 text_too_long
        autoj(first="Same", second="Same "),        # 4 identical_responses
        autoj(prompt="Other", scenario=None),       # 5 missing_scenario
        autoj(first="Hey", second="Hello", label=1),  # 6 duplicate of 1 with the sides swapped
        autoj(label=7),                             # 7 unknown_label
        autoj(prompt=["not", "text"]),              # 8 non_string_text
    ]
    split = validation.split_preferences(staged("autoj", records, book))
    assert split.valid["idx"].tolist() == ["autoj:1"]
    rules = dict(zip(split.quarantine["idx"], split.quarantine["rule"]))
    assert rules == {"autoj:2": "empty_text", "autoj:3": "text_too_long", "autoj:4": "identical_responses",
                     "autoj:5": "missing_scenario", "autoj:6": "duplicate_pair", "autoj:7": "unknown_label",
                     "autoj:8": "non_string_text"}
    duplicate = split.quarantine.set_index("idx").loc["autoj:6"]
    assert duplicate["detail"] == "same prompt and responses as autoj:1 (kept)"
    assert json.loads(duplicate["record"])["label"] == 1
    assert list(split.valid.columns) == list(canonical.CANONICAL_TYPES)


def test_duplicates_keep_the_first_across_sources(book):
    frame = pd.concat([staged("user", [], book), staged("autoj", [autoj()], book)], ignore_index=True)
    user = staged("user", [{"prompt": "Hi", "human_winner": "model_b",
                            "model_a": [{"role": "assistant", "content": "Hey"}],
                            "model_b": [{"role": "assistant", "content": "Hello"}]}], book)
    split = validation.split_preferences(pd.concat([user, frame], ignore_index=True))
    assert split.valid["idx"].tolist() == ["autoj:1"]  # autoj comes before user whatever the frame order
    assert split.quarantine["rule"].tolist() == ["duplicate_pair"]


def test_counts_and_markdown(book):
    split = validation.split_preferences(staged("autoj", [autoj(), autoj(), autoj(label=9)], book))
    counts = validation.quarantine_counts(split.quarantine)
    assert counts.to_dict("records") == [{"source": "autoj", "rule": "duplicate_pair", "rows": 1},
                                         {"source": "autoj", "rule": "unknown_label", "rows": 1}]
    table = validation.markdown_table(counts)
    assert table.splitlines()[0] == "| source | rule | rows |"
    assert "| autoj | unknown_label | 1 |" in table
    balance = validation.balance_by_source({"autoj": 3}, split.valid, split.quarantine)
    assert balance.set_index("source").loc["autoj"].to_dict() == {"raw": 3, "valid": 1, "quarantined": 2,
                                                                   "balanced": True}


def test_contracts_pass_on_real_rows(autoj_valid):
    assert len(autoj_valid) > 50
    assert validation.pandera_failures(autoj_valid).empty
    assert validation.gx_results(autoj_valid)["success"].all()


def tampered(frame):
    """Two rows that break the contract: a duplicate pair (and idx) and a blank prompt with an unknown winner."""
    broken = frame.copy()
    broken.loc[1, ["idx", "prompt", "response_a", "response_b"]] = broken.loc[0, ["idx", "prompt", "response_a",
                                                                                 "response_b"]].tolist()
    broken.loc[2, ["prompt", "human_winner"]] = ["  ", "model_c"]
    return broken


def test_pandera_schema_catches_broken_rows(autoj_valid):
    failures = validation.pandera_failures(tampered(autoj_valid))
    failed_checks = set(failures["check"].astype(str))
    assert {"field_uniqueness", "not_blank", "no_duplicate_pair"} <= failed_checks
    assert any("isin" in check for check in failed_checks)


def test_gx_suite_catches_broken_rows(autoj_valid):
    results = validation.gx_results(tampered(autoj_valid)).set_index(["expectation", "column"])
    assert not results.loc[("expect_column_values_to_be_unique", "idx"), "success"]
    assert results.loc[("expect_column_values_to_be_in_set", "human_winner"), "unexpected_count"] == 1
    assert not results.loc[("expect_compound_columns_to_be_unique", "prompt,response_low,response_high"), "success"]


def test_criteria_problems():
    criteria = pd.DataFrame({"scenario": ["chitchat", "chitchat"], "criterion": ["tone", "length"],
                             "content": ["Friendly.", " "], "weight": [3, 9]})
    assert validation.criteria_problems(criteria, {"chitchat", "planning"}) == [
        "planning: no criteria", "chitchat/length: empty content", "chitchat/length: weight 9 outside 1-5"]

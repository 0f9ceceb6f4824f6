"""Split canonical preferences into valid rows and quarantined ones, and the two data contracts on the result.

Each quarantined row names the first rule it broke (rules are tried in RULE_ORDER) and a detail a person can act
on; `record` is the raw row as JSON so nothing is lost. The pandera schema and the Great Expectations suite
state the same contract independently and run as blocking asset checks on validated.preferences.
"""

from dataclasses import dataclass

import great_expectations as gx
from great_expectations.data_context.types.base import ProgressBarsConfig
import pandas as pd
import pandera.pandas as pa

from usl_assets.markdown import markdown_table  # noqa: F401 (the assets call validation.markdown_table)
from usl_assets.preferences.canonical import AI_JUDGE_SOURCES, CANONICAL_TYPES, LABEL_KINDS, SOURCES, WINNERS

MAX_TEXT_CHARS = 20_000  # per prompt and per response; the longest real text (an Auto-J prompt) has 15,822
SOURCES_WITH_SCENARIO = ("autoj",)
TEXT_COLUMNS = ("prompt", "response_a", "response_b")
RULE_ORDER = (
    "invalid_utf8", "invalid_json", "too_deeply_nested", "invalid_gzip", "not_an_array", "not_an_object", "non_string_text",
    "unknown_label", "unknown_scenario", "malformed_conversation", "malformed_criteria", "malformed_dialogue",
    "empty_text", "text_too_long", "identical_responses", "missing_scenario", "duplicate_pair",
)
QUARANTINE_COLUMNS = ["idx", "source", "rule", "detail", "record"]


@dataclass
class Split:
    valid: pd.DataFrame  # the contract's columns only
    quarantine: pd.DataFrame  # QUARANTINE_COLUMNS


# ---------------------------------------------------------------------------------------------- row rules
def content_problem(row: dict) -> tuple[str, str] | None:
    """The first content rule a converted row breaks, as (rule, detail), or None."""
    for column in TEXT_COLUMNS:
        if not row[column].strip():
            return "empty_text", f"{column} is empty"
    for column in TEXT_COLUMNS:
        if len(row[column]) > MAX_TEXT_CHARS:
            return "text_too_long", f"{column} has {len(row[column]):,} characters (limit {MAX_TEXT_CHARS:,})"
    if row["response_a"].strip() == row["response_b"].strip():
        return "identical_responses", "response_a and response_b are the same text"
    if row["source"] in SOURCES_WITH_SCENARIO and (row["scenario"] is None or pd.isna(row["scenario"])):
        return "missing_scenario", f"{row['source']} rows carry a scenario; this one has none"
    return None


def pair_key(row: dict) -> tuple[str, str, str]:
    """Same prompt and the same two responses, whichever side each is on."""
    first, second = sorted((row["response_a"].strip(), row["response_b"].strip()))
    return row["prompt"].strip(), first, second


def split_preferences(canonical: pd.DataFrame) -> Split:
    """Valid rows (contract columns) and quarantined rows (idx, source, rule, detail, record)."""
    ordered = canonical.assign(_order=canonical["source"].map(SOURCES.index)).sort_values(["_order", "row_number"])
    valid_rows, quarantined, first_seen = [], [], {}
    for row in ordered.to_dict("records"):
        converted = not row["conversion_rule"]
        problem = content_problem(row) if converted else (row["conversion_rule"], row["conversion_detail"])
        if problem is None:
            key = pair_key(row)
            if key in first_seen:
                problem = ("duplicate_pair", f"same prompt and responses as {first_seen[key]} (kept)")
            else:
                first_seen[key] = row["idx"]
        if problem is None:
            valid_rows.append(row)
        else:
            quarantined.append({"idx": row["idx"], "source": row["source"], "rule": problem[0],
                                "detail": problem[1], "record": row["record"]})
    valid = pd.DataFrame.from_records(valid_rows, columns=list(canonical.columns))[list(CANONICAL_TYPES)]
    return Split(valid=valid.reset_index(drop=True),
                 quarantine=pd.DataFrame.from_records(quarantined, columns=QUARANTINE_COLUMNS))


# ---------------------------------------------------------------------------------------------- summaries
def quarantine_counts(quarantine: pd.DataFrame) -> pd.DataFrame:
    """Quarantined rows per source and rule, most frequent first."""
    if quarantine.empty:
        return pd.DataFrame(columns=["source", "rule", "rows"])
    counts = quarantine.groupby(["source", "rule"]).size().rename("rows").reset_index()
    return counts.sort_values(["source", "rows", "rule"], ascending=[True, False, True]).reset_index(drop=True)


def balance_by_source(raw_counts: dict[str, int], valid: pd.DataFrame, quarantine: pd.DataFrame) -> pd.DataFrame:
    """raw, valid, quarantined and whether raw = valid + quarantined, per source."""
    rows = []
    for source in SOURCES:
        n_valid = int((valid["source"] == source).sum())
        n_quarantined = int((quarantine["source"] == source).sum())
        raw = int(raw_counts.get(source, 0))
        rows.append({"source": source, "raw": raw, "valid": n_valid, "quarantined": n_quarantined,
                     "balanced": raw == n_valid + n_quarantined})
    return pd.DataFrame(rows)


def criteria_problems(criteria: pd.DataFrame, scenarios: set[str]) -> list[str]:
    """What is wrong with validated.scenario_criteria: scenarios without criteria, blank texts, odd weights."""
    problems = [f"{s}: no criteria" for s in sorted(scenarios - set(criteria["scenario"]))]
    blank = criteria[criteria["content"].fillna("").str.strip() == ""]
    problems += [f"{row.scenario}/{row.criterion}: empty content" for row in blank.itertuples()]
    odd = criteria[~criteria["weight"].between(1, 5)]
    problems += [f"{row.scenario}/{row.criterion}: weight {row.weight} outside 1-5" for row in odd.itertuples()]
    return problems


# ---------------------------------------------------------------------------------------------- pandera
def _is_text_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _is_conversation(value: object) -> bool:
    return (isinstance(value, list) and len(value) > 0
            and all(isinstance(turn, dict) and isinstance(turn.get("content"), str) for turn in value)
            and value[-1].get("role") == "assistant")


def _is_vote_list(value: object) -> bool:
    return value is None or (isinstance(value, list) and len(value) > 0 and all(v in WINNERS for v in value))


def _text_column() -> pa.Column:
    return pa.Column(str, checks=[
        pa.Check(lambda s: s.str.strip().str.len() > 0, name="not_blank"),
        pa.Check.str_length(max_value=MAX_TEXT_CHARS, name="within_length_limit"),
    ])


def preferences_schema() -> pa.DataFrameSchema:
    """The contract of validated.preferences (list columns as plain Python lists, see canonical.to_python_lists)."""
    conversation = pa.Column(object, checks=pa.Check(_is_conversation, element_wise=True, name="is_conversation"))
    criteria = pa.Column(object, checks=pa.Check(_is_text_list, element_wise=True, name="is_text_list"))
    return pa.DataFrameSchema(
        {
            "idx": pa.Column(str, unique=True),
            "source": pa.Column(str, pa.Check.isin(SOURCES)),
            "prompt": _text_column(),
            "model_a": conversation,
            "model_b": conversation,
            "response_a": _text_column(),
            "response_b": _text_column(),
            "model_a_name": pa.Column(str, nullable=True),
            "model_b_name": pa.Column(str, nullable=True),
            "human_winner": pa.Column(str, pa.Check.isin(WINNERS)),
            "votes": pa.Column(object, pa.Check(_is_vote_list, element_wise=True, name="is_vote_list"),
                               nullable=True),
            "scenario": pa.Column(str, nullable=True),
            "a_criteria": criteria,
            "b_criteria": criteria,
            "label_kind": pa.Column(str, pa.Check.isin(LABEL_KINDS)),
            "soft_label": pa.Column(float, pa.Check.in_range(0.0, 1.0)),
        },
        checks=[
            pa.Check(lambda df: df["response_a"].str.strip() != df["response_b"].str.strip(),
                     name="responses_differ"),
            pa.Check(lambda df: ~df["source"].isin(SOURCES_WITH_SCENARIO) | df["scenario"].notna(),
                     name="scenario_where_source_has_one"),
            pa.Check(lambda df: ~df.apply(lambda row: pair_key(row), axis=1).duplicated(), name="no_duplicate_pair"),
            pa.Check(lambda df: (df["human_winner"] == "tie") | df.apply(_winner_has_criteria_only, axis=1),
                     name="loser_has_no_criteria"),
            pa.Check(lambda df: (df["label_kind"] == "ai_judge") == df["source"].isin(AI_JUDGE_SOURCES),
                     name="label_kind_matches_source"),
            pa.Check(lambda df: _soft_label_agrees(df), name="soft_label_agrees_with_winner"),
        ],
        strict=True,
        ordered=True,
    )


def _soft_label_agrees(df: pd.DataFrame) -> pd.Series:
    """side A's probability is above, at or below one half exactly when model_a wins, it is a tie, model_b wins."""
    expected = df["soft_label"].map(lambda p: "model_a" if p > 0.5 else "model_b" if p < 0.5 else "tie")
    return expected == df["human_winner"]


def _winner_has_criteria_only(row: pd.Series) -> bool:
    loser = "b_criteria" if row["human_winner"] == "model_a" else "a_criteria"
    return len(row[loser]) == 0


def pandera_failures(frame: pd.DataFrame) -> pd.DataFrame:
    """pandera's failure cases (schema_context, column, check, index, failure_case); empty when all pass."""
    try:
        preferences_schema().validate(frame, lazy=True)
    except pa.errors.SchemaErrors as errors:
        return errors.failure_cases
    return pd.DataFrame(columns=["schema_context", "column", "check", "check_number", "failure_case", "index"])


# ---------------------------------------------------------------------------------------------- Great Expectations
def expectation_suite() -> gx.ExpectationSuite:
    """The same contract, told to Great Expectations (scalar columns; list columns as their lengths)."""
    expect = gx.expectations
    expectations = [
        expect.ExpectColumnValuesToBeUnique(column="idx"),
        expect.ExpectColumnValuesToNotBeNull(column="idx"),
        expect.ExpectColumnValuesToBeInSet(column="source", value_set=list(SOURCES)),
        expect.ExpectColumnValuesToBeInSet(column="human_winner", value_set=list(WINNERS)),
        expect.ExpectColumnValuesToNotBeNull(column="human_winner"),
        *[expect.ExpectColumnValuesToNotBeNull(column=column) for column in TEXT_COLUMNS],
        *[expect.ExpectColumnValueLengthsToBeBetween(column=column, min_value=1, max_value=MAX_TEXT_CHARS)
          for column in TEXT_COLUMNS],
        *[expect.ExpectColumnValuesToBeBetween(column=column, min_value=2) for column in ("turns_a", "turns_b")],
        expect.ExpectColumnValuesToBeInSet(column="responses_identical", value_set=[False]),
        expect.ExpectColumnValuesToBeInSet(column="scenario_required_but_missing", value_set=[False]),
        expect.ExpectCompoundColumnsToBeUnique(column_list=["prompt", "response_low", "response_high"]),
        expect.ExpectColumnValuesToBeInSet(column="label_kind", value_set=list(LABEL_KINDS)),
        expect.ExpectColumnValuesToBeBetween(column="soft_label", min_value=0.0, max_value=1.0),
        expect.ExpectColumnValuesToBeInSet(column="soft_label_disagrees", value_set=[False]),
    ]
    return gx.ExpectationSuite(name="validated_preferences", expectations=expectations)


def gx_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The scalar view GX validates: text columns plus derived flags for what GX cannot state on lists."""
    keys = frame.apply(lambda row: pair_key(row), axis=1) if len(frame) else pd.Series([], dtype=object)
    return pd.DataFrame({
        "idx": frame["idx"],
        "source": frame["source"],
        "human_winner": frame["human_winner"],
        **{column: frame[column] for column in TEXT_COLUMNS},
        "turns_a": frame["model_a"].map(len),
        "turns_b": frame["model_b"].map(len),
        "responses_identical": frame["response_a"].str.strip() == frame["response_b"].str.strip(),
        "scenario_required_but_missing": frame["source"].isin(SOURCES_WITH_SCENARIO) & frame["scenario"].isna(),
        "label_kind": frame["label_kind"],
        "soft_label": frame["soft_label"],
        "soft_label_disagrees": ~_soft_label_agrees(frame) if len(frame) else pd.Series([], dtype=bool),
        "response_low": [key[1] for key in keys],
        "response_high": [key[2] for key in keys],
    })


def gx_results(frame: pd.DataFrame) -> pd.DataFrame:
    """Run the suite on an ephemeral GX context; one row per expectation with its unexpected count."""
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    batch_definition = (
        context.data_sources.add_pandas("usl_preferences")
        .add_dataframe_asset("validated_preferences")
        .add_batch_definition_whole_dataframe("whole_table")
    )
    suite = context.suites.add(expectation_suite())
    result = batch_definition.get_batch(batch_parameters={"dataframe": gx_frame(frame)}).validate(suite)
    return pd.DataFrame([
        {
            "expectation": item.expectation_config.type,
            "column": item.expectation_config.kwargs.get("column")
            or ",".join(item.expectation_config.kwargs.get("column_list", [])),
            "success": bool(item.success),
            "unexpected_count": int(item.result.get("unexpected_count") or 0),
        }
        for item in result.results
    ])


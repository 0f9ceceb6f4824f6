"""Every raw preference row in one canonical pair format (the seed paper's: prompt, two conversations, winner).

A record that cannot be put in that format (unreadable line, non-string text, unknown label, unknown scenario,
malformed conversation) still gets a canonical row: its contract columns stay NULL and `conversion_rule` /
`conversion_detail` say why, so validation quarantines it instead of the stage crashing or dropping it.
"""

import hashlib
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from usl_assets.preferences.criteria import criteria_texts, load_scenarios
from usl_assets.preferences.sources import raw_record
from usl_assets.preferences.typed_tables import JSON_SHAPES, is_missing, plain_values
from usl_assets.preferences.typed_tables import write_typed_table  # noqa: F401 (callers use canonical's)

SOURCES = ("autoj", "pandalm", "hh_rlhf_harmless", "alpaca_eval_judge", "user")
LABEL_KINDS = ("human", "ai_judge")
AI_JUDGE_SOURCES = ("alpaca_eval_judge",)
WINNERS = ("model_a", "model_b", "tie")
HUMAN, ASSISTANT = "\n\nHuman:", "\n\nAssistant:"

# column -> DuckDB type; list and conversation columns travel as JSON text and are typed in SQL
CANONICAL_TYPES = {
    "idx": "VARCHAR",
    "source": "VARCHAR",
    "prompt": "VARCHAR",
    "model_a": 'STRUCT("role" VARCHAR, "content" VARCHAR)[]',
    "model_b": 'STRUCT("role" VARCHAR, "content" VARCHAR)[]',
    "response_a": "VARCHAR",
    "response_b": "VARCHAR",
    "model_a_name": "VARCHAR",
    "model_b_name": "VARCHAR",
    "human_winner": "VARCHAR",
    "votes": "VARCHAR[]",
    "scenario": "VARCHAR",
    "a_criteria": "VARCHAR[]",
    "b_criteria": "VARCHAR[]",
    "label_kind": "VARCHAR",
    "soft_label": "DOUBLE",
}
STAGING_TYPES = {
    **CANONICAL_TYPES,
    "row_number": "BIGINT",
    "record": "VARCHAR",
    "conversion_rule": "VARCHAR",
    "conversion_detail": "VARCHAR",
}


class RecordProblem(Exception):
    """A raw record that cannot be put in the canonical format; `rule` names the quarantine rule."""

    def __init__(self, rule: str, detail: str):
        super().__init__(f"{rule}: {detail}")
        self.rule, self.detail = rule, detail


class CriteriaBook:
    """Known Auto-J scenarios and their criteria texts, loaded once per run."""

    def __init__(self, data_root: Path):
        self.scenarios = set(load_scenarios(data_root).descriptions)
        self._texts = {scenario: criteria_texts(data_root, scenario) for scenario in self.scenarios}

    def texts(self, scenario: str | None) -> list[str]:
        return list(self._texts.get(scenario, [])) if scenario else []


# ---------------------------------------------------------------------------------------------- small helpers
def text_field(record: dict, name: str, side: str | None = None) -> str:
    """A field that must be a string (may be empty: emptiness is a validation rule, not a conversion problem)."""
    value = record.get(name)
    if not isinstance(value, str):
        shown = json.dumps(value)[:60] if name in record else "missing"
        raise RecordProblem("non_string_text", f"{side or name} is {_kind(value, name in record)} ({shown})")
    return value


def _kind(value: object, present: bool) -> str:
    return type(value).__name__ if present else "absent"


def conversation(prompt: str, response: str) -> list[dict]:
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]


def criteria_for_winner(winner: str, criteria: list[str]) -> tuple[list[str], list[str]]:
    """The winner's side gets the criteria that make it win; a tie gives them to both sides."""
    return (
        list(criteria) if winner in ("model_a", "tie") else [],
        list(criteria) if winner in ("model_b", "tie") else [],
    )


def majority(votes: list[str]) -> str:
    """The strict majority of the votes; no majority is a tie."""
    winner, count = Counter(votes).most_common(1)[0]
    return winner if count * 2 > len(votes) else "tie"


def known_scenario(record: dict, book: CriteriaBook) -> str | None:
    scenario = record.get("scenario")
    if scenario is None or scenario == "":
        return None
    if not isinstance(scenario, str) or scenario not in book.scenarios:
        raise RecordProblem("unknown_scenario", f"scenario {json.dumps(scenario)[:60]} is not an Auto-J scenario")
    return scenario


def pair_row(prompt: str, response_a: str, response_b: str, winner: str, **extra) -> dict:
    return {
        "prompt": prompt,
        "model_a": conversation(prompt, response_a),
        "model_b": conversation(prompt, response_b),
        "response_a": response_a,
        "response_b": response_b,
        "human_winner": winner,
        **extra,
    }


# ---------------------------------------------------------------------------------------------- per source
AUTOJ_LABELS = {0: "model_a", 1: "model_b", 2: "tie"}
AUTOJ_LABELS_TEXT = {str(label): winner for label, winner in AUTOJ_LABELS.items()}


def autoj_row(record: dict, book: CriteriaBook) -> dict:
    """Auto-J: `response 1` is side A; label 0/1/2 (int or string) = response 1 / response 2 / tie."""
    label = record.get("label")
    key = label.strip() if isinstance(label, str) else label
    winner = AUTOJ_LABELS.get(key) if type(key) is int else AUTOJ_LABELS_TEXT.get(key)
    if winner is None:
        raise RecordProblem("unknown_label", f"label {json.dumps(label)} is not 0, 1 or 2")
    scenario = known_scenario(record, book)
    a_criteria, b_criteria = criteria_for_winner(winner, book.texts(scenario))
    return pair_row(
        text_field(record, "prompt"), text_field(record, "response 1", "response_a"),
        text_field(record, "response 2", "response_b"), winner,
        scenario=scenario, a_criteria=a_criteria, b_criteria=b_criteria,
    )


PANDALM_VOTES = {0: "tie", 1: "model_a", 2: "model_b"}


def pandalm_row(record: dict, book: CriteriaBook) -> dict:
    """PandaLM: prompt = instruction + input, three votes (0 tie, 1, 2), the winner their majority."""
    votes = []
    for name in ("annotator1", "annotator2", "annotator3"):
        vote = record.get(name)
        if isinstance(vote, bool) or vote not in PANDALM_VOTES:
            raise RecordProblem("unknown_label", f"{name} {json.dumps(vote)} is not 0, 1 or 2")
        votes.append(PANDALM_VOTES[vote])
    instruction, given_input = text_field(record, "instruction"), text_field(record, "input")
    prompt = f"{instruction}\n\n{given_input}" if given_input.strip() else instruction
    name_a, name_b = pandalm_model_names(record.get("cmp_key"))
    return pair_row(
        prompt, text_field(record, "response1", "response_a"), text_field(record, "response2", "response_b"),
        majority(votes), votes=votes, model_a_name=name_a, model_b_name=name_b, a_criteria=[], b_criteria=[],
    )


def pandalm_model_names(cmp_key: object) -> tuple[str | None, str | None]:
    """`cmp_key` is "<model 1>_<model 2>" (e.g. bloom-7b_llama-7b); anything else leaves the names unknown."""
    if isinstance(cmp_key, str) and cmp_key.count("_") == 1:
        name_a, name_b = cmp_key.split("_")
        return name_a, name_b
    return None, None


def hh_rlhf_row(record: dict, book: CriteriaBook) -> dict:
    """hh-rlhf: two whole dialogues that differ in the last reply; the shared dialogue before it is the prompt.

    Chosen and rejected go on sides A/B by a hash of their text, so the winner is not always model_a.
    """
    chosen, rejected = text_field(record, "chosen"), text_field(record, "rejected")
    prompt_text, chosen_reply, rejected_reply = split_final_reply(chosen, rejected)
    turns = dialogue_turns(prompt_text)
    chosen_on_b = hashlib.sha256(f"{chosen}\0{rejected}".encode()).digest()[0] % 2 == 1
    reply_a, reply_b = (rejected_reply, chosen_reply) if chosen_on_b else (chosen_reply, rejected_reply)
    return {
        "prompt": prompt_text.strip(),
        "model_a": turns + [{"role": "assistant", "content": reply_a}],
        "model_b": turns + [{"role": "assistant", "content": reply_b}],
        "response_a": reply_a,
        "response_b": reply_b,
        "human_winner": "model_b" if chosen_on_b else "model_a",
        "a_criteria": [],
        "b_criteria": [],
    }


def split_final_reply(chosen: str, rejected: str) -> tuple[str, str, str]:
    """The dialogue both share up to the last assistant turn before they diverge, and the two final replies.

    Splitting at the shared prefix (not at the last "Assistant:" of each) keeps replies that themselves contain
    "\\n\\nAssistant:" whole.
    """
    shared = 0
    for left, right in zip(chosen, rejected):
        if left != right:
            break
        shared += 1
    cut = chosen.rfind(ASSISTANT, 0, shared)
    if cut < 0 or not chosen.startswith(HUMAN):
        raise RecordProblem("malformed_dialogue", "chosen and rejected share no Human/Assistant dialogue")
    start = cut + len(ASSISTANT)
    return chosen[:cut], chosen[start:].strip(), rejected[start:].strip()


def dialogue_turns(text: str) -> list[dict]:
    """ "\\n\\nHuman: …\\n\\nAssistant: …" as user/assistant turns."""
    turns, rest = [], text
    while rest:
        human, assistant = rest.find(HUMAN), rest.find(ASSISTANT)
        starts = [(pos, marker) for pos, marker in ((human, HUMAN), (assistant, ASSISTANT)) if pos >= 0]
        if not starts:
            break
        pos, marker = min(starts)
        following = [p for p in (rest.find(HUMAN, pos + 1), rest.find(ASSISTANT, pos + 1)) if p >= 0]
        end = min(following) if following else len(rest)
        role = "user" if marker == HUMAN else "assistant"
        turns.append({"role": role, "content": rest[pos + len(marker):end].strip()})
        rest = rest[end:]
    return turns


USER_WINNER_ALIASES = {"model_a": "model_a", "a": "model_a", "model_b": "model_b", "b": "model_b", "tie": "tie"}


def user_row(record: dict, book: CriteriaBook) -> dict:
    """A user's pair in the paper's format: model_a / model_b conversations, human_winner or preference."""
    label = record.get("human_winner", record.get("preference"))
    winner = USER_WINNER_ALIASES.get(label.strip().lower()) if isinstance(label, str) else None
    if winner is None:
        shown = json.dumps(label)[:60]
        raise RecordProblem("unknown_label", f"human_winner/preference {shown} is not model_a, model_b or tie")
    conversation_a, conversation_b = user_conversation(record, "model_a"), user_conversation(record, "model_b")
    prompt = record["prompt"] if "prompt" in record else first_user_turn(conversation_a)
    if not isinstance(prompt, str):
        raise RecordProblem("non_string_text", f"prompt is {type(prompt).__name__}")
    scenario = known_scenario(record, book)
    criteria = user_criteria(record) or book.texts(scenario)
    a_criteria, b_criteria = criteria_for_winner(winner, criteria)
    return {
        "prompt": prompt,
        "model_a": conversation_a,
        "model_b": conversation_b,
        "response_a": conversation_a[-1]["content"],
        "response_b": conversation_b[-1]["content"],
        "model_a_name": optional_text(record, "model_a_name"),
        "model_b_name": optional_text(record, "model_b_name"),
        "human_winner": winner,
        "scenario": scenario,
        "a_criteria": a_criteria,
        "b_criteria": b_criteria,
    }


def user_conversation(record: dict, side: str) -> list[dict]:
    """A list of {role, content} turns ending with the assistant's answer (a bare string is one answer)."""
    turns = record.get(side)
    if isinstance(turns, str) or (turns is not None and not isinstance(turns, list)):
        kind = "string" if isinstance(turns, str) else type(turns).__name__
        raise RecordProblem("malformed_conversation", f"{side} is a {kind}, not a list of {{role, content}} turns")
    if not turns:
        raise RecordProblem("malformed_conversation", f"{side} is missing or empty")
    for turn in turns:
        if not isinstance(turn, dict) or turn.get("role") not in ("user", "assistant", "system"):
            raise RecordProblem("malformed_conversation", f"{side} has a turn without role user/assistant/system")
        if not isinstance(turn.get("content"), str):
            kind = _kind(turn.get("content"), "content" in turn)
            raise RecordProblem("non_string_text", f"{side} has a turn whose content is {kind}")
    if turns[-1]["role"] != "assistant":
        raise RecordProblem("malformed_conversation", f"{side} does not end with an assistant turn")
    return [{"role": turn["role"], "content": turn["content"]} for turn in turns]


def first_user_turn(turns: list[dict]) -> str:
    return next((turn["content"] for turn in turns if turn["role"] == "user"), "")


def user_criteria(record: dict) -> list[str]:
    criteria = record.get("criteria")
    if criteria is None:
        return []
    if not isinstance(criteria, list) or not all(isinstance(item, str) for item in criteria):
        raise RecordProblem("malformed_criteria", "criteria must be a list of strings")
    return [item.strip() for item in criteria if item.strip()]


def optional_text(record: dict, name: str) -> str | None:
    value = record.get(name)
    return value if isinstance(value, str) and value else None


def alpaca_eval_judge_row(record: dict, book: CriteriaBook) -> dict:
    """AlpacaEval's GPT-4 Turbo judgments: output_1 (the reference, side A) vs output_2 (side B); `preference` in
    [1, 2] is the judge's probability-weighted choice, so P(side A preferred) = 2 - preference. The judge was asked
    for overall quality: the criteria come from the tagged scenario (tagged_preferences fills them)."""
    preference = record.get("preference")
    if isinstance(preference, bool) or not isinstance(preference, int | float) or not 1 <= preference <= 2:
        raise RecordProblem("unknown_label", f"preference {json.dumps(preference)[:60]} is not a number in [1, 2]")
    a_probability = 2.0 - float(preference)
    winner = "model_a" if a_probability > 0.5 else "model_b" if a_probability < 0.5 else "tie"
    return pair_row(
        text_field(record, "instruction", "prompt"), text_field(record, "output_1", "response_a"),
        text_field(record, "output_2", "response_b"), winner,
        model_a_name=optional_text(record, "generator_1"), model_b_name=optional_text(record, "generator_2"),
        a_criteria=[], b_criteria=[], label_kind="ai_judge", soft_label=a_probability,
    )


HUMAN_SOFT_LABELS = {"model_a": 1.0, "model_b": 0.0, "tie": 0.5}


def with_label_kind(row: dict) -> dict:
    """Human sources: label_kind 'human' and the hard label as a probability that side A is preferred."""
    if row.get("label_kind") is None:
        row["label_kind"] = "human"
        row["soft_label"] = HUMAN_SOFT_LABELS.get(row.get("human_winner"))
    return row


CONVERTERS: dict[str, Callable[[dict, CriteriaBook], dict]] = {
    "autoj": autoj_row,
    "pandalm": pandalm_row,
    "hh_rlhf_harmless": hh_rlhf_row,
    "alpaca_eval_judge": alpaca_eval_judge_row,
    "user": user_row,
}


# ---------------------------------------------------------------------------------------------- the table
def canonical_rows(source: str, raw: pd.DataFrame, book: CriteriaBook) -> pd.DataFrame:
    """One canonical row per raw row of `source` (in file order), problems recorded instead of raised."""
    convert = CONVERTERS[source]
    rows = []
    for raw_row in raw.to_dict("records"):
        record = raw_record(raw_row)
        row = {"idx": f"{source}:{raw_row['row_number']}", "source": source, "row_number": raw_row["row_number"],
               "record": json.dumps(record, ensure_ascii=False)}
        if raw_row.get("raw_error"):
            rule, _, detail = raw_row["raw_error"].partition(": ")
            row.update(conversion_rule=rule, conversion_detail=detail)
        else:
            try:
                row.update(with_label_kind(convert(record, book)))
            except RecordProblem as problem:
                row.update(conversion_rule=problem.rule, conversion_detail=problem.detail)
        rows.append(row)
    return as_staging_frame(rows)


def as_staging_frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame.from_records(rows, columns=list(STAGING_TYPES)).astype(object)
    return frame.where(frame.notna(), None)


def to_python_lists(frame: pd.DataFrame) -> pd.DataFrame:
    """List columns read back from DuckDB arrive as numpy arrays; make them plain lists of plain values."""
    frame = frame.copy()
    for name, kind in CANONICAL_TYPES.items():
        if name in frame and kind in JSON_SHAPES:
            frame[name] = [None if is_missing(value) else value for value in plain_values(frame[name])]
    return frame

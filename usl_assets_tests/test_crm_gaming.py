"""Answers built to fool the judge (crm/gaming.py), the features that read the prompt with the answer
(crm/relevance.py) and the gaming rows of the training table (crm/gaming_pairs.py)."""

import re

import pytest

from usl_assets.crm import gaming, gaming_pairs, relevance
from usl_assets.crm.features import response_counts

ANSWER = ("A hash table stores values under keys. It hashes each key to pick a bucket, so lookups take constant "
          "time on average. Key collisions are handled by chaining or by open addressing. When the table fills up, "
          "it is resized and every key is hashed again.")
PROMPT = "How does a hash table store and find values by key?"


def _sentences(bank: str) -> set[str]:
    texts = [gaming.padded(ANSWER, bank, 0, k) for k in range(20)] + [gaming.generic(bank, 0, k) for k in range(20)]
    texts += [gaming.echo("PROMPT", bank, 0, k) for k in range(20)]
    return {s.strip() for text in texts for s in re.split(r"\n+", text.replace(ANSWER, "")) if s.strip()}


def test_the_two_text_banks_share_no_line():
    """The audit and the gaming_pairs split use text training never saw."""
    assert not _sentences("train") & _sentences("heldout")


def test_padding_wraps_the_answer_in_headings_bold_bullets_and_filler():
    padded = gaming.padded(ANSWER, "heldout", 0, "k")
    counts, original = response_counts(padded), response_counts(ANSWER)
    assert ANSWER in padded
    assert counts["headings"] == 4 and counts["bold_marks"] == 4 and counts["list_items"] == 4
    assert counts["words"] > 1.5 * original["words"]
    assert gaming.padded(ANSWER, "heldout", 0, "k") == padded  # seeded
    with pytest.raises(ValueError, match="bank must be one of"):
        gaming.padded(ANSWER, "other", 0)


def test_the_reformatted_twin_has_the_padding_s_markdown_without_its_filler():
    padded, twin = gaming.padded(ANSWER, "train", 0, "k"), gaming.reformatted(ANSWER, "train", 0, "k")
    markdown = ("headings", "bold_marks", "list_items")
    assert [response_counts(twin)[c] for c in markdown] == [response_counts(padded)[c] for c in markdown]
    assert relevance.unsupported_sentence_share(PROMPT, twin) == 0.0
    assert relevance.unsupported_sentence_share(PROMPT, padded) > 0.3


def test_truncation_keeps_the_first_eighth_of_the_words():
    words = [f"w{i}" for i in range(80)]
    assert gaming.truncated(" ".join(words)) == " ".join(words[:10])
    assert gaming.truncated("one two") == "one"


def test_shifted_moves_every_item_to_another_key():
    keys = ["a", "a", "b", "c", "d", "e"]
    moved = gaming.shifted(keys, 3)
    assert all(keys[j] != keys[i] for i, j in enumerate(moved))
    assert moved == gaming.shifted(keys, 3) and moved != gaming.shifted(keys, 4)
    assert gaming.shifted(["x", "x"], 0) == [-1, -1]


def test_relevance_reads_the_prompt_with_the_answer():
    assert relevance.prompt_relevance(PROMPT, ANSWER) > 0.3
    assert relevance.prompt_relevance(PROMPT, "Paris is the capital of France, known for its museums.") == 0.0
    assert relevance.prompt_relevance("Tables", "tables table") == pytest.approx(1.0)
    assert relevance.stems("The Hashing of tables!") == ["hashi", "table"]


def test_the_fit_feature_saturates_and_an_answer_cut_short_is_unfinished():
    rows = relevance.relevance_matrix([PROMPT] * 3, [ANSWER, "Paris is lovely, and", ANSWER + "\n```\ncode\n```"])
    assert rows[0].tolist() == [1.0, 0.0, 0.0, 0.0]  # fit capped at 1: more overlap than a real answer's is no better
    assert rows[1][0] == 0.0 and rows[1][3] == 1.0 and rows[2][3] == 0.0
    assert relevance.unfinished_ending(gaming.truncated(ANSWER)) == 1.0


def test_unsupported_sentences_are_the_filler_sharing_no_word_with_prompt_or_answer():
    filler = "Experts agree that a thoughtful perspective brings benefits in the long run."
    assert relevance.unsupported_sentence_share(PROMPT, ANSWER) == 0.0
    share = relevance.unsupported_sentence_share(PROMPT, f"{ANSWER} {filler}")
    assert share == pytest.approx(1 / 5)
    assert relevance.unsupported_sentence_share(PROMPT, gaming.generic("heldout", 0, "audit")) > 0.7


def test_a_stray_sentence_costs_nothing_and_padding_counts_beyond_the_tolerance():
    """log_excess_unsupported_words counts the unsupported content words beyond UNSUPPORTED_TOLERANCE: a real
    answer's closing remark costs nothing (counted from the first word, it cost human pairs' longer, better
    answer), padding's filler still counts."""
    column = relevance.TEXT_RELEVANCE_FEATURES.index("log_excess_unsupported_words")
    remark = "Experts agree that a thoughtful perspective brings benefits in the long run."
    padded = gaming.padded(ANSWER, "heldout", 0, "k")
    rows = relevance.relevance_matrix([PROMPT] * 3, [ANSWER, f"{ANSWER} {remark}", padded])
    assert relevance.unsupported_sentence_share(PROMPT, f"{ANSWER} {remark}") > 0  # the remark is unsupported
    assert rows[0][column] == 0.0 and rows[1][column] == 0.0
    assert rows[2][column] > 1.0


def test_the_supported_view_drops_the_filler_and_keeps_the_answer_and_its_code():
    filler = "Experts agree that a thoughtful perspective brings benefits in the long run."
    coded = f"{ANSWER}\n```python\nprint('Experts agree that a thoughtful perspective brings benefits.')\n```"
    assert relevance.supported_text(PROMPT, f"{ANSWER} {filler}").strip() == ANSWER
    assert relevance.supported_text(PROMPT, coded) == coded
    padded = gaming.padded(ANSWER, "heldout", 0, "k")
    view = response_counts(relevance.supported_text(PROMPT, padded))
    assert view["words"] < response_counts(padded)["words"] - 40
    assert view["words"] >= response_counts(ANSWER)["words"]


def _row(idx: str, split: str, source: str, prompt: str, chosen: str, model: str | None = None) -> dict:
    return {"split": split, "origin_idx": idx, "source": source, "scenario": "s", "scenario_group": "g",
            "prompt": prompt, "chosen": chosen, "rejected": "a worse answer", "criteria": ["Be helpful."],
            "augmentation": "original", "human_label": True, "chosen_is_longer": True, "property": None,
            "property_direction": None, "label_kind": "human", "soft_label": 1.0, "chosen_model": model,
            "rejected_model": None}


def test_gaming_rows_train_on_the_train_bank_and_test_on_held_out_prompts_with_the_other():
    rows = [_row(f"t{i}", "train", "autoj", f"Train prompt {i}?", f"Real answer {i}. " * 20) for i in range(4)]
    rows += [_row(f"h{i}", "human_heldout", "autoj", f"Test prompt {i}?", f"Held answer {i}. " * 20)
             for i in range(6)]
    rows += [_row("n0", "new_scenario", "autoj", "Other prompt?", "Other answer. " * 20)]
    found = gaming_pairs.gaming_rows(rows, gaming_pairs.GamingConfig())
    train = [r for r in found if r["split"] == "train"]
    test = [r for r in found if r["split"] == gaming_pairs.SPLIT]
    # every trick per train pair (and the padded answer's filler-free twin at even odds), one per test pair; the
    # off-topic, generic and echoed answers lose to the pair's worse answer too
    weak = [r for r in train if r["chosen"] == "a worse answer"]
    assert len(train) == 4 * (len(gaming.KINDS) + 1 + len(gaming_pairs.WEAK_REAL_KINDS)) and len(test) == 6
    assert sorted(r["augmentation"] for r in weak) == sorted(f"gaming_{k}" for k in gaming_pairs.WEAK_REAL_KINDS * 4)
    assert {r["soft_label"] for r in train if r["augmentation"] == "gaming_reformatted"} == {0.5}
    assert {r["label_kind"] for r in found} == {"gaming"}
    assert all(r["soft_label"] == 1.0 for r in found if r["augmentation"] != "gaming_reformatted")
    train_lines, heldout_lines = _sentences("train"), _sentences("heldout")
    for row in train:
        assert not any(line in row["rejected"] for line in heldout_lines)
    for row in test:
        assert row["prompt"].startswith("Test") and not any(line in row["rejected"] for line in train_lines)
    for row in found:
        if row["augmentation"] == "gaming_off_topic" and row not in weak:
            # another pair's answer of the same group: another index, the same first word
            assert row["rejected"].split()[2] != row["chosen"].split()[2]
            assert row["rejected"].split()[0] == row["chosen"].split()[0]
    assert not [r for r in found if r["origin_idx"] == "n0"]


def test_the_gaming_wishes_split_asks_for_what_the_trick_has_and_the_real_answer_still_wins():
    long_answer = " ".join(f"Step {i} of the answer explains one more part of the idea in plain words."
                           for i in range(12))
    rows = [_row(f"t{i}", "train", "autoj", f"Train prompt {i}?", long_answer) for i in range(4)]
    rows += [_row(f"h{i}", "human_heldout", "autoj", f"Test prompt {i}?", long_answer) for i in range(12)]
    found = gaming_pairs.gaming_rows(rows, gaming_pairs.GamingConfig(wish_properties=("length", "structure")))
    plain = [r for r in found if r["split"] != gaming_pairs.WISH_SPLIT]
    assert plain == gaming_pairs.gaming_rows(rows, gaming_pairs.GamingConfig())  # the other rows unchanged
    wished = [r for r in found if r["split"] == gaming_pairs.WISH_SPLIT]
    tests = [r for r in found if r["split"] == gaming_pairs.SPLIT]
    assert 0 < len(wished) <= len(tests) and {r["label_kind"] for r in wished} == {"gaming"}
    assert {r["augmentation"] for r in wished} >= {"gaming_truncated", "gaming_padded"}
    for row in wished:  # held-out prompts, the real answer chosen, a held-out family's wording of the wish
        assert row["prompt"].startswith("Test") and row["chosen"] == long_answer and len(row["criteria"]) == 1
        prop = gaming_pairs.PROPERTIES[row["property"]]
        assert row["criteria"][0] in prop.phrasings(row["property_direction"], "paraphrase")
        # the wish names what the trick's answer has more of ('more') or less of ('less')
        side = prop.more_side(response_counts(row["chosen"]), response_counts(row["rejected"]))
        assert side == ("b" if row["property_direction"] == "more" else "a")
    cut = [r for r in wished if r["augmentation"] == "gaming_truncated"]
    assert cut and {(r["property"], r["property_direction"]) for r in cut} == {("length", "less")}


def test_a_new_step_sharing_two_words_with_an_earlier_sentence_is_no_restatement():
    prompt = "How do I wrap a present neatly?"
    answer = ("Wrapping a present neatly takes paper, tape and scissors. Fold the paper over the box and tape it. "
              "Then crease every edge of the paper so the corners stay neat.")
    assert relevance.supported_text(prompt, answer) == answer
    bullet = "- **Pro tip:** Fold the paper over the box and tape it."
    assert relevance.supported_text(prompt, f"{answer}\n\n{bullet}").strip() == answer


def test_an_answer_sharing_no_word_with_its_prompt_keeps_nothing_to_be_paid_for():
    """An answer none of whose sentences shares a word with the prompt (another prompt's answer) has no supported
    sentence: its view keeps no prose for the length, style and n-gram terms to pay, and every sentence counts
    as unsupported. A prompt with no word to share ("Go on!") anchors the answer's largest group instead."""
    elsewhere = ("Paris is the capital of France and its largest city. The city is known for its museums and "
                 "its cafes. Millions of visitors cross the city along the Seine every year.")
    assert relevance.supported_text(PROMPT, elsewhere).strip() == ""
    assert relevance.unsupported_sentence_share(PROMPT, elsewhere) == 1.0
    assert relevance.supported_text("Go on!", elsewhere) == elsewhere


def test_no_chain_of_support_goes_through_the_words_every_answer_uses():
    filler = "Take your time and consider every important factor carefully."  # shares "time" with the answer
    assert relevance.supported_text(PROMPT, f"{ANSWER} {filler}").strip() == f"{ANSWER} {filler}"
    common = relevance.common_stems([ANSWER, filler, "There is time.", "Time flies.", "Nothing here at all."], 0.5)
    assert common == frozenset({"time"})
    assert relevance.supported_text(PROMPT, f"{ANSWER} {filler}", common).strip() == ANSWER


def test_a_recipe_s_steps_between_two_sentences_on_the_prompt_stay_and_filler_around_them_goes():
    prompt = "Can you give me a recipe for a Somali dish?"
    steps = ("Mix the flour with water until the batter is smooth. Leave the batter covered overnight to ferment. "
             "Heat a pan and pour a ladle of batter thinly.")
    answer = f"Canjeero is a Somali dish, a thin pancake. Here is a recipe:\n{steps}\nServe this dish warm with tea."
    assert relevance.supported_text(prompt, answer) == answer  # the steps share no word with the prompt
    filler = "Experts agree that a thoughtful perspective brings benefits in the long run."
    assert relevance.supported_text(prompt, f"{filler}\n{answer}\n{filler}").strip() == answer


def test_a_prompt_word_every_answer_uses_anchors_no_filler():
    prompt = "Which movie is the most important one of the decade?"
    answer = "Parasite is the movie of the decade for many critics. Bong Joon-ho shot Parasite in Korea."
    filler = "It is important to weigh every factor thoughtfully and openly."  # shares "important" with the prompt
    assert relevance.supported_text(prompt, f"{answer} {filler}").strip() == answer + " " + filler
    common = frozenset({"impor"})
    assert relevance.supported_text(prompt, f"{answer} {filler}", common).strip() == answer


def test_a_heading_that_names_nothing_of_prompt_or_answer_leaves_the_view_and_code_comments_stay():
    generic = f"### In-Depth Analysis\n\n{ANSWER}"
    assert relevance.supported_text(PROMPT, generic).strip() == ANSWER
    topical = f"### Hash tables in short\n\n{ANSWER}"
    assert relevance.supported_text(PROMPT, topical) == topical
    coded = f"{ANSWER}\n```python\n# Buckets\n# Keys\nbuckets = [[] for _ in range(8)]\n```"
    assert relevance.supported_text(PROMPT, coded) == coded

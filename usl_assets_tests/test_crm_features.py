import json
import math

import numpy as np

from usl_assets.crm.features import (COUNT_NAMES, DEGENERATION_FEATURES, FEATURE_NAMES, degeneration_matrix,
                                     feature_matrix, prompt_copy_share, prompt_terms_missed, repeated_line_share,
                                     repeated_word_share, response_counts, response_features)

MARKDOWN = """# Setup

Follow these steps:
- install the **package**
- run `make`
1. check the output?

```python
print("hello 2024")
```
I'm sorry, I can't help with that part. See https://example.org!"""


def test_counts_of_a_markdown_answer():
    counts = response_counts(MARKDOWN)
    assert list(counts) == list(COUNT_NAMES)
    assert counts["headings"] == 1
    assert counts["list_items"] == 3
    assert counts["code_blocks"] == 1 and counts["code_lines"] == 1
    assert counts["inline_code"] == 1 and counts["bold_marks"] == 1
    assert counts["questions"] == 1  # "check the output?"
    assert counts["urls"] == 1 and counts["refusal_phrases"] >= 1
    assert counts["digits"] == 5  # "1." and "2024"


def test_new_features_are_appended_after_the_original_ones():
    assert FEATURE_NAMES[:21] == (
        "log_words", "log_chars", "log_lines", "log_paragraphs", "log_sentences", "avg_sentence_words",
        "avg_word_chars", "log_list_items", "list_line_ratio", "log_headings", "log_code_blocks", "code_line_ratio",
        "log_inline_code", "log_bold_marks", "log_table_rows", "log_questions", "log_exclamations", "digit_ratio",
        "uppercase_ratio", "log_urls", "refusal")
    assert FEATURE_NAMES[21:] == ("log_example_markers", "log_step_markers", "formality", "direct_opening")
    assert COUNT_NAMES[-4:] == ("example_markers", "step_markers", "informal_markers", "preamble_sentences")


def test_example_markers():
    text = "Some fruits, such as lemons, are sour. For example, a lime. Others (e.g. mangoes) are sweet.\nExample: figs"
    assert response_counts(text)["example_markers"] == 4
    assert response_counts("An example is useful, but I give none.")["example_markers"] == 0
    assert response_counts("Use it like this:\n```\n# for example\n```")["example_markers"] == 0  # code is no prose


def test_step_markers():
    assert response_counts("Step 1: open it. Step 2: close it.")["step_markers"] == 2
    assert response_counts("First, heat the pan. Then add oil. Finally, serve.")["step_markers"] == 3
    assert response_counts("It came first. We were next to it.")["step_markers"] == 0  # not sentence openings
    actions = "1. Preheat the oven.\n2. Mix the flour.\n3. Paris is nice."
    assert response_counts(actions)["step_markers"] == 2  # numbered items that are actions
    assert response_counts("Follow these steps:\n1. The oven.\n2. The flour.")["step_markers"] == 2


def test_informal_markers_and_formality():
    counts = response_counts("Hey guys! It's gonna be awesome, don't worry 🙂. John's car isn't here.")
    # hey, guys, !, it's, gonna, awesome, don't, 🙂, isn't (John's is a possessive)
    assert counts["informal_markers"] == 9
    formal = response_counts("The committee will review the application.")
    assert formal["informal_markers"] == 0 and response_features("The committee will review it.")["formality"] == 1.0
    one_per_ten = response_features("It's " + " ".join(["word"] * 9))  # 1 marker in 11 words
    assert math.isclose(one_per_ten["formality"], 1 / (1 + 100 / 11))


def test_preamble_sentences_and_direct_opening():
    assert response_counts("Sure! I'd be happy to help. Paris is the capital.")["preamble_sentences"] == 2
    assert response_counts("Great question. Paris.")["preamble_sentences"] == 1
    assert response_counts("As an AI, I cannot vote.")["preamble_sentences"] == 1
    for direct in ("Paris is the capital.", "Yes, Paris is the capital.", "Hi Maria,\nThe meeting moved.",
                   "Great Britain is an island."):
        assert response_counts(direct)["preamble_sentences"] == 0, direct
        assert response_features(direct)["direct_opening"] == 1.0
    assert response_features("Certainly! Paris.")["direct_opening"] == 0.0
    # a title over a preamble is not a direct opening (padding puts a heading first)
    assert response_counts("### In-Depth Analysis\n\nSure! Paris is the capital.")["preamble_sentences"] == 1
    assert response_features("## Title\n# Subtitle\nCertainly! Paris.")["direct_opening"] == 0.0
    assert response_features("## Capitals\nParis is the capital.")["direct_opening"] == 1.0


def test_plain_prose_has_no_structure():
    counts = response_counts("Paris is the capital of France. It has about two million people. Lovely city.")
    assert counts["sentences"] == 3
    assert counts["list_items"] == counts["headings"] == counts["code_blocks"] == counts["questions"] == 0
    assert counts["paragraphs"] == 1


def test_code_inside_fences_is_not_prose():
    text = "Use this:\n```\n# not a heading\n- not a list item\nwhat? = 1\n```"
    counts = response_counts(text)
    assert counts["headings"] == 0 and counts["list_items"] == 0 and counts["questions"] == 0
    assert counts["code_lines"] == 3


def test_features_are_in_fixed_order_and_scaled():
    features = response_features(MARKDOWN)
    assert tuple(features) == FEATURE_NAMES
    assert features["log_words"] == math.log1p(response_counts(MARKDOWN)["words"])
    assert features["refusal"] == 1.0
    assert 0 < features["list_line_ratio"] <= 1


def test_non_string_responses_are_measured_not_crashed():
    matrix = feature_matrix([None, 3.5, float("nan"), ""])
    assert matrix.shape == (4, len(FEATURE_NAMES)) and matrix.dtype == np.float32
    assert matrix[0].sum() == 0 and matrix[2].sum() == 0
    assert matrix[1][FEATURE_NAMES.index("digit_ratio")] > 0


def test_features_of_real_responses_are_finite_and_vary(shared_data_dir):
    lines = (shared_data_dir / "preferences" / "autoj_pairwise.jsonl").read_text(encoding="utf-8").splitlines()
    texts = [json.loads(line)["response 1"] for line in lines[::20]]
    matrix = feature_matrix(texts)
    assert np.isfinite(matrix).all()
    varying = [name for name, column in zip(FEATURE_NAMES, matrix.T) if column.std() > 0]
    assert {"log_words", "log_list_items", "log_questions", "digit_ratio"} <= set(varying)


def test_repeated_lines_are_counted_whatever_their_list_markers():
    looped = "1. What is coding?\n2. How to debug code?\n3. How to debug code?\n4. how to DEBUG code"
    assert repeated_line_share(looped) == 0.5  # lines 3 and 4 say line 2 again
    assert repeated_line_share("- pen\n- ruler\n- paper") == 0.0
    assert repeated_line_share("One line only.") == 0.0 and repeated_line_share(None) == 0.0


def test_prompt_copy_is_the_share_of_the_answers_4_grams_found_in_the_prompt():
    prompt = "Give the shop a motto. The shop is a small, quaint shop in the historic district."
    assert prompt_copy_share(prompt, "The shop is a small, quaint shop in the historic district.") == 1.0
    assert prompt_copy_share(prompt, "Enjoy the taste of tradition every single day") == 0.0
    half = prompt_copy_share(prompt, "The shop is a small place to enjoy a cone")
    assert 0 < half < 1
    assert prompt_copy_share(prompt, "Too short") == 0.0 and prompt_copy_share(None, 3.5) == 0.0


def test_repeated_words_are_measured_in_50_word_windows_whatever_the_length():
    assert repeated_word_share("every word here is new") == 0.0
    assert repeated_word_share("yes YES yes, yes") == 0.75  # one distinct word in a 4-word window
    distinct = " ".join(f"w{i}" for i in range(500))
    assert repeated_word_share(distinct) == 0.0  # a long answer is not penalized for its length
    looped = " ".join(f"w{i % 10}" for i in range(500))
    assert repeated_word_share(looped) == 0.8  # 10 distinct words in every 50-word window
    half = " ".join(f"w{i}" for i in range(25)) + " " + " ".join(f"w{i}" for i in range(25))
    assert repeated_word_share(half) == 0.5
    assert repeated_word_share("Hi") == 0.0 and repeated_word_share(None) == 0.0


def test_prompt_terms_missed_counts_the_prompts_content_words_the_answer_never_uses():
    prompt = "Describe the harbour of Lisbon at sunrise for a travel brochure."
    assert prompt_terms_missed(prompt, "Lisbon's harbour at sunrise: a travel brochure you describe to friends") == 0.0
    assert prompt_terms_missed(prompt, "I like trains.") == 1.0
    # content words: harbour, lisbon, sunrise, travel, brochure (scikit-learn's stop words include "describe")
    assert math.isclose(prompt_terms_missed(prompt, "The HARBOUR of lisbon is busy."), 3 / 5)
    assert prompt_terms_missed("Is it on?", "Yes.") == 0.0 and prompt_terms_missed(None, None) == 0.0


def test_degeneration_matrix_rows_follow_their_prompts():
    matrix = degeneration_matrix(["say hi to the team", "unrelated"], ["say hi to the team", "say hi to the team"])
    assert matrix.shape == (2, len(DEGENERATION_FEATURES)) and matrix.dtype == np.float32
    assert matrix[0, 1] == 1.0 and matrix[1, 1] == 0.0
    missed = DEGENERATION_FEATURES.index("prompt_terms_missed")
    assert matrix[0, missed] == 0.0 and matrix[1, missed] == 1.0


def test_filler_around_an_echo_does_not_dilute_its_copy_share():
    prompt, echo = "say hi to the whole team today", "say hi to the whole team today"
    padded = f"{echo}\nMany factors matter and every one deserves careful attention.\nDone it is, all told."
    copy = DEGENERATION_FEATURES.index("prompt_copy_share")
    assert degeneration_matrix([prompt], [padded])[0, copy] < 0.5  # read on the answer, the filler dilutes it
    found = degeneration_matrix([prompt], [padded], [echo])[0]  # the view: the answer without its filler
    assert found[copy] == 1.0
    words = DEGENERATION_FEATURES.index("repeated_word_share")
    assert found[words] == degeneration_matrix([prompt], [padded])[0, words]  # repeats still read the answer

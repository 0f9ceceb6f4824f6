import json
import math

import numpy as np

from usl_assets.crm.features import COUNT_NAMES, FEATURE_NAMES, feature_matrix, response_counts, response_features

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

"""The tests' small TF-IDF scenario tagger (taggers.py) is a real tagger: far above chance on held-out queries."""

import numpy as np

from usl_assets_tests.taggers import TfidfScenarioTagger, scenario_queries


def test_the_test_tagger_tags_held_out_queries_far_above_chance(shared_data_dir):
    tagger = TfidfScenarioTagger(shared_data_dir)
    held_out = [q for q in scenario_queries(shared_data_dir, "test") if q[1] in tagger.group_of]
    predicted = tagger.predict([text for text, _ in held_out])
    accuracy = float(np.mean(predicted["scenario"].to_numpy() == np.array([label for _, label in held_out])))
    assert accuracy > 0.3  # 58 classes: chance is under 0.05
    assert predicted["confidence"].between(0, 1).all()

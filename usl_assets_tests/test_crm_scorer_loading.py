"""The factorized CRM saves its LoRA-merged encoder on first load, so later loads skip peft; both must score
exactly alike."""

import numpy as np

from usl_assets.crm import scorer
from usl_assets.crm.interface import ScoreItem
from usl_assets_tests.test_scoring_support import train_tiny_crm

ITEMS = [ScoreItem("Name a fruit.", "An apple.", ("Answers are brief.",)),
         ScoreItem("Name a fruit.", "Apples are crisp, sweet fruits grown in orchards worldwide; try one.",
                   ("Answers are detailed.",))]


def test_merged_encoder_is_cached_and_scores_like_the_adapter(tmp_path, shared_data_dir):
    checkpoint = train_tiny_crm(shared_data_dir, "minilm", "factorized", tmp_path / "models")
    assert not (checkpoint / scorer.MERGED_ENCODER_DIR).exists()
    first = scorer.load_scorer(checkpoint).score(ITEMS)  # merges the adapter with peft, saves the result
    assert (checkpoint / scorer.MERGED_ENCODER_DIR / "config.json").exists()
    second = scorer.load_scorer(checkpoint).score(ITEMS)  # loads the saved merged encoder
    np.testing.assert_allclose(first, second, rtol=1e-5, atol=1e-6)

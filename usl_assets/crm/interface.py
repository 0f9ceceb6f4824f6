"""What the scoring and leaderboard stages need from a trained CRM, whichever architecture it is.

`usl_assets.crm.checkpoints.load_scorer(checkpoint_dir)` returns a RewardScorer. Rewards are Bradley–Terry logits:
only differences between responses scored under the same criteria mean anything.
"""

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

# What crm_no_criteria sees instead of the user's criteria.
NEUTRAL_CRITERIA = ("The response answers the user's request.",)


def criteria_text(criteria: tuple[str, ...]) -> str:
    """A criteria profile as one text (the factorized encoder's view; the linear CRM's cache key)."""
    return "\n".join(f"* {line}" for line in criteria) if criteria else "* (no criteria)"


@dataclass(frozen=True)
class ScoreItem:
    prompt: str  # the user's query (first user turn; multi-turn context goes in `history`)
    response: str  # the assistant response being scored
    criteria: tuple[str, ...]  # the user's criteria, one per line; empty tuple = no criteria
    history: tuple[tuple[str, str], ...] = field(default=())  # earlier (role, content) turns, if any


class RewardScorer(Protocol):
    checkpoint_id: str  # stable id of the checkpoint (backbone + adapter + training-data hash)
    architecture: str  # "cross" or "factorized"

    def score(self, items: list[ScoreItem], batch_size: int = 16, progress: bool = False) -> np.ndarray:
        """One reward per item, in input order (batched, length-sorted, dynamic padding, inference mode)."""
        ...


class CachedResponseScorer(RewardScorer, Protocol):
    """The factorized CRM: response embeddings are computed once and cached; a new criterion costs one short
    encoder pass plus the head over the cache."""

    def embed_responses(self, prompts: list[str], responses: list[str], batch_size: int = 32) -> np.ndarray:
        """Per response: an embedding row (float32) with its measured features appended; cache these."""
        ...

    def embed_criteria(self, criteria: list[tuple[str, ...]]) -> np.ndarray:
        """One embedding row per criteria profile."""
        ...

    def score_embedded(self, response_rows: np.ndarray, criteria_row: np.ndarray) -> np.ndarray:
        """Rewards of cached response rows under one embedded criteria profile."""
        ...

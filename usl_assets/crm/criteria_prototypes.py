"""Reading a criterion by the training phrasings it is closest to: the second half of the linear CRM's criteria
vector, beside the criterion's own embedding.

The gate W e(c) learned from a few hundred phrasings is a linear map of a 384-dimensional embedding, and a wording
far from all of them ("Answer in at most three sentences.") can land anywhere in it; the ranking reversed for such
wordings. The prototypes read a criterion the way a nearest-neighbour classifier does: for each property direction
(`length:less`, `structure:more`, …) the mean cosine of the criterion's three most similar TRAINING phrasings of
that direction (crm/properties.py, pool `train`: held-out families and new_criteria phrasings are never in the
bank), turned into a soft choice among the directions (softmax at temperature 0.05) and weighed by how well the
best one matches (a logistic ramp around cosine 0.45: a criterion close to no phrasing reads as no property).
A profile of several criteria takes, per direction, its strongest line. The gate sees [e(c), reading(c)], so it
can learn one coefficient shift per property direction, which a new wording reaches as long as its nearest
phrasings mean the same thing.

The bank's embeddings are stored with the checkpoint (`criteria_prototypes.safetensors` + `.json`), so scoring never
re-embeds it and a checkpoint keeps the bank it was trained with.
"""

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

TOP_K = 3
SCALE = 4.0  # the reading's size beside the unit-norm embedding: the gate's L2 penalty makes it cheaper to use
TEMPERATURE = 0.05
MATCH_CENTER, MATCH_WIDTH = 0.45, 0.05
WEIGHTS_FILE, SHAPE_FILE = "criteria_prototypes.safetensors", "criteria_prototypes.json"
# Sentence embeddings hardly see negation ("Don't be brief." sits next to "Be brief."), so a phrasing whose
# polarity differs from the criterion's counts this much less similar.
NEGATION_PENALTY = 0.3
_NEGATION = re.compile(r"\b(?:no|not|never|without|avoid|skip|stop|nothing|none|neither|nor|instead|rather than)\b"
                       r"|n't\b|\bdont\b", re.IGNORECASE)
SETTINGS = {"top_k": TOP_K, "scale": SCALE, "negation_penalty": NEGATION_PENALTY, "temperature": TEMPERATURE, "match_center": MATCH_CENTER, "match_width": MATCH_WIDTH}


def bank_phrasings() -> tuple[list[str], list[str]]:
    """(label per phrasing, phrasing): every property direction's training phrasings."""
    from usl_assets.crm.properties import PROPERTIES

    labels, texts = [], []
    for name, prop in PROPERTIES.items():
        for direction in ("more", "less"):
            for text in prop.phrasings(direction, "train"):
                labels.append(f"{name}:{direction}")
                texts.append(text)
    return labels, texts


def negated(text: str) -> bool:
    return bool(_NEGATION.search(text))


@dataclass
class PrototypeBank:
    labels: list[str]  # per phrasing: "property:direction"
    vectors: np.ndarray  # per phrasing: its L2-normalized embedding
    negations: list[bool]  # per phrasing: whether it is worded as a negation

    @property
    def directions(self) -> list[str]:
        return list(dict.fromkeys(self.labels))

    def read(self, line_vectors: np.ndarray, lines: list[str]) -> np.ndarray:
        """Per criterion line (its text and L2-normalized embedding): a weight per property direction
        (self.directions)."""
        similarity = np.asarray(line_vectors, np.float64) @ self.vectors.T  # lines × phrasings
        differs = np.array([negated(line) for line in lines])[:, None] != np.array(self.negations)[None, :]
        similarity = similarity - NEGATION_PENALTY * differs
        labels = np.array(self.labels)
        means = np.stack([np.sort(similarity[:, labels == d], axis=1)[:, -TOP_K:].mean(axis=1)
                          for d in self.directions], axis=1)  # lines × directions
        best = means.max(axis=1, keepdims=True)
        choice = np.exp((means - best) / TEMPERATURE)
        choice /= choice.sum(axis=1, keepdims=True)
        match = 1.0 / (1.0 + np.exp(-(best - MATCH_CENTER) / MATCH_WIDTH))
        return SCALE * choice * match

    def save(self, folder: Path) -> None:
        from safetensors.numpy import save_file

        save_file({"vectors": np.ascontiguousarray(self.vectors, dtype=np.float32)}, folder / WEIGHTS_FILE)
        (folder / SHAPE_FILE).write_text(json.dumps({"labels": self.labels, "negations": self.negations, **SETTINGS},
                                                    indent=2), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path) -> "PrototypeBank | None":
        if not (folder / WEIGHTS_FILE).exists():
            return None
        from safetensors.numpy import load_file

        shape = json.loads((folder / SHAPE_FILE).read_text(encoding="utf-8"))
        if {k: shape.get(k) for k in SETTINGS} != SETTINGS:
            raise ValueError(f"{folder} reads criteria with other prototype settings: retrain it")
        return cls(shape["labels"], load_file(folder / WEIGHTS_FILE)["vectors"].astype(np.float64), shape["negations"])

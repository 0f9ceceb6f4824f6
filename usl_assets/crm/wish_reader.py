"""Reading a user's wish by a classifier fitted on how people word wishes: the prototype bank's successor for the
wishes (crm/criteria_prototypes.py keeps reading the scenario rubrics' lines).

The bank reads a line by its three nearest training phrasings, and the words (crm/criteria_vocabulary.py) by rules
written one wording at a time; both missed the wordings nobody had tuned them on: the first measure of each blind
set written by a helper who saw no code was 0.67-0.79 (docs/crm.md, runs 32-33), complaints and idioms about half.
The reader is a multinomial logistic regression over the line's sentence embedding, one class per property
direction (on a BERT backbone, the default, over an embedding by the backbone with its upper layers fine-tuned from
that regression: crm/wish_tuning.py), fitted on the training phrasings and on every wording set written apart from
them (`wish_wordings/`: descriptions, complaints, idioms, rhetorical questions, long first-person lines, by seven
helpers). It never sees the held-out families or the new_criteria phrasings (those that repeat one are dropped), so
`criteria_paraphrase` and `leaderboard.criteria_fidelity` still measure wordings it did not fit; `benchmarks/criteria_reading.py` reports
it on them and on an eighth set kept out of everything (`benchmarks/criteria_wordings_blind7.yaml`).

How it combines with the words (PrototypeBank.read_lines): where a wish names a property's words, the words decide
which properties and which way, and the reader weighs the directions they name (a line whose words name two gets
them in proportion to the reader's belief, plus WORDS_FLOOR each, so a combined criterion keeps both); where it
names none, the reader's probabilities, times how closely the line matches any wording it was fitted on (the bank's
logistic ramp), so a line like no wish ("asdf qwerty") still reads as nothing.
"""

import functools
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from usl_assets.crm import wish_tuning

WORDINGS_DIR = Path(__file__).with_name("wish_wordings")
C = 10.0  # inverse L2 strength: chosen by fitting without blind4 and reading it (0.81 at 3, 0.83 at 10 and 30)
WORDS_FLOOR = 0.3  # what each direction the words name keeps whatever the reader believes
# The reader's logits are divided by this: at 1 its belief in the training phrasings that name no property word is
# 0.73 at the median, where the bank (which the gate was designed around) reads them at 0.92; at 0.65, 0.92.
TEMPERATURE = 0.65
TOP_K = 3
MATCH_CENTER, MATCH_WIDTH = 0.45, 0.05  # as the bank's: a line close to no wording reads as nothing
# Below this match a line reads as exactly nothing: keyboard mashing matches 0.01-0.03 and would otherwise read as a
# little of every direction (the reader's belief is flat there), which, emphasized as a wish, moved the reward enough
# that `--explain` stopped warning about it (crm/reading.py NOTHING_RMS); unnamed held-out wishes match 0.66 and more
# (10th percentile), the fitted wordings about 1.
MATCH_FLOOR = 0.1
WEIGHTS_FILE_KEYS = ("reader_coef", "reader_intercept", "reader_vectors")
TUNED_KEY_PREFIX = "reader_tuned."  # the fine-tuned layers' weights (crm/wish_tuning.py) in the bank's file


def _key(text: str) -> str:
    """How wordings are compared: lower-case, whitespace-normalized."""
    return " ".join(text.lower().split())


@functools.cache
def wordings() -> tuple[list[str], list[str]]:
    """(label per wording, wording) of the sets in WORDINGS_DIR, in file order, each a YAML mapping
    "property:direction" -> wordings."""
    labels, texts = [], []
    for path in sorted(WORDINGS_DIR.glob("*.yaml")):
        for direction, lines in yaml.safe_load(path.read_text(encoding="utf-8")).items():
            labels += [direction] * len(lines)
            texts += [str(line) for line in lines]
    return labels, texts


def fitted_on(bank_labels: list[str], bank_texts: list[str]) -> tuple[list[str], list[str]]:
    """What the reader is fitted on: the bank's phrasings, then the wording sets', without any that repeats a
    held-out family's or new_criteria phrasing (compared lower-case, whitespace-normalized) or an earlier line."""
    from usl_assets.crm.properties import PROPERTIES

    kept_out = {_key(text) for prop in PROPERTIES.values() for direction in ("more", "less")
                for pool in ("paraphrase", "new_criteria") for text in prop.phrasings(direction, pool)}
    labels, texts, seen = [], [], set(kept_out)
    set_labels, set_texts = wordings()
    for label, text in zip([*bank_labels, *set_labels], [*bank_texts, *set_texts]):
        if (key := _key(text)) not in seen:
            seen.add(key)
            labels.append(label)
            texts.append(text)
    return labels, texts


@dataclass
class WishReader:
    directions: list[str]  # the classes, in the bank's direction order
    coef: np.ndarray  # directions × embedding
    intercept: np.ndarray  # directions
    vectors: np.ndarray  # the L2-normalized embeddings of what it was fitted on (for `match`)
    # Its own encoder's fine-tuned layers (crm/wish_tuning.py; None: it reads the criteria encoder's embedding)
    tuned: dict[str, np.ndarray] | None = None
    folder: Path | None = None  # the backbone the tuned layers belong to (set by `attach`)
    _encoder: object = field(default=None, repr=False, compare=False)
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def fit(cls, directions: list[str], labels: list[str], vectors: np.ndarray, texts: list[str] | None = None,
            folder: Path | None = None, log=print) -> "WishReader":
        """A logistic regression over the wordings' embeddings (`vectors`); with `texts` and a BERT backbone's
        `folder`, then the backbone's upper layers fine-tuned from it (crm/wish_tuning.py)."""
        from sklearn.linear_model import LogisticRegression

        model = LogisticRegression(C=C, max_iter=5000).fit(np.asarray(vectors, np.float64), labels)
        order = [list(model.classes_).index(d) for d in directions]  # every direction has wordings
        reader = cls(list(directions), model.coef_[order], model.intercept_[order], np.asarray(vectors, np.float64))
        if texts is not None and folder is not None:
            reader.tuned, reader.coef, reader.intercept = wish_tuning.tune(
                folder, reader.directions, list(labels), list(texts), reader.coef, reader.intercept, log)
            reader.attach(folder)
        return reader

    def attach(self, folder: Path) -> "WishReader":
        """Give a tuned reader its backbone (the frozen layers its tuned ones sit on)."""
        self.folder = Path(folder)
        if self.tuned is not None:
            from usl_assets.crm.numpy_encoder import NumpyBertEncoder

            self._encoder = NumpyBertEncoder(self.folder, wish_tuning.MAX_LENGTH, self.tuned)
        return self

    def reading_vectors(self, lines: list[str], line_vectors: np.ndarray) -> np.ndarray:
        """What the reader reads of each line: its own encoder's embedding where it is tuned, else `line_vectors`
        (the criteria encoder's)."""
        if self.tuned is None:
            return np.asarray(line_vectors, np.float64)
        if self._encoder is None:
            raise ValueError("a tuned wish reader needs its backbone: call attach(folder)")
        missing = list(dict.fromkeys(line for line in lines if line not in self._cache))
        if missing:
            self._cache.update(zip(missing, self._encoder.embed(missing).astype(np.float64)))
        return np.stack([self._cache[line] for line in lines])

    def belief(self, lines: list[str], line_vectors: np.ndarray) -> np.ndarray:
        """lines × directions: the reader's belief in each line (line_vectors: the criteria encoder's)."""
        return self.probabilities(self.reading_vectors(lines, line_vectors))

    def probabilities(self, reading_vectors: np.ndarray) -> np.ndarray:
        """lines × directions: the reader's belief, summing to 1 per line, from `reading_vectors`."""
        logits = (np.asarray(reading_vectors, np.float64) @ self.coef.T + self.intercept) / TEMPERATURE
        logits -= logits.max(axis=1, keepdims=True)
        belief = np.exp(logits)
        return belief / belief.sum(axis=1, keepdims=True)

    def match(self, line_vectors: np.ndarray) -> np.ndarray:
        """Per line, 0-1: how closely it matches the wordings fitted on (mean cosine of its TOP_K nearest, ramped)."""
        similarity = np.sort(np.asarray(line_vectors, np.float64) @ self.vectors.T, axis=1)[:, -TOP_K:].mean(axis=1)
        ramp = 1.0 / (1.0 + np.exp(-(similarity - MATCH_CENTER) / MATCH_WIDTH))
        return np.where(ramp < MATCH_FLOOR, 0.0, ramp)

    def weigh_named(self, named: np.ndarray, line: str, line_vector: np.ndarray) -> np.ndarray:
        """The words' reading (per direction, ≥ 0) reweighed by the reader's belief, same total."""
        belief = self.belief([line], line_vector[None, :])[0]
        weighed = np.where(named > 0, named * (belief + WORDS_FLOOR), 0.0)
        return weighed * (named.sum() / weighed.sum())

    def without(self, bank_labels: list[str], bank_texts: list[str], left_out: list[str]) -> "WishReader":
        """This reader fitted again on what it was fitted on (`fitted_on` of the same bank) less the wordings
        `left_out`: what it reads of a wording set it never saw (benchmarks/criteria_fidelity_dev.py
        --leave-one-set-out). Refits on the stored vectors, so nothing is embedded again; a tuned reader is
        fine-tuned again (a minute or two)."""
        labels, texts = fitted_on(bank_labels, bank_texts)
        if len(texts) != len(self.vectors):
            raise ValueError(f"the reader was fitted on {len(self.vectors)} wordings, this bank and wish_wordings/ "
                             f"give {len(texts)}: refit it from the same checkpoint's bank")
        out = {_key(text) for text in left_out}
        keep = np.array([_key(text) not in out for text in texts])
        return WishReader.fit(self.directions, [label for label, kept in zip(labels, keep) if kept],
                              self.vectors[keep], [text for text, kept in zip(texts, keep) if kept]
                              if self.tuned is not None else None, self.folder if self.tuned is not None else None)

    def arrays(self) -> dict[str, np.ndarray]:
        tuned = {TUNED_KEY_PREFIX + name: value for name, value in (self.tuned or {}).items()}
        return {**dict(zip(WEIGHTS_FILE_KEYS, (self.coef, self.intercept, self.vectors))), **tuned}

    @classmethod
    def from_arrays(cls, directions: list[str], arrays: dict[str, np.ndarray]) -> "WishReader | None":
        if not all(key in arrays for key in WEIGHTS_FILE_KEYS):
            return None
        coef, intercept, vectors = (np.asarray(arrays[key], np.float64) for key in WEIGHTS_FILE_KEYS)
        tuned = {key.removeprefix(TUNED_KEY_PREFIX): np.asarray(value, np.float32) for key, value in arrays.items()
                 if key.startswith(TUNED_KEY_PREFIX)}
        return cls(list(directions), coef, intercept, vectors, tuned or None)


# In the checkpoint id (criteria_prototypes.SETTINGS): the wordings and the fit's settings.
VERSION = hashlib.sha256(repr([C, WORDS_FLOOR, TEMPERATURE, TOP_K, MATCH_CENTER, MATCH_WIDTH, MATCH_FLOOR, wordings(),
                               wish_tuning.SETTINGS]).encode()).hexdigest()[:12]

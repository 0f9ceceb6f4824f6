"""The fitted linear CRM (crm/linear.py fits it): its weights, how they score response rows, their files, and one
scoring rule, the wish focus: under a user's wish the wish decides (docs/crm.md, run 31).

Where two answers tie in what a wish asks for (neither uses bold, neither asks a question), the rest of the reward
decides, and on a pool where the property is rare that rest outvotes the wish: MT-Bench's custom leaderboard under
"I find bolded keywords very helpful" ranked by the CRM's own taste, not by bold. So under a wish read at
strength s (`WishFocus.strength`: 0 without a wish, 1 for a wish read fully) scoring counts

    r = (1 − s) · (u·h(a) + rest(c)·f(p, a))  +  wish(c)·f(p, a)  +  cost · s · min(0, substance + margin)

with wish(c) the coefficients the wish's reading gives (its property's measured columns only) and rest(c) the
others: the n-gram score and every other term yield to the wish as it grows. The substance terms
(linear_constraints.SUBSTANCE_FEATURES: does the answer fit its prompt, repeat itself, copy or miss the prompt) count
again as a one-sided floor, so an answer that does not answer (off-topic, echoed, generic) still loses `cost` times
what it lacks below `margin` (reward units under the average training answer's substance terms, which
standardization puts at 0). Criteria with no wish (every default leaderboard, a scenario rubric) score exactly as
without the rule. margin 0.5 and cost 3 were chosen on the dev measures (the blind wishes of
benchmarks/probes_under_wishes.py and the probes' places under them), not on the held-out phrasings.

Only the wish directions the checkpoint has training rows for count in s (`WishFocus.untrained` lists the others):
a wish read as a property this CRM never learned (a held-out one, splits.heldout_properties) has no wish(c) of its
own, so under s = 1 the substance floor alone ranked it (docs/crm.md, run 37).
"""

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from usl_assets.crm import criteria_prototypes
from usl_assets.crm.graded_answers import GradedAnswers
from usl_assets.crm.linear_constraints import SUBSTANCE_FEATURES
from usl_assets.crm.linear_rows import GRADED_COLUMN, ROW_FEATURES, graded_matrix, ngram_matrix, raw_features
from usl_assets.settings import StaleCheckpoint

WEIGHTS_FILE = "linear.safetensors"
SHAPE_FILE = "linear.json"


@dataclass(frozen=True)
class WishFocus:
    wish_columns: int  # the criteria vector's last columns: the wishes' half of the reading
    full: float  # the sum of those columns for one wish read at full strength
    margin: float = 0.5
    cost: float = 3.0
    untrained: tuple[int, ...] = ()  # positions among the wish columns of directions with no training rows

    def __post_init__(self):
        object.__setattr__(self, "untrained", tuple(int(i) for i in self.untrained))  # a list when read from JSON

    def wishes(self, criteria_vector: np.ndarray) -> np.ndarray:
        """The criteria vector's wish half."""
        return np.asarray(criteria_vector, np.float64).reshape(-1)[-self.wish_columns:]

    def strength(self, criteria_vector: np.ndarray) -> float:
        return float(np.clip(np.delete(self.wishes(criteria_vector), self.untrained).sum() / self.full, 0.0, 1.0))

    def unlearned(self, criteria_vector: np.ndarray, directions: list[str]) -> list[str]:
        """The untrained directions (of `directions`, the wish columns' labels) a criterion is read as, where they
        carry most of its wish reading and at least a quarter of a full wish's; else []."""
        wishes = self.wishes(criteria_vector)
        untrained = wishes[list(self.untrained)]
        if not len(untrained) or untrained.sum() < max(0.5 * wishes.sum(), 0.25 * self.full):
            return []
        return [directions[i] for i in self.untrained if wishes[i] >= 0.25 * untrained.sum()]


def for_reading(reading_columns: list[str] | None, margin: float, cost: float,
                trained: set[str] | None = None) -> WishFocus | None:
    """The focus of a CRM whose criteria vectors end in `reading_columns` (None where they carry no wish half);
    `trained`: the directions ("length:less") with training rows (None: every one counts)."""
    wishes = [label.removeprefix(criteria_prototypes.WISH) for label in reading_columns or ()
              if label.startswith(criteria_prototypes.WISH)]
    if not wishes:
        return None
    untrained = () if trained is None else tuple(i for i, label in enumerate(wishes) if label not in trained)
    return WishFocus(len(wishes), criteria_prototypes.SCALE * criteria_prototypes.EMPHASIS, margin, cost, untrained)


def focused_coefficients(weights: "LinearWeights", criteria_vector: np.ndarray,
                         strength: float) -> tuple[np.ndarray, np.ndarray]:
    """Under a wish of `strength`: (the coefficients scoring applies, the rest's). The wishes' reading gives its own
    (nonzero on their properties' measured columns only), the rest of the criteria vector, base included, the
    others; the applied ones are the wishes' plus (1 − strength) times the rest's."""
    vector = np.asarray(criteria_vector, np.float64).reshape(-1)
    wish = np.zeros_like(vector)
    wish[-weights.focus.wish_columns:] = vector[-weights.focus.wish_columns:]
    rest = weights.v + weights.gate @ (vector - wish)
    return (1.0 - strength) * rest + weights.gate @ wish, rest


def focused_terms(weights: "LinearWeights", rows: np.ndarray, criteria_vector: np.ndarray,
                  strength: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(n-gram score, per-feature contributions, substance shortfall) of response rows under one criteria vector
    with a wish of `strength` > 0: they sum to the reward."""
    coefficients, rest = focused_coefficients(weights, criteria_vector, strength)
    scaled = weights.scaled_features(rows)
    substance = np.array([ROW_FEATURES[column] in SUBSTANCE_FEATURES for column in weights.columns])
    shortfall = np.minimum(0.0, scaled[:, substance] @ rest[substance] + weights.focus.margin)
    return ((1.0 - strength) * rows[:, 0].astype(np.float64), scaled * coefficients,
            weights.focus.cost * strength * shortfall)


@dataclass
class LinearWeights:
    u: np.ndarray  # N_BUCKETS (zeros without n-grams)
    v: np.ndarray  # len(columns)
    gate: np.ndarray  # len(columns) × criteria dim
    feature_mean: np.ndarray
    feature_std: np.ndarray
    columns: list[int]
    beta: float = 0.0  # the AI judge's length coefficient, β's first term (not part of the reward)
    graded: GradedAnswers | None = None
    supported_view: bool = False  # LinearConfig.supported_view at training
    common: frozenset = frozenset()  # the training answers' common stems (relevance.common_stems)
    graded_folder: Path | None = None  # a loaded checkpoint's folder: its graded answers are read when first needed
    focus: WishFocus | None = None  # under a wish the wish decides (module docstring); None: no such rule

    def graded_answers(self) -> GradedAnswers | None:
        """The graded answers, read from the checkpoint on first use (a row cached by scoring never needs them, so
        a new criterion on the command line does not pay for reading them)."""
        if self.graded is None and self.graded_folder is not None:
            self.graded, self.graded_folder = GradedAnswers.load(self.graded_folder), None
        return self.graded

    def response_rows(self, prompts: list[str], responses: list[str]) -> np.ndarray:
        """Per response: [u·h(a), then ROW_FEATURES raw] (float32): what scoring caches."""
        graded_answers = self.graded_answers() if GRADED_COLUMN in self.columns else None
        graded = graded_matrix(graded_answers, prompts, responses)
        features, views = raw_features(prompts, responses, graded, self.supported_view, self.common)
        ngram = ngram_matrix(views) @ self.u if np.any(self.u) else np.zeros(len(responses))
        return np.concatenate([np.asarray(ngram, np.float64).reshape(-1, 1), features], axis=1).astype(np.float32)

    def scaled_features(self, rows: np.ndarray) -> np.ndarray:
        """The standardized features f(p, a) of response rows ([n-gram score, ROW_FEATURES raw])."""
        return (rows[:, 1:][:, self.columns].astype(np.float64) - self.feature_mean) / self.feature_std

    def coefficients(self, criteria_vector: np.ndarray) -> np.ndarray:
        """v + W e(c): each standardized feature's coefficient under one criteria vector."""
        return self.v + self.gate @ np.asarray(criteria_vector, np.float64)

    def wish_strength(self, criteria_vector: np.ndarray) -> float:
        """How strongly the criteria carry a wish that takes the rest of the reward's place (0 without a focus)."""
        return self.focus.strength(criteria_vector) if self.focus is not None else 0.0

    def scoring_coefficients(self, criteria_vector: np.ndarray) -> np.ndarray:
        """Each standardized feature's coefficient as scoring applies it: v + W e(c), and under a wish of strength
        s the wish's own plus (1 − s) times the rest (the substance floor aside)."""
        strength = self.wish_strength(criteria_vector)
        if strength == 0:
            return self.coefficients(criteria_vector)
        return focused_coefficients(self, criteria_vector, strength)[0]

    def reward_terms(self, rows: np.ndarray, criteria_vector: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(n-gram score, per-feature contributions, substance shortfall under a wish) per response: they sum to
        the reward."""
        strength = self.wish_strength(criteria_vector)
        if strength > 0:
            return focused_terms(self, rows, criteria_vector, strength)
        return (rows[:, 0].astype(np.float64), self.scaled_features(rows) * self.coefficients(criteria_vector),
                np.zeros(len(rows)))

    def score_rows(self, rows: np.ndarray, criteria_vector: np.ndarray) -> np.ndarray:
        strength = self.wish_strength(criteria_vector)
        if strength > 0:
            ngram, contributions, shortfall = focused_terms(self, rows, criteria_vector, strength)
            return (ngram + contributions.sum(axis=1) + shortfall).astype(np.float32)
        scaled, coefficients = self.scaled_features(rows), self.coefficients(criteria_vector)
        return (rows[:, 0].astype(np.float64) + scaled @ coefficients).astype(np.float32)

    def save(self, folder: Path, extra: dict) -> None:
        from safetensors.numpy import save_file

        tensors = {name: np.ascontiguousarray(getattr(self, name), dtype=np.float32)
                   for name in ("u", "v", "gate", "feature_mean", "feature_std")}
        save_file(tensors, folder / WEIGHTS_FILE)
        if GRADED_COLUMN in self.columns and self.graded_answers() is not None:
            self.graded.save(folder)
        shape = {"columns": self.columns, "feature_names": [ROW_FEATURES[c] for c in self.columns], "beta": self.beta,
                 "supported_view": self.supported_view, "common_stems": sorted(self.common),
                 "wish_focus": asdict(self.focus) if self.focus is not None else None}
        (folder / SHAPE_FILE).write_text(json.dumps({**shape, **extra}, indent=2), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path) -> "LinearWeights":
        from safetensors.numpy import load_file

        tensors = load_file(folder / WEIGHTS_FILE)
        shape = json.loads((folder / SHAPE_FILE).read_text(encoding="utf-8"))
        saved = shape.get("feature_names")
        if saved is not None and saved != [ROW_FEATURES[c] for c in shape["columns"]]:
            raise StaleCheckpoint(f"{folder} was trained on another feature layout ({', '.join(saved)}): retrain it "
                                  "(`usl run`, or `make run`)")
        focus = shape.get("wish_focus")
        unknown = sorted(set(focus or {}) - {field.name for field in fields(WishFocus)})
        if unknown:
            raise StaleCheckpoint(f"{folder} was trained with a wish focus this code does not know ({', '.join(unknown)}):"
                                  " retrain it (`usl run`, or `make run`)")
        return cls(**{k: v.astype(np.float64) for k, v in tensors.items()}, columns=shape["columns"],
                   beta=shape["beta"], graded=None, graded_folder=folder,
                   supported_view=shape.get("supported_view", False),
                   common=frozenset(shape.get("common_stems", ())),
                   focus=WishFocus(**focus) if focus else None)

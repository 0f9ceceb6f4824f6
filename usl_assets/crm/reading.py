"""How the criteria were read: what a linear CRM's criteria gate does to the reward's weight on each measurable
property (length, structure, code…), so a user sees whether "Be brief." was understood before trusting a ranking.

The linear CRM's reward is r(c, p, a) = u·h(a) + (v + W e(c))·f(p, a) (crm/linear.py): criteria c reach the
reward only through coef(c) = v + W e(c), one coefficient per standardized feature. For each property (its
features: properties.PROPERTY_FEATURES, kept to the features the checkpoint has)

    shift(c) = Σ over the property's features of (coef(c) − coef(neutral)),   neutral = interface.NEUTRAL_CRITERIA

is how much more (or less) the reward pays for one standard deviation more of each of those features than under
neutral criteria. Every text shifts it, though (W is linear in a sentence embedding): on linear CRMs trained on
real slices, unrelated sentences ("Paris is the capital of France.") pulled about three quarters as hard as trained
criteria, and mostly one way (structure down, even for "Use bullet points."). So the arrows read a shift against
two references taken from the checkpoint itself, once per scorer (reference_scale):
- UNRELATED_TEXTS, sentences no criterion means: their median shift is "unchanged", their spread the noise; a
  shift within NOISE_Z robust standard deviations of that median is "·";
- the property's training phrasings (properties.py, pool `train`): half the gap between the median shift of its
  "more" and of its "less" phrasings is its level: "↑↑"/"↓↓" from STRONG levels (and twice the "↑" threshold),
  "↑"/"↓" from WEAK levels. A property whose level is under LEARNED_Z noise units is one this CRM does not
  tell apart: "?", whatever the criteria.
UNTIED_PROPERTIES (prompt relevance) have no phrasings: their level is the median distance of all phrasings.

Warnings: a criterion that moves no property and whose whole pull is about as far from the unrelated sentences'
as theirs are from each other (`distinctness` under NOTHING_RMS) is read as almost nothing; two criteria that move
one property in opposite directions partly cancel out in the set (a set is embedded as the normalized mean of its
criteria). Other architectures get a reading that says it is not available.
"""

import hashlib
import json
import os
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from usl_assets.crm import criteria_vocabulary
from usl_assets.crm import properties as property_rules
from usl_assets.crm.linear_rows import ROW_FEATURES
from usl_assets.crm.interface import NEUTRAL_CRITERIA

UP2, UP, SAME, DOWN, DOWN2, UNKNOWN = "↑↑", "↑", "·", "↓", "↓↓", "?"
# Of a property's level: ↑↑ from three quarters of it (a typical trained phrasing of the property reads ↑↑, a
# set of two criteria that each say it fully — each at 1/√2 in their normalized mean — reads ↑), ↑ from half that.
STRONG, WEAK = 0.75, 0.375
NOISE_Z = 2.5  # robust standard deviations of the unrelated sentences' shifts: nearer their median is "·"
LEARNED_Z = 1.0  # a property whose level is under this many of them is not learned: "?"
# A criterion that moves no property and whose pull is, in root mean square over the coefficients, within this many
# robust standard deviations of the unrelated sentences' is read as almost nothing. Measured on linear CRMs trained
# on real slices (60-150 L-BFGS iterations): 47 keyboard mashings and other unrelated sentences 0.8-1.5 (10th-90th
# percentile), Auto-J's 331 criteria 2.4-3.9, 16 short criteria ("Be brief.", "Include code.") 1.0-3.0; with
# NOISE_Z 2.5 the warning took 65-90% of the former, none of Auto-J's, and 1-3 of the short ones ("Be funny.",
# "Stay on topic.": nothing the CRM measures moved).
NOTHING_RMS = 1.5
# A criterion more than half of whose characters are markup (HTML tags, entities) is no wish, however far its odd
# embedding lands from the unrelated sentences'.
MAX_MARKUP_SHARE = 0.5
MAX_PHRASINGS = 16  # per property and direction (evenly spaced over the train pool), to bound the embedding
ROBUST_SD = 1.4826  # median absolute deviation -> standard deviation (normal data)
# Sentences no criterion means: what "a criterion about something else" does to each property.
UNRELATED_TEXTS = (
    "Paris is the capital of France.", "The meeting moved to Tuesday afternoon.", "The cat sat on the mat.",
    "Bananas are rich in potassium.", "Water boils at 100 degrees Celsius at sea level.",
    "She bought a red bicycle yesterday.", "The train leaves from platform nine.", "Mountains are tall.",
    "My neighbour plays the violin on Sundays.", "The library closes at eight.", "It rained all week in Lisbon.",
    "Penguins live in the southern hemisphere.", "hello world", "lorem ipsum dolor sit amet",
    "asdf qwerty zxcv", "xkcd zzz blorp", "@@##!!", "12345 67890", "<p>foo</p>", "ok",
    "The quick brown fox jumps over the lazy dog.", "Tomatoes are technically fruit.",
    "The parking lot is full.", "A triangle has three sides.",
)
# Properties no phrasing trains, shown when the checkpoint has features whose name contains one of the fragments
# (features that all measure more of the property, so their coefficients add up).
UNTIED_PROPERTIES = {"relevance": ("prompt_fit", "graded_best_match")}
TIED, UNTIED = "criteria", "not tied to a criterion"


@dataclass
class CriteriaReading:
    """`table`: one row per property — property, kind (TIED or UNTIED), features, shift (against neutral
    criteria), position (the shift from the unrelated sentences' median, in levels: +1 as far as a typical "more"
    phrasing), arrow, learned; then criterion_<i>_shift and criterion_<i>_arrow per criterion (i from 1, in
    `criteria` order) when there are several. `warnings`: one line each."""

    criteria: list[str]
    table: pd.DataFrame
    warnings: list[str] = field(default_factory=list)
    available: bool = True
    note: str = ""  # why there is nothing to read (another architecture, no criteria)
    distinctness: dict[str, float] = field(default_factory=dict)  # criterion -> distinctness() of its pull
    rest_share: float = 1.0  # what the rest of the reward counts beside the wishes (crm/linear_weights.py)

    def arrows(self, criterion: str | None = None) -> dict[str, str]:
        """property -> arrow, for the whole set or one of the criteria."""
        if self.table.empty:
            return {}
        column = ("arrow" if criterion is None or len(self.criteria) == 1
                  else f"criterion_{self.criteria.index(criterion) + 1}_arrow")
        return dict(zip(self.table["property"], self.table[column]))


@dataclass(frozen=True)
class Reference:
    """What a checkpoint does with unrelated sentences and with its training phrasings (module docstring)."""

    neutral: np.ndarray  # e(neutral)
    groups: dict[str, tuple[int, ...]]  # property -> positions in the checkpoint's coefficient vector
    kinds: dict[str, str]
    center: dict[str, float]  # the unrelated sentences' median shift
    noise: dict[str, float]  # their robust standard deviation
    level: dict[str, float]  # the ↑↑ level
    coef_center: np.ndarray  # per coefficient: the unrelated sentences' median pull
    coef_noise: np.ndarray  # and its robust standard deviation

    def learned(self, prop: str) -> bool:
        return self.level[prop] > 0 and self.level[prop] >= LEARNED_Z * self.noise[prop]


_references: "weakref.WeakKeyDictionary[object, Reference]" = weakref.WeakKeyDictionary()
_references_lock = threading.Lock()


def property_features() -> dict[str, tuple[str, ...]]:
    """property -> its feature names (properties.PROPERTY_FEATURES)."""
    return {name: tuple(property_rules.PROPERTY_FEATURES[name]) for name in property_rules.PROPERTIES}


def property_groups(columns: list[int]) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
    """property -> positions (in the coefficient vector) of its features that the checkpoint has, and its kind.
    A property none of whose features the checkpoint has is left out."""
    names = [ROW_FEATURES[c] if 0 <= c < len(ROW_FEATURES) else "" for c in columns]
    position = {name: i for i, name in enumerate(names) if name}
    groups, kinds = {}, {}
    for prop, features in property_features().items():
        found = tuple(position[f] for f in features if f in position)
        if found:
            groups[prop], kinds[prop] = found, TIED
    claimed = {i for found in groups.values() for i in found}
    for prop, fragments in UNTIED_PROPERTIES.items():
        found = tuple(i for i, name in enumerate(names)
                      if any(fragment in name for fragment in fragments) and i not in claimed)
        if found:
            groups[prop], kinds[prop] = found, UNTIED
    return groups, kinds


def training_phrasings(prop: str, direction: str) -> list[str]:
    """The property's train-pool phrasings of one direction (at most MAX_PHRASINGS, evenly spaced)."""
    spec = property_rules.PROPERTIES[prop]
    try:
        texts = list(spec.phrasings(direction, "train"))
    except TypeError:  # phrasings without pools
        texts = list(spec.phrasings(direction))
    if len(texts) > MAX_PHRASINGS:
        texts = [texts[i] for i in np.linspace(0, len(texts) - 1, MAX_PHRASINGS).round().astype(int)]
    return texts


def is_readable(scorer) -> bool:
    weights = getattr(scorer, "weights", None)
    return (getattr(scorer, "architecture", None) == "linear" and hasattr(scorer, "encoder")
            and hasattr(weights, "gate") and hasattr(weights, "columns"))


def _embedded(scorer, profiles: list[tuple[str, ...]]) -> np.ndarray:
    if not profiles:
        return np.zeros((0, scorer.weights.gate.shape[1]))
    return np.asarray(scorer.encoder.embed(profiles), np.float64)


def _pulls(scorer, vectors: np.ndarray, neutral: np.ndarray) -> np.ndarray:
    """coef(profile) − coef(neutral) per profile (rows × coefficients), as scoring applies them
    (LinearWeights.scoring_coefficients): W (e(profile) − e(neutral)), or under a wish the wish focus's."""
    weights = scorer.weights
    if not len(vectors):
        return np.zeros((0, len(weights.columns)))
    return np.stack([weights.scoring_coefficients(v) for v in vectors]) - weights.scoring_coefficients(neutral)


def _shifts(pulls: np.ndarray, groups: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    return {prop: pulls[:, list(found)].sum(axis=1) for prop, found in groups.items()}


def _robust(values: np.ndarray, axis=0) -> tuple[np.ndarray, np.ndarray]:
    center = np.median(values, axis=axis)
    return center, ROBUST_SD * np.median(np.abs(values - center), axis=axis)


def reference_scale(scorer, cache_dir: Path | None = None) -> Reference:
    """The checkpoint's references, computed once per scorer (embeds the unrelated sentences and phrasings);
    with `cache_dir`, kept there as JSON across processes (the CLI), keyed by everything they are computed from."""
    with _references_lock:
        if scorer in _references:
            return _references[scorer]
        path = cache_dir / f"reading_reference_{_reference_key(scorer)}.json" \
            if cache_dir is not None and getattr(scorer, "checkpoint_id", "") else None
        found = _load_reference(path) if path is not None and path.exists() else None
        if found is None:
            found = _compute_reference(scorer)
            if path is not None:
                _save_reference(found, path)
        _references[scorer] = found
        return found


def _compute_reference(scorer) -> Reference:
    neutral = np.asarray(scorer.encoder.embed([NEUTRAL_CRITERIA])[0], np.float64)
    groups, kinds = property_groups(list(scorer.weights.columns))
    unrelated = _pulls(scorer, _embedded(scorer, [(text,) for text in UNRELATED_TEXTS]), neutral)
    phrasings = _all_training_phrasings()
    keys = [key for key, texts in phrasings.items() for _ in texts]
    phrased = _shifts(_pulls(scorer, _embedded(scorer, [(t,) for texts in phrasings.values() for t in texts]),
                             neutral), groups)
    center, noise, level = {}, {}, {}
    for prop, values in _shifts(unrelated, groups).items():
        mid, spread = _robust(values)
        center[prop], noise[prop] = float(mid), float(spread)
        more = [s for s, key in zip(phrased[prop], keys) if key == (prop, "more")]
        less = [s for s, key in zip(phrased[prop], keys) if key == (prop, "less")]
        if kinds[prop] == TIED and more and less:
            level[prop] = float(max(np.median(more) - np.median(less), 0.0) / 2)
        else:
            level[prop] = float(np.median(np.abs(phrased[prop] - mid))) if len(keys) else 0.0
    coef_center, coef_noise = _robust(unrelated)
    return Reference(neutral, groups, kinds, center, noise, level, coef_center, coef_noise)


def _all_training_phrasings() -> dict[tuple[str, str], list[str]]:
    return {(prop, d): training_phrasings(prop, d) for prop in property_rules.PROPERTIES for d in ("more", "less")}


def _reference_key(scorer) -> str:
    """A hash of what _compute_reference reads: the checkpoint, the texts it embeds, the property groups."""
    parts = [scorer.checkpoint_id, json.dumps(NEUTRAL_CRITERIA), *UNRELATED_TEXTS,
             json.dumps(property_groups(list(scorer.weights.columns)), sort_keys=True),
             json.dumps([[*key, *texts] for key, texts in _all_training_phrasings().items()])]
    return hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()[:20]


def _save_reference(found: Reference, path: Path) -> None:
    record = {name: value.tolist() if isinstance(value, np.ndarray) else value
              for name, value in vars(found).items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    partial.write_text(json.dumps(record), encoding="utf-8")
    partial.replace(path)


def _load_reference(path: Path) -> Reference | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        return Reference(np.asarray(record["neutral"], np.float64),
                         {prop: tuple(found) for prop, found in record["groups"].items()}, record["kinds"],
                         record["center"], record["noise"], record["level"],
                         np.asarray(record["coef_center"], np.float64), np.asarray(record["coef_noise"], np.float64))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # unreadable: computed again and rewritten


def thresholds(reference: Reference, prop: str) -> tuple[float, float]:
    """How far from the unrelated sentences' median a shift must be for one arrow and for two."""
    one = max(WEAK * reference.level[prop], NOISE_Z * reference.noise[prop])
    return one, max(STRONG * reference.level[prop], 2 * one)


def arrow(reference: Reference, prop: str, shift: float) -> str:
    """The arrow of a property's shift (module docstring)."""
    if not reference.learned(prop):
        return UNKNOWN
    moved = shift - reference.center[prop]
    one, two = thresholds(reference, prop)
    if not np.isfinite(moved) or abs(moved) < one:
        return SAME
    if abs(moved) >= two:
        return UP2 if moved > 0 else DOWN2
    return UP if moved > 0 else DOWN


def clean_criteria(criteria: list[str]) -> list[str]:
    """The criteria as scoring reads them (whitespace-normalized, blank lines dropped)."""
    return [" ".join(str(line).split()) for line in criteria if str(line).strip()]


def _empty_table() -> pd.DataFrame:
    return pd.DataFrame(columns=["property", "kind", "features", "shift", "position", "arrow", "learned"])


def read_criteria(scorer, criteria: list[str], cache_dir: Path | None = None) -> CriteriaReading:
    """How `scorer` (a linear CRM) reads `criteria`, as a whole and one by one (module docstring); `cache_dir`: where
    the checkpoint's references are kept between processes (reference_scale)."""
    lines = clean_criteria(criteria)
    if not is_readable(scorer):
        architecture = getattr(scorer, "architecture", type(scorer).__name__)
        return CriteriaReading(lines, _empty_table(), available=False,
                               note=f"the reading of criteria needs the linear CRM; this checkpoint is {architecture}")
    if not lines:
        return CriteriaReading(lines, _empty_table(), note="no criteria given: nothing to read")
    ref = reference_scale(scorer, cache_dir)
    singles = list(dict.fromkeys(lines))
    vectors = _embedded(scorer, [tuple(lines), *[(line,) for line in singles]])
    pulls = _pulls(scorer, vectors, ref.neutral)
    shifts = _shifts(pulls, ref.groups)
    names = [ROW_FEATURES[c] for c in scorer.weights.columns]
    props = list(ref.groups)
    table = pd.DataFrame({
        "property": props, "kind": [ref.kinds[p] for p in props],
        "features": [", ".join(names[i] for i in ref.groups[p]) for p in props],
        "shift": [float(shifts[p][0]) for p in props],
        "position": [float((shifts[p][0] - ref.center[p]) / ref.level[p]) if ref.level[p] > 0 else 0.0
                     for p in props],
        "arrow": [arrow(ref, p, shifts[p][0]) for p in props],
        "learned": [ref.learned(p) for p in props]})
    if len(singles) > 1:
        for i in range(len(singles)):
            table[f"criterion_{i + 1}_shift"] = [float(shifts[p][i + 1]) for p in props]
            table[f"criterion_{i + 1}_arrow"] = [arrow(ref, p, shifts[p][i + 1]) for p in props]
    single_arrows = {line: {p: arrow(ref, p, shifts[p][i + 1]) for p in props} for i, line in enumerate(singles)}
    distinct = {line: distinctness(ref, pulls[i + 1]) for i, line in enumerate(singles)}
    warnings = []
    if not any(ref.learned(p) for p in props if ref.kinds[p] == TIED):
        warnings.append("this CRM does not tell apart the 'more' and 'less' phrasings of any property: its reading "
                        "of criteria cannot be shown")
    for line in singles:
        flat = all(a in (SAME, UNKNOWN) for a in single_arrows[line].values())
        if flat and criteria_vocabulary.markup_share(line) > MAX_MARKUP_SHARE:
            warnings.append(f"criterion '{line}' is mostly markup, not words, and moves no property the CRM "
                            "measures: write what you want from an answer in words")
        elif flat and distinct[line] < NOTHING_RMS:
            warnings.append(f"criterion '{line}' is read as almost nothing (it moves the reward no more than an "
                            "unrelated sentence does): the CRM cannot measure it; rephrase it")
    warnings += _conflicts(singles, single_arrows, ref)
    focus = scorer.weights.focus
    unlearned = {line: focus.unlearned(v, scorer.encoder.bank.directions) if focus else []
                 for line, v in zip(singles, vectors[1:])}
    warnings += [f"criterion '{line}' is read as a wish for {' and '.join(named)}, which this CRM has no training rows "
                 "for: the ranking follows the rest of its judgment, not that property"
                 for line, named in unlearned.items() if named]
    rest = 1.0 - scorer.weights.wish_strength(vectors[0])
    return CriteriaReading(singles, table, warnings, distinctness=distinct, rest_share=rest)


def distinctness(reference: Reference, pull: np.ndarray) -> float:
    """Root mean square, over the coefficients, of the pull's distance from the unrelated sentences' median in
    their robust standard deviations: about 1 for an unrelated sentence, 2-4 for criteria the CRM reads."""
    noise = reference.coef_noise
    floor = 0.1 * float(np.median(noise[noise > 0])) if np.any(noise > 0) else 1e-12  # no near-zero divisor
    z = (np.asarray(pull) - reference.coef_center) / np.maximum(noise, floor)
    return float(np.sqrt(np.mean(z ** 2))) if len(z) else 0.0


def _conflicts(singles: list[str], single_arrows: dict[str, dict[str, str]], ref: Reference) -> list[str]:
    found = []
    for prop in ref.groups if len(singles) > 1 else ():
        up = [line for line in singles if single_arrows[line][prop] in (UP, UP2)]
        down = [line for line in singles if single_arrows[line][prop] in (DOWN, DOWN2)]
        if up and down:
            ups = ", ".join(f"'{line}' ({single_arrows[line][prop]})" for line in up)
            downs = ", ".join(f"'{line}' ({single_arrows[line][prop]})" for line in down)
            found.append(f"criteria pull {prop} in opposite directions: {ups} against {downs}; together they "
                         "partly cancel out")
    return found


LEGEND = (f"the reward's weight on each property: {UP2}/{DOWN2} about as far as a trained phrasing of it moves "
          f"it, {UP}/{DOWN} half as far, {SAME} no further than an unrelated sentence, {UNKNOWN} not learned by "
          "this CRM")


def arrows_line(table: pd.DataFrame, column: str = "arrow", kind: str = TIED) -> str:
    """'length ↓↓, structure ↓, code ·, …' for one arrow column."""
    rows = table[table["kind"] == kind]
    return ", ".join(f"{prop} {mark}" for prop, mark in zip(rows["property"], rows[column]))


def focus_line(reading: CriteriaReading) -> str:
    """What the wish focus (crm/linear_weights.py) leaves of the rest of the reward, or "" under no wish."""
    if reading.rest_share >= 1.0:
        return ""
    return (f"read as a wish: the rest of the CRM's judgment counts {reading.rest_share:.0%} beside it (an answer "
            "that misses the prompt still loses)")


def render_reading(reading: CriteriaReading) -> str:
    """The reading as plain text: one line for the set, one per criterion when several, then the warnings."""
    if not reading.available or reading.table.empty:
        return f"how the CRM reads the criteria: {reading.note or 'nothing to read'}"
    lines = [f"how the CRM reads the criteria ({LEGEND}):"]
    if len(reading.criteria) > 1:
        lines.append(f"  all {len(reading.criteria)} criteria: {arrows_line(reading.table)}")
        for i, criterion in enumerate(reading.criteria):
            lines.append(f"  '{criterion}': {arrows_line(reading.table, f'criterion_{i + 1}_arrow')}")
    else:
        lines.append(f"  '{reading.criteria[0]}': {arrows_line(reading.table)}")
    untied = arrows_line(reading.table, kind=UNTIED)
    if untied:
        lines.append(f"  {UNTIED}: {untied}")
    if focus := focus_line(reading):
        lines.append(f"  {focus}")
    lines += [f"warning: {warning}" for warning in reading.warnings]
    return "\n".join(lines)

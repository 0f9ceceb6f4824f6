"""Reading a criterion by the training phrasings it is closest to: the second half of the linear CRM's criteria
vector, beside the criterion's own embedding.

The gate W e(c) learned from a few hundred phrasings is a linear map of a 384-dimensional embedding, and a wording
far from all of them ("Answer in at most three sentences.") can land anywhere in it; the ranking reversed for such
wordings. The prototypes read a criterion the way a nearest-neighbour classifier does: for each property direction
(`length:less`, `structure:more`, …) the mean cosine of the criterion's three most similar TRAINING phrasings of
that direction (crm/properties.py, pool `train`: held-out families and new_criteria phrasings are never in the
bank), turned into a soft choice among the directions (softmax at temperature 0.05) and weighed by how well the
best one matches (a logistic ramp around cosine 0.45: a criterion close to no phrasing reads as no property).
A line that sets what it wants against what it does not ("prose rather than bullet points", "the idea, not a
code listing", "prefer X to Y") is read side by side: what it sets aside counts for the opposite direction, since
one embedding of the whole line mixes both (`contrast`). A dislike ("I find bullet points choppy") is read the
same way, what it names counting for the opposite direction (`disliked`), and a long first-person line clause by
clause, so the user's situation does not drown the wish (`clauses`). A profile of several criteria takes, per
direction, the mean of its lines' readings (PROFILE_READING). The gate sees [e(c), reading(c)], so it can learn one
coefficient shift per property direction, which a new wording reaches as long as its nearest phrasings mean the
same thing; the reading comes in two halves (`profile_halves`: the calibrated lines', then the wishes'), so a
wish and a rubric line of the same direction get gate cells of their own.

A user's wish is read EMPHASIS times as strongly as the pairwise fit weighs it; the criteria the labelled pairs
came with (the scenario rubrics, the harmless criteria, no criteria: `calibrated`) keep the fitted strength, so the
default leaderboards are the fit's. Why: the fit learns how far a criterion moves one comparison of two answers,
where a pair's property difference is large; a leaderboard needs it to move the mean over a model's answers, where
the quality terms differ as much as the property does, and the fitted strength moved the judge's held-out models'
leaderboards under new wordings too little (docs/crm.md, run 22).

A wish that names a property's words ("no bullet points", "bold the key terms", "skip the preamble") is read by
them first (crm/criteria_vocabulary.py: which property, which way, negations and limits), at full strength; the
bank reads what names none, and the scenario rubrics' lines (`calibrated`) always, so the default leaderboards
keep their reading. In a long line the clauses worded as a wish are read without the user's situation
(`_without_situation`).

The bank's embeddings are stored with the checkpoint (`criteria_prototypes.safetensors` + `.json`), so scoring never
re-embeds it and a checkpoint keeps the bank it was trained with.
"""

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from usl_assets.crm import criteria_vocabulary, wish_reader
from usl_assets.crm.wish_reader import WishReader
from usl_assets.settings import StaleCheckpoint

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
# "X rather than Y", "X, not Y", "prefer X to Y", "X works better than Y": the sentence embedding mixes both sides,
# so a wish against Y read as a wish for it. Each side is read alone; Y's reading counts for the opposite direction.
_CONTRAST = re.compile(r",?\s*\b(?:rather than|instead of|as opposed to)\s+|,\s*(?:but\s+)?not\s+(?=\w)", re.IGNORECASE)
_COMPARED = re.compile(r"^(?P<wanted>.*\b(?:more|better|rather|less|fewer|prefer\w*)\b.*?)\s+than\s+(?P<unwanted>.+)$",
                       re.IGNORECASE)
_PREFER = re.compile(r"\bprefer\w*", re.IGNORECASE)
_PREFER_SEPARATOR = re.compile(r"\s+(?:to|over)\s+", re.IGNORECASE)
# "no more than three sentences", "fewer than 100 words": a limit, not a contrast.
_LIMIT = re.compile(r"\b(?:no|not|never)\s+(?:more|less|fewer|longer|shorter)\s+than\b"
                    r"|\bthan\s+(?:\d+|zero|one|two|three|four|five|six|seven|eight|nine|ten|a few|a couple|a handful"
                    r"|a single)\b", re.IGNORECASE)
_CLAUSE_END = re.compile(r"[,;:]|\s(?:so|because|since|as)\s", re.IGNORECASE)
# A long line mixes the user's situation with the wish ("I'm reading on my phone between meetings, so I need answers
# that get to the point"): one embedding of it lands near neither. Lines in the first person of LONG_LINE_WORDS
# words or more are read clause by clause, each clause's reading counting as a line of its own. Third-person rubric
# lines stay whole: theirs carry conditions ("This criterion is not applicable if the user asks for a short
# answer") that read alone would say the opposite of the rubric.
LONG_LINE_WORDS = 12
_FIRST_PERSON = re.compile(r"\bI\b|\b[Mm](?:y|e)\b")
_CLAUSE = re.compile(r",\s+(?:so|which means|and so)\s+(?=\w)|\s+(?:so|which means|and so)\s+(?=(?:I|I'[a-z]+|you|please|it|"
                     r"the|a|an|my|we)\b)|,?\s+(?:and|but)\s+(?=I\b|I'[a-z]+\b|please\b)|;\s*|:\s+|\.\s+"
                     r"|\s+(?=when\b[^,;.]*\bwould (?:do|be enough|suffice)\b)"
                     r"|,\s+(?=please\b|I\b|I'[a-z]+\b|a\b|the\b)|^(?:since|because|when|as|if)\b[^,]*,\s*",
                     re.IGNORECASE)
# "I find bullet points choppy", "Phrases like 'Great question' feel like filler to me", "I get lost in long
# sentences": a dislike of what the line names, which an embedding reads as a wish for it (it names the thing).
# What is left without the dislike's words is read as the unwanted side.
_DISLIKE = re.compile(
    r"\b(?:(?:a bit|too|really|quite|so|very)\s+)?(?:tedious|choppy|cold|annoying|redundant|distracting|confusing|"
    r"overwhelming|fragmented|irritating|boring|pointless|useless|cluttered|exhausting|off-putting|"
    r"hard to (?:read|follow|scan|parse)|(?:is |are )?a waste of (?:my )?time|feels? like (?:filler|padding|noise)|"
    r"get lost(?: in| when)?|blur together|can't stand|dislike|hate)\b(?:\s+(?:to me|for me))?", re.IGNORECASE)
_DISLIKE_FRAME = re.compile(r"^\s*(?:I\s+(?:find|think|feel that)\s+(?:it\s+)?|I\s+)|\b(?:and|or)\s*(?=[.!]?\s*$)",
                            re.IGNORECASE)
CONTRAST = "sides"  # how a contrast is read: "sides" (each alone) or "whole" (the line as one)
# How a profile of several criteria is read from its lines' readings: their mean per direction ("mean"), or the
# strongest line ("max"). With the strongest line a scenario rubric of many lines read as strongly, in as many
# directions, as several wishes at once; the mean raised the dev pool's fidelity 0.502 -> 0.548 (docs/crm.md run 21).
PROFILE_READING = "mean"
# How much more strongly than the fit a line outside `calibrated` is read: chosen on the dev pool's new_criteria
# wordings (the AI judge's models outside both response pools; docs/crm.md run 22).
EMPHASIS = 6.0
# Whether a wish that names a property's words is read by them (crm/criteria_vocabulary.py) before the bank.
VOCABULARY = True
# The reading has two halves: the calibrated lines' (scenario rubrics…) and the wishes', each with gate cells of
# its own, so a user's wish may move the property as measured while a rubric moves what the labelled pairs paid
# for (LinearConfig.reading_gate "wish_measured"; docs/crm.md run 25).
WISH = "wish "
# A wish no property word names is read by the wish reader's belief over every direction; where it spreads, the
# spread is doubt, not a second wish, and a weak side reading of a property that differs between every two answers
# (length) outvoted the one meant. Directions read under this share of the strongest are dropped, the line's total
# kept. Chosen on the dev wordings' fidelity (benchmarks/criteria_fidelity_dev.py; docs/crm.md runs 36 and 37).
READER_SIDE_SHARE = 0.5
SETTINGS = {"emphasis": EMPHASIS, "halves": WISH, "vocabulary": VOCABULARY and criteria_vocabulary.VERSION,
            "wish_reader": wish_reader.VERSION, "contrast": CONTRAST, "long_line_words": LONG_LINE_WORDS, "clauses": "first_person", "dislike": True, "complaint": True,
            "top_k": TOP_K, "scale": SCALE, "profile_reading": PROFILE_READING, "negation_penalty": NEGATION_PENALTY,
            "temperature": TEMPERATURE,
            "match_center": MATCH_CENTER, "match_width": MATCH_WIDTH, "reader_side_share": READER_SIDE_SHARE}


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


def profile_reading(line_readings: np.ndarray) -> np.ndarray:
    """A profile's reading from its lines' (lines × directions): PROFILE_READING."""
    return line_readings.mean(axis=0) if PROFILE_READING == "mean" else line_readings.max(axis=0)


def profile_halves(line_readings: np.ndarray, wishes: np.ndarray) -> np.ndarray:
    """The calibrated lines' half of a profile's reading, then the wishes' (each profile_reading over every line,
    the other half's lines counting as no reading): 2 × directions, summing to the profile's reading."""
    wish = np.asarray(wishes, bool)[:, None]
    return np.concatenate([profile_reading(np.where(wish, 0.0, line_readings)),
                           profile_reading(np.where(wish, line_readings, 0.0))])


def negated(text: str) -> bool:
    return bool(_NEGATION.search(text))


def _opposite(direction: str) -> str:
    """"length:less" -> "length:more" and back."""
    name, way = direction.rsplit(":", 1)
    return f"{name}:{'more' if way == 'less' else 'less'}"


def _preference(line: str) -> tuple[str, str] | None:
    """"prefer X to Y", "X is preferred over Y": (up to the separator, after it); "prefer to do" is no contrast."""
    found = _PREFER.search(line)
    if not found:
        return None
    rest = line[found.end():]
    for separator in _PREFER_SEPARATOR.finditer(rest):
        if separator.start() == 0 and separator.group().strip().lower() == "to":
            continue
        return line[:found.end() + separator.start()], rest[separator.end():]
    return None


def contrast(line: str) -> tuple[str, str] | None:
    """(wanted, unwanted) when the line sets what it wants against what it does not, else None. The unwanted side
    ends with its clause ("…rather than long paragraphs, so…")."""
    found = _CONTRAST.search(line)
    if _LIMIT.search(line) and not found:
        return None
    if found and found.start() > 0:
        wanted, unwanted = line[:found.start()], line[found.end():]
    else:
        match = _COMPARED.match(line)
        sides = (match.group("wanted"), match.group("unwanted")) if match else _preference(line)
        if sides is None:
            return None
        wanted, unwanted = sides
    unwanted = _CLAUSE_END.split(unwanted, maxsplit=1)[0]
    return (wanted.strip(), unwanted.strip()) if wanted.strip() and unwanted.strip() else None


def clauses(line: str) -> list[str]:
    """A long first-person line's clauses of 3+ words (LONG_LINE_WORDS); any other line as it is."""
    if len(line.split()) < LONG_LINE_WORDS or not _FIRST_PERSON.search(line):
        return [line]
    found = [part.strip(" ,.") for part in _CLAUSE.split(line) if part]
    return [part for part in found if len(part.split()) >= 3] or [line]


def disliked(line: str) -> str | None:
    """What a line says it dislikes ("I find bullet points choppy" -> "bullet points"), else None."""
    found = _DISLIKE.search(line)
    if not found or negated(" ".join(line[:found.start()].split()[-3:])):  # "Avoid choppy, clipped sentences"
        return None
    rest = _DISLIKE_FRAME.sub("", _DISLIKE.sub(" ", line)).strip(" ,.!")
    rest = re.sub(r"\s+(?:and|or|in|when)?\s*$", "", re.sub(r"\s+", " ", rest))
    return rest if rest else None


def _without_situation(parts: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """A wish's parts without the user's situation: where some wanted part is worded as a wish
    (criteria_vocabulary.WISH: "please …", "I'd rather …", an imperative), the wanted parts that are not ("I'm
    debugging this at work and don't have time to read code, so please include a snippet"); unwanted parts stay."""
    kept = [(text, wanted) for text, wanted in parts if not wanted or criteria_vocabulary.is_wish(text)]
    return kept if any(wanted for _, wanted in kept) else parts


def sides(line: str) -> list[tuple[str, bool]]:
    """The parts a line is read by: (text, wanted). A contrast gives its wanted and unwanted sides, a dislike its
    unwanted object, a long line each clause's; a rhetorical "why …?" is one complaint (its contrast turned around)."""
    found = []
    rhetorical = criteria_vocabulary.rhetorical(line)  # one clause, a complaint whatever wish words it holds
    complains = rhetorical or criteria_vocabulary.complaint(line)
    for clause in [line] if rhetorical else clauses(line):
        pair = contrast(clause) if CONTRAST == "sides" else None
        if rhetorical and pair is None and (could := criteria_vocabulary.COULD_INSTEAD.search(clause)):
            pair = (clause[:could.start()], clause[could.end():])  # "why X when you could Y?": turned, Y is wanted
        # A complaint's clauses (not those worded as a wish) describe what the user gets: unwanted, its contrast
        # turned around ("it guesses instead of checking with me"), its words of dislike not counted twice.
        turned = rhetorical or ((complains or criteria_vocabulary.complaint(clause))
                                and not criteria_vocabulary.is_wish(clause))
        unwanted = None if pair or turned else disliked(clause)
        if pair:
            found += [(pair[0], not turned), (pair[1], turned)]
        elif turned:
            found.append((criteria_vocabulary.without_dislikes(clause), False))
        elif unwanted:
            found.append((unwanted, False))
        else:
            found.append((clause, True))
    return found


def main_directions(reading: np.ndarray, share: float) -> np.ndarray:
    """`reading` without the directions under `share` times its strongest, rescaled to the same total."""
    kept = np.where(reading >= share * reading.max(), reading, 0.0)
    return kept * (reading.sum() / kept.sum()) if kept.sum() > 0 else reading


@dataclass
class PrototypeBank:
    labels: list[str]  # per phrasing: "property:direction"
    vectors: np.ndarray  # per phrasing: its L2-normalized embedding
    negations: list[bool]  # per phrasing: whether it is worded as a negation
    texts: list[str] | None = None  # per phrasing: its text (saved with it, so an encoder need not embed it again)
    calibrated: frozenset[str] | None = None  # lines read at the fitted strength (None: every line, as in training)
    reader: WishReader | None = None  # reads the wishes (crm/wish_reader.py); None: the bank reads them too

    @property
    def directions(self) -> list[str]:
        return list(dict.fromkeys(self.labels))

    @property
    def reading_columns(self) -> list[str]:
        """The labels of the criteria vector's reading columns: the calibrated half, then the wishes' (WISH)."""
        return [*self.directions, *(WISH + direction for direction in self.directions)]

    def wishes(self, lines: list[str]) -> list[bool]:
        """Per line, whether it is a wish (not a `calibrated` line; with no calibration every line is)."""
        return [self.calibrated is None or line not in self.calibrated for line in lines]

    emphasized: bool = True  # False while the fit embeds its rows: every line at the fitted strength

    def strengths(self, lines: list[str]) -> np.ndarray:
        """Per line, how strongly its reading counts: 1 for a calibrated line, EMPHASIS for any other."""
        if self.calibrated is None or not self.emphasized:
            return np.ones(len(lines))
        return np.where(self.wishes(lines), EMPHASIS, 1.0)

    def read_lines(self, lines: list[str], embed) -> np.ndarray:
        """Per criterion line, its reading: per direction, the strongest of its parts' (`sides`); an unwanted part
        counts for the opposite direction. A wish (a line outside `calibrated`) is read by the property words it
        names (crm/criteria_vocabulary.py) where it names any, by the wish reader's main directions
        (READER_SIDE_SHARE) where it names none; a calibrated line (a scenario rubric's) always by its nearest
        phrasings. embed: texts -> {text: L2-normalized vector}."""
        parts = {line: sides(line) for line in lines}
        vectors = embed(list(dict.fromkeys([*lines, *(text for line in lines for text, _ in parts[line])])))
        flipped = [self.directions.index(_opposite(direction)) for direction in self.directions]
        rows = []
        for line in lines:
            by_words = VOCABULARY and (self.calibrated is None or line not in self.calibrated)
            kept = _without_situation(parts[line]) if by_words else parts[line]
            named = [reading for reading in (self._named(text, wanted, flipped) for text, wanted in kept)
                     if reading is not None] if by_words else []
            reader = self.reader if by_words else None
            if named:
                reading = np.max(named, axis=0)
                rows.append(reader.weigh_named(reading, line, vectors[line]) if reader is not None else reading)
                continue
            if reader is not None:
                line_vector = vectors[line][None, :]
                read = SCALE * reader.belief([line], line_vector)[0] * reader.match(line_vector)[0]
                rows.append(main_directions(read, READER_SIDE_SHARE))
                continue
            rows.append(np.max([self.read(vectors[text][None, :], [text])[0] if wanted
                                else self.read(vectors[text][None, :], [text], polarity=False)[0][flipped]
                                for text, wanted in kept], axis=0))
        return np.stack(rows)

    def _named(self, text: str, wanted: bool, flipped: list[int]) -> np.ndarray | None:
        """The reading of the property words a part names (crm/criteria_vocabulary.py), None where it names none."""
        reading = np.zeros(len(self.directions))
        for direction, share in criteria_vocabulary.read(text).items():
            if direction in self.directions:
                reading[self.directions.index(direction)] = SCALE * share
        if not reading.any():
            return None
        return reading if wanted else reading[flipped]

    def read(self, line_vectors: np.ndarray, lines: list[str], polarity: bool = True) -> np.ndarray:
        """Per criterion line (its text and L2-normalized embedding): a weight per property direction
        (self.directions). polarity False: the lines are read as not negated (a contrast's unwanted side)."""
        similarity = np.asarray(line_vectors, np.float64) @ self.vectors.T  # lines × phrasings
        differs = np.array([polarity and negated(line) for line in lines])[:, None] != np.array(self.negations)[None, :]
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

        arrays = {"vectors": self.vectors, **(self.reader.arrays() if self.reader is not None else {})}
        save_file({key: np.ascontiguousarray(value, dtype=np.float32) for key, value in arrays.items()},
                  folder / WEIGHTS_FILE)
        (folder / SHAPE_FILE).write_text(json.dumps({"labels": self.labels, "negations": self.negations,
                                                     "texts": self.texts, "calibrated": None if self.calibrated is None else sorted(self.calibrated),
                                                     **SETTINGS}, indent=2), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path) -> "PrototypeBank | None":
        if not (folder / WEIGHTS_FILE).exists():
            return None
        from safetensors.numpy import load_file

        shape = json.loads((folder / SHAPE_FILE).read_text(encoding="utf-8"))
        if {k: shape.get(k) for k in SETTINGS} != SETTINGS:
            raise StaleCheckpoint(f"{folder} reads criteria with other prototype settings than this code: retrain it "
                                  "(`usl run`, or `make run`)")
        arrays = load_file(folder / WEIGHTS_FILE)
        bank = cls(shape["labels"], arrays["vectors"].astype(np.float64), shape["negations"], shape.get("texts"),
                   None if shape["calibrated"] is None else frozenset(shape["calibrated"]))
        bank.reader = WishReader.from_arrays(bank.directions, arrays)
        return bank

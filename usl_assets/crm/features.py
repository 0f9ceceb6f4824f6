"""Measurable properties of a response text: the counts behind contrastive criteria and the factorized CRM's
response features.

`response_counts(text)` gives raw counts (what the contrastive-criteria rules in crm/properties.py threshold on);
`response_features(text)` turns them into scale-friendly floats (log1p of counts, ratios in [0, 1]) in the fixed
order FEATURE_NAMES, so a feature vector means the same thing in every checkpoint. Pure Python, no models.
"""

import math
import re
from functools import lru_cache

import numpy as np

_WORD = re.compile(r"\b\w+\b")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s+\S")
_LIST_MARKER = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s+")
HEADING_LINE = re.compile(r"^\s{0,3}#{1,6}\s+\S")
FENCE_LINE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"`[^`\n]+`")
_BOLD = re.compile(r"\*\*[^*\n]+\*\*|__[^_\n]+__")
_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
_URL = re.compile(r"https?://\S+|www\.\S+")
_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)")
_REFUSAL = re.compile(
    r"\b(?:I(?:'m| am) sorry|I apologi[sz]e|I can(?:no|')t (?:help|assist|provide|do)"
    r"|I(?:'m| am) (?:not able|unable) to|I won't|as an AI|I must decline|not appropriate|is illegal"
    r"|I do not feel comfortable)",
    re.IGNORECASE,
)
# The markers below are matched on the lower-cased prose (faster than case-insensitive patterns).
# Giving examples: explicit markers ("for example", "e.g.", "such as", an "Example:" line).
_EXAMPLE = re.compile(r"\b(?:for (?:example|instance)|e\.g\.|such as|to illustrate|as an example"
                      r"|examples? (?:include|would be|of this))")
_EXAMPLE_LINE = re.compile(r"^[ \t]*(?:#+[ \t]*)?(?:\*\*)?examples?(?:[ \t]+\d+)?(?:\*\*)?[ \t]*:", re.MULTILINE)
# Step-by-step: "Step 2", a sentence opening with a sequence word, numbered items that are actions (they open
# with an imperative verb, or the answer speaks of steps / instructions / directions).
_STEP_MENTION = re.compile(r"\bstep\s*\d+\b")
_SEQUENCE_WORD = re.compile(r"\b(?:first(?:ly)?|second(?:ly)?|third(?:ly)?|then|next|after that|afterwards|finally"
                            r"|lastly)\b")
_NUMBERED_ITEM = re.compile(r"^[ \t]*(?:\*\*)?(?:\d{1,2}[.)]|\(\d{1,2}\))[ \t]+(?:\*\*)?(\w+)", re.MULTILINE)
_ACTION_VERBS = frozenset((
    "add apply ask bake boil buy calculate call check choose clean click close combine compare connect consider "
    "cook copy create cut decide define delete determine download drain enable enter fill find fold follow gather "
    "go heat identify install keep let list log look make measure mix move navigate open paste place plan pour "
    "practice prepare preheat press put read remove repeat replace research restart review run save select serve "
    "set sign start step stir submit take test try turn type update use verify wait wash write").split())
_SPEAKS_OF_STEPS = re.compile(r"\b(?:steps?|instructions|directions)\b")
# Casual register: contractions (not possessives), casual words, emoji; exclamation marks are counted with them.
_APOSTROPHE_SUFFIX = re.compile(r"['’](t|re|ve|ll|m|s|d)\b")
_S_CONTRACTIONS = frozenset("it that there here what he she let who where how".split())  # "it's", not "John's"
_D_CONTRACTIONS = frozenset("i you we they he she".split())
_CASUAL_WORD = re.compile(r"\b(?:hey|hi|hiya|gonna|wanna|gotta|kinda|sorta|yeah|yep|yup|nope|awesome|lol|btw|omg|ok"
                          r"|okay|folks|guys|dude|totally|no worries|cheers|cuz)\b")
_EMOJI = re.compile("[\U0001F300-\U0001FAFF\u2600-\u27BF]")
# An opening that is not the answer: a pleasantry, thanks, praise of the question, "I'd be happy to", "As an AI",
# a restatement of the request. Counted per leading sentence.
_PREAMBLE = re.compile(
    r"^\W*(?:(?:sure|certainly|of course|absolutely|okay|ok|alright|all right|great|excellent|no problem|gladly"
    r"|definitely|hello|hi|hey|greetings)(?:\s+(?:thing|there|friend|guys|everyone|all))?\s*(?:[!.,:;]|$)"
    r"|(?:what|that['’]s|that is|this is|it['’]s|such) an? (?:\w+ )?(?:question|request|topic|idea)\b"
    r"|(?:great|good|excellent|interesting|fantastic|wonderful) (?:question|request|topic|idea)\b"
    r"|(?:i|we)(?:['’]d|['’]m|['’]ll| would| am| will) (?:be )?(?:more than )?(?:happy|glad|delighted|pleased) to\b"
    r"|(?:happy|glad) to help\b|thanks?(?: you)? (?:so much )?for\b|as an ai\b"
    r"|you(?:['’]re| are)? (?:asked|asking|want to know|would like to know|wondering)\b"
    r"|the question (?:is|asks)\b|let me (?:help|explain|think)\b|i understand (?:that|your|you)\b)",
    re.IGNORECASE,
)
_OPENING_SENTENCE = re.compile(r"[^.!?:\n]*(?:[.!?:]+|\n|$)")

# Raw counts, in a fixed order (ints, except where noted).
COUNT_NAMES = (
    "chars", "words", "lines", "paragraphs", "sentences", "list_items", "headings", "code_blocks",
    "code_lines", "inline_code", "bold_marks", "table_rows", "questions", "exclamations", "digits", "uppercase",
    "urls", "refusal_phrases", "example_markers", "step_markers", "informal_markers", "preamble_sentences",
)

# Model features, in a fixed order: never reorder or rename (checkpoints store vectors in this order);
# append new ones at the end.
FEATURE_NAMES = (
    "log_words", "log_chars", "log_lines", "log_paragraphs", "log_sentences", "avg_sentence_words",
    "avg_word_chars", "log_list_items", "list_line_ratio", "log_headings", "log_code_blocks", "code_line_ratio",
    "log_inline_code", "log_bold_marks", "log_table_rows", "log_questions", "log_exclamations", "digit_ratio",
    "uppercase_ratio", "log_urls", "refusal", "log_example_markers", "log_step_markers", "formality",
    "direct_opening",
)


def as_text(value: object) -> str:
    """Responses come from public files where a few are not strings (PandaLM); measure their text form."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return value if isinstance(value, str) else str(value)


def _opens_sentence(text: str, start: int) -> bool:
    """Whether the word at `start` opens a line or follows a sentence end (markdown bold / bullets aside)."""
    j = start - 1
    while j >= 0 and text[j] in " \t*-":
        j -= 1
    return j < 0 or text[j] in "\n.!?:"


def _step_markers(lower: str) -> int:
    speaks_of_steps = bool(_SPEAKS_OF_STEPS.search(lower))
    actions = sum(1 for word in _NUMBERED_ITEM.findall(lower) if speaks_of_steps or word in _ACTION_VERBS)
    sequence = sum(1 for m in _SEQUENCE_WORD.finditer(lower) if _opens_sentence(lower, m.start()))
    return actions + len(_STEP_MENTION.findall(lower)) + sequence


def _contractions(lower: str) -> int:
    found = 0
    for m in _APOSTROPHE_SUFFIX.finditer(lower):
        j = m.start()
        while j > 0 and (lower[j - 1].isalnum() or lower[j - 1] == "_"):
            j -= 1
        word, suffix = lower[j:m.start()], m.group(1)
        found += bool(word) and (
            (suffix == "t" and word.endswith("n")) or suffix in ("re", "ve", "ll") or (suffix == "m" and word == "i")
            or (suffix == "s" and word in _S_CONTRACTIONS) or (suffix == "d" and word in _D_CONTRACTIONS))
    return found


def _informal_markers(prose: str, lower: str) -> int:
    return _contractions(lower) + len(_CASUAL_WORD.findall(lower)) + len(_EMOJI.findall(prose)) + prose.count("!")


def _preamble_sentences(prose: str, most: int = 3) -> int:
    """How many of the opening sentences (up to `most`) are preamble before the answer starts. Leading heading
    lines are not the opening: a title put over a preamble leaves it a preamble."""
    found, rest = 0, prose.lstrip()
    while HEADING_LINE.match(rest):
        rest = rest.split("\n", 1)[1].lstrip() if "\n" in rest else ""
    while found < most and rest:
        sentence = _OPENING_SENTENCE.match(rest).group(0)
        if not sentence or not _PREAMBLE.match(sentence):
            break
        found, rest = found + 1, rest[len(sentence):].lstrip()
    return found


def formality_score(counts: dict[str, int]) -> float:
    """1 / (1 + informal markers per 100 words): 1 for an answer with none, 0.5 at one per 100 words; 0 when there
    are no words."""
    if not counts["words"]:
        return 0.0
    return 1.0 / (1.0 + 100.0 * counts["informal_markers"] / counts["words"])


def response_counts(text: object) -> dict[str, int]:
    """Raw counts of a response's measurable properties (keys: COUNT_NAMES)."""
    text = as_text(text)
    lines = text.splitlines()
    prose_lines, code_lines, code_blocks, in_code = [], 0, 0, False
    for line in lines:
        if FENCE_LINE.match(line):
            code_blocks += 0 if in_code else 1
            in_code = not in_code
        elif in_code:
            code_lines += 1
        else:
            prose_lines.append(line)
    prose = "\n".join(prose_lines)
    unmarked = "\n".join(_LIST_MARKER.sub("", line) for line in prose_lines)  # "1." is not a sentence end
    lower = prose.lower()
    return {
        "chars": len(text),
        "words": len(_WORD.findall(text)),
        "lines": sum(1 for line in lines if line.strip()),
        "paragraphs": sum(1 for block in re.split(r"\n\s*\n", text) if block.strip()),
        "sentences": len(_SENTENCE_END.findall(unmarked)) or (1 if unmarked.strip() else 0),
        "list_items": sum(1 for line in prose_lines if _LIST_ITEM.match(line)),
        "headings": sum(1 for line in prose_lines if HEADING_LINE.match(line)),
        "code_blocks": code_blocks,
        "code_lines": code_lines,
        "inline_code": len(_INLINE_CODE.findall(prose)),
        "bold_marks": len(_BOLD.findall(prose)),
        "table_rows": sum(1 for line in prose_lines if _TABLE_ROW.match(line)),
        "questions": prose.count("?"),
        "exclamations": prose.count("!"),
        "digits": sum(ch.isdigit() for ch in text),
        "uppercase": sum(ch.isupper() for ch in text),
        "urls": len(_URL.findall(text)),
        "refusal_phrases": len(_REFUSAL.findall(prose)),
        "example_markers": len(_EXAMPLE.findall(lower)) + len(_EXAMPLE_LINE.findall(lower)),
        "step_markers": _step_markers(lower),
        "informal_markers": _informal_markers(prose, lower),
        "preamble_sentences": _preamble_sentences(prose),
    }


def features_from_counts(counts: dict[str, int]) -> dict[str, float]:
    """The model features (keys and order: FEATURE_NAMES) of one response's counts."""
    log = math.log1p
    chars, words, lines = counts["chars"], counts["words"], counts["lines"]
    letters = max(chars, 1)
    features = {
        "log_words": log(words),
        "log_chars": log(chars),
        "log_lines": log(lines),
        "log_paragraphs": log(counts["paragraphs"]),
        "log_sentences": log(counts["sentences"]),
        # Long sentences are capped so one run-on answer does not dominate the scale.
        "avg_sentence_words": min(words / max(counts["sentences"], 1), 100.0) / 100.0,
        "avg_word_chars": min(chars / max(words, 1), 20.0) / 20.0,
        "log_list_items": log(counts["list_items"]),
        "list_line_ratio": counts["list_items"] / max(lines, 1),
        "log_headings": log(counts["headings"]),
        "log_code_blocks": log(counts["code_blocks"]),
        "code_line_ratio": min(counts["code_lines"] / max(lines, 1), 1.0),
        "log_inline_code": log(counts["inline_code"]),
        "log_bold_marks": log(counts["bold_marks"]),
        "log_table_rows": log(counts["table_rows"]),
        "log_questions": log(counts["questions"]),
        "log_exclamations": log(counts["exclamations"]),
        "digit_ratio": counts["digits"] / letters,
        "uppercase_ratio": counts["uppercase"] / letters,
        "log_urls": log(counts["urls"]),
        "refusal": 1.0 if counts["refusal_phrases"] else 0.0,
        "log_example_markers": log(counts["example_markers"]),
        "log_step_markers": log(counts["step_markers"]),
        "formality": formality_score(counts),
        # 1 when the answer opens with its substance, 0 when it opens with a preamble (or is empty).
        "direct_opening": 1.0 if words and not counts["preamble_sentences"] else 0.0,
    }
    return {name: float(features[name]) for name in FEATURE_NAMES}


def response_features(text: object) -> dict[str, float]:
    """Scale-friendly features of one response (keys and order: FEATURE_NAMES)."""
    return features_from_counts(response_counts(text))


def feature_matrix(texts: list) -> np.ndarray:
    """One float32 row per text, columns in FEATURE_NAMES order."""
    rows = [list(response_features(text).values()) for text in texts]
    return np.asarray(rows, dtype=np.float32).reshape(len(rows), len(FEATURE_NAMES))


# Signs of a degenerate answer, measured with the prompt (Holtzman et al.'s "neural text degeneration": small
# models loop, echo their input and drift from it). The linear CRM reads them next to FEATURE_NAMES; once length is
# controlled, both teachers prefer the answer that repeats less, and the humans the one that copies less and leaves
# fewer of the prompt's terms unused (docs/crm.md, benchmarks/degeneration_signal.py).
DEGENERATION_FEATURES = ("repeated_line_share", "prompt_copy_share", "repeated_word_share", "prompt_terms_missed")
_COPY_NGRAM = 4
_DIVERSITY_WINDOW = 50


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _ngrams(words: list[str]) -> list[tuple[str, ...]]:
    return [tuple(words[i:i + _COPY_NGRAM]) for i in range(len(words) - _COPY_NGRAM + 1)]


@lru_cache(maxsize=4096)
def _prompt_ngrams(prompt: str) -> frozenset:
    """Cached: a pool's answers come many to one prompt."""
    return frozenset(_ngrams(_words(prompt)))


def _line_share(text: str) -> float:
    lines = [" ".join(_words(_LIST_MARKER.sub("", line))) for line in text.splitlines()]
    lines = [line for line in lines if line]
    return 1.0 - len(set(lines)) / len(lines) if len(lines) > 1 else 0.0


def repeated_line_share(text: object) -> float:
    """The share of non-empty lines that say again (list markers, case and punctuation aside) an earlier line."""
    return _line_share(as_text(text))


def _copy_share(prompt: str, words: list[str]) -> float:
    grams = _ngrams(words)
    if not grams:
        return 0.0
    in_prompt = _prompt_ngrams(prompt)
    return sum(gram in in_prompt for gram in grams) / len(grams)


def prompt_copy_share(prompt: object, text: object) -> float:
    """The share of the answer's word 4-grams that are also in the prompt: an answer that echoes its input."""
    return _copy_share(as_text(prompt), _words(as_text(text)))


def _window_repeats(words: list[str]) -> float:
    window = min(_DIVERSITY_WINDOW, len(words))
    if window < 2:
        return 0.0
    counts: dict[str, int] = {}
    for word in words[:window]:
        counts[word] = counts.get(word, 0) + 1
    distinct = [len(counts)]
    for leaving, entering in zip(words, words[window:]):
        counts[leaving] -= 1
        if not counts[leaving]:
            del counts[leaving]
        counts[entering] = counts.get(entering, 0) + 1
        distinct.append(len(counts))
    return 1.0 - sum(distinct) / (len(distinct) * window)


def repeated_word_share(text: object) -> float:
    """1 − the moving-average type-token ratio (MATTR, Covington & McFall 2010) over 50-word windows: the share of
    a window's words that repeat one earlier in it. Unlike a plain type-token ratio it does not grow with length."""
    return _window_repeats(_words(as_text(text)))


@lru_cache(maxsize=4096)
def _prompt_terms(prompt: str) -> frozenset:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(word for word in _words(prompt) if len(word) > 2 and word not in ENGLISH_STOP_WORDS)


def _terms_missed(prompt: str, words: list[str]) -> float:
    terms = _prompt_terms(prompt)
    return len(terms.difference(words)) / len(terms) if terms else 0.0


def prompt_terms_missed(prompt: object, text: object) -> float:
    """The share of the prompt's content words (3+ letters, not English stop words) the answer never uses."""
    return _terms_missed(as_text(prompt), _words(as_text(text)))


def _degeneration_row(prompt: object, text: object, view: object) -> tuple[float, ...]:
    """DEGENERATION_FEATURES of one answer, its words found once: repeats read the answer, what it takes from the
    prompt reads `view` (the answer without filler: filler around an echo would dilute its copy share)."""
    prompt, text = as_text(prompt), as_text(text)
    words = _words(text)
    view_words = words if view is None else _words(as_text(view))
    return (_line_share(text), _copy_share(prompt, view_words), _window_repeats(words),
            _terms_missed(prompt, view_words))


def degeneration_matrix(prompts: list, texts: list, views: list | None = None) -> np.ndarray:
    """One float32 row per (prompt, answer), columns in DEGENERATION_FEATURES order. `views`: each answer's
    supported text (crm/relevance.py), read for the prompt copy and the prompt terms missed."""
    views = [None] * len(texts) if views is None else views
    rows = [_degeneration_row(prompt, text, view) for prompt, text, view in zip(prompts, texts, views)]
    return np.asarray(rows, dtype=np.float32).reshape(len(rows), len(DEGENERATION_FEATURES))

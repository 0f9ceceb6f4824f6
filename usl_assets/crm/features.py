"""Measurable properties of a response text: the counts behind contrastive criteria and the factorized CRM's
response features.

`response_counts(text)` gives raw counts (what the contrastive-criteria rules in crm/data.py threshold on);
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
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+\S")
_FENCE = re.compile(r"^\s*(```|~~~)")
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

# Raw counts, in a fixed order (ints, except where noted).
COUNT_NAMES = (
    "chars", "words", "lines", "paragraphs", "sentences", "list_items", "headings", "code_blocks",
    "code_lines", "inline_code", "bold_marks", "table_rows", "questions", "exclamations", "digits", "uppercase",
    "urls", "refusal_phrases",
)

# Model features, in a fixed order: never reorder or rename (checkpoints store vectors in this order);
# append new ones at the end.
FEATURE_NAMES = (
    "log_words", "log_chars", "log_lines", "log_paragraphs", "log_sentences", "avg_sentence_words",
    "avg_word_chars", "log_list_items", "list_line_ratio", "log_headings", "log_code_blocks", "code_line_ratio",
    "log_inline_code", "log_bold_marks", "log_table_rows", "log_questions", "log_exclamations", "digit_ratio",
    "uppercase_ratio", "log_urls", "refusal",
)


def as_text(value: object) -> str:
    """Responses come from public files where a few are not strings (PandaLM); measure their text form."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return value if isinstance(value, str) else str(value)


def response_counts(text: object) -> dict[str, int]:
    """Raw counts of a response's measurable properties (keys: COUNT_NAMES)."""
    text = as_text(text)
    lines = text.splitlines()
    prose_lines, code_lines, code_blocks, in_code = [], 0, 0, False
    for line in lines:
        if _FENCE.match(line):
            code_blocks += 0 if in_code else 1
            in_code = not in_code
        elif in_code:
            code_lines += 1
        else:
            prose_lines.append(line)
    prose = "\n".join(prose_lines)
    unmarked = "\n".join(_LIST_MARKER.sub("", line) for line in prose_lines)  # "1." is not a sentence end
    return {
        "chars": len(text),
        "words": len(_WORD.findall(text)),
        "lines": sum(1 for line in lines if line.strip()),
        "paragraphs": sum(1 for block in re.split(r"\n\s*\n", text) if block.strip()),
        "sentences": len(_SENTENCE_END.findall(unmarked)) or (1 if unmarked.strip() else 0),
        "list_items": sum(1 for line in prose_lines if _LIST_ITEM.match(line)),
        "headings": sum(1 for line in prose_lines if _HEADING.match(line)),
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


def _degeneration_row(prompt: object, text: object) -> tuple[float, ...]:
    """DEGENERATION_FEATURES of one answer, its words found once."""
    prompt, text = as_text(prompt), as_text(text)
    words = _words(text)
    return _line_share(text), _copy_share(prompt, words), _window_repeats(words), _terms_missed(prompt, words)


def degeneration_matrix(prompts: list, texts: list) -> np.ndarray:
    """One float32 row per (prompt, answer), columns in DEGENERATION_FEATURES order."""
    rows = [_degeneration_row(prompt, text) for prompt, text in zip(prompts, texts)]
    return np.asarray(rows, dtype=np.float32).reshape(len(rows), len(DEGENERATION_FEATURES))

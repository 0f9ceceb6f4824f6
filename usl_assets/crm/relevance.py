"""How well an answer fits its prompt: the linear CRM's features that read the prompt with the answer.

The n-gram and style terms read the answer alone, so fluent, well-formatted text scored high whatever it answered
(a strong model's answer given to another prompt ranked 8th of 32, one generic answer for every prompt 15th).
These features measure fit; the gaming rows of crm/gaming_pairs.py teach the CRM what they are worth.

- `prompt_fit`: the cosine between the prompt's and the answer's content-word stems (sublinear counts; stems are a
  word's first five letters, stop words and words under three letters dropped), divided by 0.15 and capped at 1.
  Answers to another prompt and generic answers share few stems with the prompt (median cosine 0.01 against 0.3
  for real answers on AlpacaEval; a tenth of real answers are under 0.15). The cap is there because more overlap
  is not better beyond a point: an echo of the request overlaps most of all.
- `unsupported_sentence_share`: the share of the answer's prose sentences (3+ content words) not tied to the
  prompt: sharing no stem with it, nor with a sentence that does (through any chain of shared stems). Filler
  ("Experts agree that a balanced perspective yields the most value") hangs together with other filler at most;
  a real answer's sentences share its topic's words.
  `log_excess_unsupported_words`: how much of it there is, log(1 + the content words of those sentences beyond
  UNSUPPORTED_TOLERANCE): padding adds filler without touching the share of a long answer much, and the length
  features would pay for it; a real answer's stray sentence or two (a closing remark, a fact whose words the
  prompt does not use) costs nothing (docs/crm.md, run 28).
- `unfinished_ending`: 1 when the answer stops mid-sentence (its last character is a letter, digit or comma, and it
  does not end in a code fence): an answer cut short.
- `graded_best_match`: the highest TF-IDF cosine between the answer and the AI judge's graded answers to the same
  prompt (crm/graded_answers.py; other model families only in training; 0 for prompts it never graded, a constant
  within a prompt, so it never decides between two answers to an ungraded prompt).

Pure Python and sparse algebra: no model, so whole pools are scored in seconds.
"""

import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from usl_assets.crm.features import FENCE_LINE, HEADING_LINE, as_text

RELEVANCE_FEATURES = ("prompt_fit", "unsupported_sentence_share", "log_excess_unsupported_words",
                      "unfinished_ending", "graded_best_match")
# Computed here; graded_best_match comes with the graded answers (GradedAnswers.features).
TEXT_RELEVANCE_FEATURES = RELEVANCE_FEATURES[:4]
FIT_COSINE = 0.15
# Unsupported content words an answer may have before they count: the 95th percentile of real training answers
# (train originals of every source: 90th 8, 95th 14, 97.5th 22), under every padded training row's filler (10th
# percentile 43). Counted from the first word, the penalty fell on real answers' stray sentences and cost the
# longer, better answer on human pairs (docs/crm.md, run 28).
UNSUPPORTED_TOLERANCE = 15
_WORD = re.compile(r"[a-z0-9]+")
_FENCED = re.compile(r"```.*?(?:```|$)", re.DOTALL)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_STEM = 5
_MIN_SENTENCE_STEMS = 3
REPEAT_SLACK = 2  # stems a restatement may add ("Bottom line:", "Key point:")
REPEAT_SHARED = 3  # stems a restatement shares with the sentence it restates, at least ("Fold the paper and tape
# it." after "Wrapping takes paper, tape and scissors." shares two: a new step, not a restatement)
# A chain of shared stems through words that answers to any prompt use ("consider", "important", "ensure",
# "approach") ties filler to the answer: links go through the other stems only. Common stems are those in more
# than COMMON_STEM_SHARE of the training answers (`common_stems`; the checkpoint keeps its set).
COMMON_STEM_SHARE = 0.05


@lru_cache(maxsize=1)
def _stop_words() -> frozenset:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(ENGLISH_STOP_WORDS)


def stems(text: str) -> list[str]:
    """Content-word stems of a text, in order (repeats kept)."""
    stop = _stop_words()
    return [word[:_STEM] for word in _WORD.findall(text.lower()) if len(word) > 2 and word not in stop]


def _cosine(a: Counter, b: Counter) -> float:
    if not a or not b:
        return 0.0
    weight_a = {k: 1.0 + math.log(v) for k, v in a.items()}
    weight_b = {k: 1.0 + math.log(v) for k, v in b.items()}
    dot = sum(w * weight_b[k] for k, w in weight_a.items() if k in weight_b)
    norm = math.sqrt(sum(w * w for w in weight_a.values())) * math.sqrt(sum(w * w for w in weight_b.values()))
    return dot / norm


@lru_cache(maxsize=4096)
def _prompt_stems(prompt: str) -> tuple[Counter, frozenset]:
    found = Counter(stems(prompt))
    return found, frozenset(found)


def _components(sentences: list[set]) -> list[int]:
    """Per sentence, its group: sentences sharing a stem, directly or through others, are one group."""
    parent = list(range(len(sentences)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first_with: dict[str, int] = {}
    for i, sentence in enumerate(sentences):
        for stem in sentence:
            j = first_with.setdefault(stem, i)
            parent[root(i)] = root(j)
    return [root(i) for i in range(len(sentences))]


@dataclass(frozen=True)
class _Support:
    relevance: float  # the prompt's and the answer's stem cosine
    sentences: int  # prose sentences of 3+ content stems
    unsupported: list[tuple[str, set]]  # those tied to nothing: text, stems
    repeats: list[str]  # those restating an earlier one
    anchors: frozenset = frozenset()  # the prompt's stems, the common ones aside
    common: frozenset = frozenset()  # the stems no chain goes through


def common_stems(texts: list[str], share: float = COMMON_STEM_SHARE) -> frozenset:
    """The stems in more than `share` of the texts (each distinct text counted once)."""
    distinct = list(dict.fromkeys(as_text(text) for text in texts))
    counts = Counter(stem for text in distinct for stem in set(stems(text)))
    return frozenset(stem for stem, count in counts.items() if count > share * len(distinct))


def _support(prompt: str, answer: str, common: frozenset = frozenset()) -> _Support:
    """The answer's words found once. A sentence is supported when it shares a stem other than the `common` ones
    with the prompt or, through a chain of such stems, with a sentence that does (a prompt with no such word: the
    largest group of sentences is the answer; an answer none of whose sentences shares one with a prompt that has
    some, another prompt's answer, has no supported sentence: fluent text for the wrong prompt is worth nothing to
    the length, style and n-gram terms, docs/crm.md run 29), or when it stands between two sentences that share
    such a stem with the prompt and restate nothing (a recipe's steps under its title: padding wraps an answer, it
    does not interleave with it; a chain is not enough, filler can chain through a bullet's bold label). A repeat
    restates one earlier sentence: all its stems but REPEAT_SLACK are in it, and at least REPEAT_SHARED."""
    prompt_counts, prompt_set = _prompt_stems(prompt)
    texts = _SENTENCE.split(_FENCED.sub(" ", answer))
    sentences = [stems(s) for s in texts]
    relevance = _cosine(prompt_counts, Counter(stem for sentence in sentences for stem in sentence))
    long_ones = [(text, set(s)) for text, s in zip(texts, sentences) if len(s) >= _MIN_SENTENCE_STEMS]
    repeats = [text for i, (text, stem_set) in enumerate(long_ones)
               if any(len(stem_set - earlier) <= REPEAT_SLACK < len(stem_set)
                      and len(stem_set & earlier) >= REPEAT_SHARED for _, earlier in long_ones[:i])]
    anchors = prompt_set - common
    if len(long_ones) < 2:
        return _Support(relevance, len(long_ones), [], repeats, anchors, common)
    groups = _components([stem_set - common for _, stem_set in long_ones])
    anchored = {group for group, (_, stem_set) in zip(groups, long_ones) if stem_set & anchors}
    if not anchored and not anchors:
        anchored = {Counter(groups).most_common(1)[0][0]}
    repeated = set(repeats)
    inside = [i for i, (text, stem_set) in enumerate(long_ones) if stem_set & anchors and text not in repeated]
    first, last = (inside[0], inside[-1]) if inside else (len(long_ones), -1)
    unsupported = [(text, stem_set) for i, (group, (text, stem_set)) in enumerate(zip(groups, long_ones))
                   if group not in anchored and not first < i < last]
    return _Support(relevance, len(long_ones), unsupported, repeats, anchors, common)


def _relevance_row(support: _Support) -> tuple[float, float, float]:
    """(prompt cosine, unsupported_sentence_share, unsupported content words)."""
    if support.sentences < 2:
        return support.relevance, 0.0, 0.0
    return (support.relevance, len(support.unsupported) / support.sentences,
            float(sum(len(s) for _, s in support.unsupported)))


def _view(answer: str, support: _Support) -> str:
    for text in [text for text, _ in support.unsupported] + support.repeats:
        answer = answer.replace(text, "", 1)
    lines = answer.split("\n")
    headings, in_code = [], False
    for line in lines:
        fence = bool(FENCE_LINE.match(line))
        headings.append(not (in_code or fence) and bool(HEADING_LINE.match(line)))  # a "# comment" in code is none
        in_code ^= fence
    if not any(headings):
        return answer
    said = (set(stems("\n".join(line for line, heading in zip(lines, headings) if not heading))) - support.common) \
        | support.anchors
    kept, following_text = [], False
    for line, heading in zip(reversed(lines), reversed(headings)):
        if heading and not (following_text and said.intersection(stems(line))):
            continue
        if line.strip():
            following_text = not heading
        kept.append(line)
    return "\n".join(reversed(kept))


def supported_text(prompt: object, answer: object, common: frozenset = frozenset()) -> str:
    """What of the answer adds something: without its unsupported sentences, its repeats of earlier sentences (a
    summary bullet restating the answer) and then its empty headings (a heading with no text before the next one
    or the end) and those that name nothing the prompt or the rest of the answer speaks of ("In-Depth Analysis",
    "Closing Remarks"; the common stems aside). The linear CRM's answer-only features and n-grams read this
    (`LinearConfig.supported_view`), so padding adds no length, bullets, bold marks or headings for the reward to
    pay for. Fenced code is kept."""
    answer = as_text(answer)
    return _view(answer, _support(as_text(prompt), answer, common))


def prompt_relevance(prompt: object, answer: object) -> float:
    return _support(as_text(prompt), as_text(answer)).relevance


def unsupported_sentence_share(prompt: object, answer: object) -> float:
    return _relevance_row(_support(as_text(prompt), as_text(answer)))[1]


def unfinished_ending(answer: object) -> float:
    text = as_text(answer).rstrip()
    return 1.0 if text and (text[-1].isalnum() or text[-1] == ",") and not text.endswith("```") else 0.0


def _row(support: _Support, answer: str) -> tuple[float, float, float, float]:
    relevance, share, words = _relevance_row(support)
    excess = max(words - UNSUPPORTED_TOLERANCE, 0.0)
    return min(relevance / FIT_COSINE, 1.0), share, math.log1p(excess), unfinished_ending(answer)


def relevance_and_views(prompts: list, answers: list, views: bool,
                        common: frozenset = frozenset()) -> tuple[np.ndarray, list[str]]:
    """One float32 row per (prompt, answer), columns in TEXT_RELEVANCE_FEATURES order, and with `views` each
    answer's supported_text (else the answer as text): each answer's sentences are found once for both. common:
    stems no chain goes through (`common_stems`)."""
    rows, found = [], []
    for prompt, answer in zip(prompts, answers):
        answer = as_text(answer)
        support = _support(as_text(prompt), answer, common)
        rows.append(_row(support, answer))
        found.append(_view(answer, support) if views else answer)
    return np.asarray(rows, dtype=np.float32).reshape(len(rows), len(TEXT_RELEVANCE_FEATURES)), found


def relevance_matrix(prompts: list, answers: list) -> np.ndarray:
    """One float32 row per (prompt, answer), columns in TEXT_RELEVANCE_FEATURES order."""
    return relevance_and_views(prompts, answers, views=False)[0]

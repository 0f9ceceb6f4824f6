"""What a user types or puts in the URL, read and checked before anything is scored.

The limits are scoring's own (usl_assets/scoring/profiles.py): at most MAX_CRITERIA criteria of at most
MAX_CRITERION_CHARS characters each. Every problem is a UslConfigError whose message the page shows as text.
"""

import html
from collections.abc import Iterable

from usl_assets.scoring.profiles import MAX_CRITERIA, MAX_CRITERION_CHARS, criteria_problem
from usl_assets.settings import UslConfigError

# Longer input cannot hold MAX_CRITERIA valid lines; it is refused before it is split.
MAX_INPUT_CHARS = MAX_CRITERIA * (MAX_CRITERION_CHARS + 2)
LIMITS_TEXT = f"at most {MAX_CRITERIA} criteria, one per line, each at most {MAX_CRITERION_CHARS} characters"


def criteria_lines(text: str | None) -> list[str]:
    """The criteria in a text box: one per non-blank line, surrounding blanks dropped."""
    if text is None:
        return []
    if not isinstance(text, str):
        raise UslConfigError("criteria must be text, one criterion per line")
    if len(text) > MAX_INPUT_CHARS:
        raise UslConfigError(f"the criteria are {len(text):,} characters long; the page takes {LIMITS_TEXT}")
    return [line.strip() for line in text.splitlines() if line.strip()]


def checked_criteria(text: str | None) -> list[str]:
    """Criteria ready to score, or a UslConfigError saying what to change."""
    lines = criteria_lines(text)
    if not lines:
        raise UslConfigError(f"type at least one criterion ({LIMITS_TEXT}), or pick a named profile")
    problem = criteria_problem(lines)
    if problem:
        raise UslConfigError(f"{problem} ({LIMITS_TEXT})")
    return lines


def checked_choice(value: object, known: Iterable[str], what: str) -> str:
    known = list(known)
    if not isinstance(value, str) or value not in known:
        shown = value if isinstance(value, str) else type(value).__name__
        raise UslConfigError(f"unknown {what} {shown[:80]!r}: choose one of {', '.join(known)}")
    return value


def checked_topics(values: object, known: Iterable[str]) -> list[str]:
    """Topics (scenario groups or scenarios) the pool has, in the order given, without repeats."""
    if values is None:
        return []
    if isinstance(values, str):
        values = [v.strip() for v in values.split(",") if v.strip()]
    if not isinstance(values, list | tuple):
        raise UslConfigError("topics must be a list of scenario groups or scenarios")
    known = set(known)
    unknown = [str(v)[:80] for v in values if v not in known]
    if unknown:
        raise UslConfigError(f"unknown topic {', '.join(map(repr, unknown))}: tick topics from the list")
    return list(dict.fromkeys(values))


def as_text(value: object) -> str:
    """User text put into Markdown: HTML-escaped, so a tag or a script is shown, never run."""
    return html.escape(str(value), quote=True).replace("*", "&#42;").replace("_", "&#95;").replace("`", "&#96;")

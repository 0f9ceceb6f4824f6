"""Answers built to fool a judge (AlpacaEval's "null models", Zheng et al. 2024): the same five tricks teach the
CRM (crm/gaming_pairs.py: each loses to the real answer), test it (the gaming_pairs split) and audit every
leaderboard (leaderboards/audits.py: probe models derived from a pool's own answers).

- off_topic: a real answer given to another prompt (the caller picks which: `shifted`);
- generic: one polished, well-formatted answer that fits any prompt;
- echo: a polite restatement of the request that answers nothing;
- padded: a real answer wrapped in headings, bold summary bullets and filler sentences;
- truncated: a real answer cut to its first eighth.

Two disjoint text banks, `train` and `heldout`: training rows use only `train`; the gaming_pairs split and the
leaderboard audit use only `heldout`, so a CRM that merely learned the training filler's n-grams fails them.
Every choice is a seeded hash of the caller's key (crm/splits.unit_hash): no row order, no clock.
"""

import re

from usl_assets.crm.splits import pick, unit_hash

KINDS = ("off_topic", "generic", "echo", "padded", "truncated")
BANKS = ("train", "heldout")
TRUNCATED_SHARE = 1 / 8

_FILLER = {
    "train": (
        "It is important to consider every aspect of this topic carefully before drawing conclusions.",
        "There are many factors at play here, and each of them deserves attention.",
        "Ultimately, the best approach depends on your specific needs and circumstances.",
        "This is a nuanced subject, and different people may see it differently.",
        "Keeping these points in mind will help you make a well-informed decision.",
        "By following these guidelines, you can achieve the best possible results.",
        "It is always a good idea to do further research and consult reliable sources.",
        "Remember that every situation is unique and may require a tailored approach.",
    ),
    "heldout": (
        "In today's fast-paced world, understanding this matter has never been more essential.",
        "Experts agree that a thoughtful, balanced perspective yields the most value over time.",
        "Taking a holistic view ensures that no crucial detail is overlooked along the way.",
        "With the right mindset and a clear plan, success becomes far more attainable.",
        "Each of these considerations plays a vital role in the overall outcome.",
        "Staying informed and adaptable is the key to navigating such questions effectively.",
        "Careful reflection on these elements leads to better, more sustainable choices.",
        "Embracing best practices empowers you to move forward with confidence.",
    ),
}
_HEADINGS = {
    "train": ("## Overview", "## Details", "## Key Takeaways", "## Summary"),
    "heldout": ("### Introduction", "### In-Depth Analysis", "### Closing Remarks", "### At a Glance"),
}
_BOLD_LEADS = {
    "train": ("Key point", "Important", "Remember", "Note"),
    "heldout": ("Bottom line", "Pro tip", "Crucial insight", "Takeaway"),
}
_GENERIC = {
    "train": (
        "## Overview\n\nThis is a great question, and there are several important aspects to consider.\n\n"
        "1. **Understand the context**: Every situation is different, so start with the basics.\n"
        "2. **Consider your options**: Weigh the advantages and disadvantages of each approach.\n"
        "3. **Take action**: Choose the option that best fits your goals.\n\n"
        "## Conclusion\n\nBy keeping these points in mind, you will be well prepared to handle it successfully.",
        "Thank you for your question! Here is a comprehensive answer.\n\n"
        "- **First**, it is essential to gather all relevant information.\n"
        "- **Second**, analyze the information carefully and objectively.\n"
        "- **Third**, apply what you have learned in a practical way.\n\n"
        "**In summary**, a structured approach like this works well in almost every case. Let me know if you "
        "need more details!",
        "Certainly! Below is a detailed explanation.\n\n### Background\nThis topic has a long history and many "
        "perspectives.\n\n### Main Points\n- It matters for many people.\n- There are both benefits and "
        "challenges.\n- Careful planning makes a difference.\n\n### Final Thoughts\nIn the end, the right "
        "answer depends on your goals and priorities.",
    ),
    "heldout": (
        "# A Complete Guide\n\nGreat question! Let's break this down step by step.\n\n"
        "## 1. Why It Matters\nUnderstanding the fundamentals is the foundation of any good outcome.\n\n"
        "## 2. Best Practices\n- **Plan ahead**: Clarity of purpose saves time later.\n"
        "- **Stay consistent**: Small, steady efforts compound.\n- **Review and adjust**: Learn from each "
        "step.\n\n## 3. Common Pitfalls\n- Rushing without preparation\n- Ignoring feedback\n\n"
        "## Wrapping Up\n**Key takeaway:** with a clear plan and steady effort, you can achieve excellent results. "
        "I hope this helps!",
        "Absolutely, here's an in-depth look.\n\n**Summary:** The answer involves several interconnected "
        "factors.\n\n1. **Context** – Start by understanding the bigger picture.\n2. **Details** – Examine the "
        "specifics closely.\n3. **Application** – Put the insights into practice.\n\n**Bottom line:** a "
        "thoughtful, balanced approach is always the most reliable path forward.",
    ),
}
_ECHO = {
    "train": (
        "Thank you for your question. You asked: \"{prompt}\" That is an interesting request, and I am happy "
        "to help you with it.",
        "I understand that you would like help with the following: {prompt} This is a great question.",
        "Great question! To restate it: {prompt} Let me know if there is anything else you would like.",
    ),
    "heldout": (
        "Sure! You would like to know: \"{prompt}\" I appreciate you reaching out about this, and it is "
        "certainly worth thinking about.",
        "What a thoughtful request. Here it is again so we are on the same page: {prompt} I hope this helps!",
    ),
}
_WORD = re.compile(r"\S+")


def _check_bank(bank: str) -> None:
    if bank not in BANKS:
        raise ValueError(f"bank must be one of {', '.join(BANKS)}, not {bank!r}")


def generic(bank: str, seed: int, *key: object) -> str:
    """One of the bank's generic answers, fixed by the key (the audit passes a constant key: one answer for all)."""
    _check_bank(bank)
    return pick(_GENERIC[bank], seed, "generic", *key)


def echo(prompt: str, bank: str, seed: int, *key: object) -> str:
    """A polite restatement of the request that answers nothing."""
    _check_bank(bank)
    return pick(_ECHO[bank], seed, "echo", *key).format(prompt=" ".join(str(prompt).split()))


def truncated(answer: str, share: float = TRUNCATED_SHARE) -> str:
    """The answer cut to its first `share` of words (at least one word)."""
    words = _WORD.findall(str(answer))
    return " ".join(words[:max(1, int(len(words) * share))])


def _first_sentences(answer: str, count: int) -> list[str]:
    sentences = [s.strip(" -*#\t") for s in re.split(r"(?<=[.!?])\s+|\n+", str(answer))]
    return [s for s in sentences if len(s.split()) >= 3][:count]


def _dressed(answer: str, bank: str, seed: int, key: tuple, with_filler: bool) -> str:
    _check_bank(bank)
    filler = sorted(_FILLER[bank], key=lambda text: unit_hash(seed, "filler", text, *key))
    headings, leads = _HEADINGS[bank], _BOLD_LEADS[bank]
    own = _first_sentences(answer, 4) or [str(answer).strip()]
    summary = own[:2] + filler[3:5] if with_filler else [own[i % len(own)] for i in range(4)]
    bullets = "\n".join(f"- **{leads[i % len(leads)]}:** {line}" for i, line in enumerate(summary))
    if not with_filler:
        return f"{headings[0]}\n\n{headings[1]}\n\n{str(answer).strip()}\n\n{headings[2]}\n\n{bullets}\n\n{headings[3]}"
    return (f"{headings[0]}\n\n{filler[0]} {filler[1]}\n\n{headings[1]}\n\n{str(answer).strip()}\n\n"
            f"{filler[2]}\n\n{headings[2]}\n\n{bullets}\n\n{headings[3]}\n\n{filler[5]} {filler[6]}")


def padded(answer: str, bank: str, seed: int, *key: object) -> str:
    """The answer under a heading, with filler sentences before and after it and a section of bold summary
    bullets (a few of its own sentences and filler) at the end."""
    return _dressed(answer, bank, seed, key, with_filler=True)


def reformatted(answer: str, bank: str, seed: int, *key: object) -> str:
    """`padded` without the filler: the same headings and bold bullets, the bullets repeating its own sentences.
    Training pairs it with the answer at even odds, so the reward learns that padding loses for its filler, and
    that headings alone are worth what the criteria say (crm/gaming_pairs.py)."""
    return _dressed(answer, bank, seed, key, with_filler=False)


def shifted(keys: list, seed: int, *salt: object) -> list[int]:
    """For each position, the position of another key whose item stands in for it (a seeded derangement:
    off-topic answers). Fewer than two distinct keys: no position can move (-1 each)."""
    order = sorted(range(len(keys)), key=lambda i: unit_hash(seed, "shift", keys[i], *salt))
    found = [-1] * len(keys)
    for rank, position in enumerate(order):
        for step in range(1, len(order)):
            other = order[(rank + step) % len(order)]
            if keys[other] != keys[position]:
                found[position] = other
                break
    return found

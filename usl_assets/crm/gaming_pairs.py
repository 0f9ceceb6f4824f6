"""Gaming rows of crm.training_pairs: a real answer against the same prompt's answer built to fool a judge
(crm/gaming.py: off-topic, generic, echo, padded, truncated), the real answer winning under the pair's own criteria.

Train rows come from the train split's labelled pairs (every human pair, all five tricks; a seeded share of the AI
judge's, one trick each) with the `train` text bank. The `gaming_pairs` test split holds them out twice over: by
prompt (human_heldout's pairs) and by model (judge_heldout_models' pairs, answers of models no train row has),
with the `heldout` text bank, one trick per pair. The real answer is the pair's chosen one; the off-topic answer
is the chosen answer of another pair of the same group, to another prompt. Train off-topic rows come twice: the
off-topic answer also loses to the pair's rejected answer (`weak_real`), since a leaderboard must put an answer to
another prompt below every real model, the weakest included, not only below a good answer.

Gaming rows carry label_kind 'gaming': certain labels (the padded answer's filler-free `gaming_reformatted` twin at
even odds), with nuisance coefficients of their own for markdown and a truncated answer's length, outside the
reward (crm/linear.py, `gaming_nuisance`).

A wish must not buy a trick either: under "keep it short" an echo of the request or an answer cut to its first
eighth is shorter than any real answer. The `gaming_wishes` test split measures it: each gaming_pairs row again
under a wish its trick's answer meets better than the real one (a trained property the two clearly differ in,
seeded; a held-out family's phrasing of the direction the trick's answer has more of), the real answer still
winning. Such a row names the wish in `property` and `property_direction` (its criteria's direction, under which
the chosen answer wins all the same). Prompts, models, text bank and wording are all held out. Training on such
rows was tried and not kept (docs/crm.md, run 27).
"""

from dataclasses import dataclass

from usl_assets.crm import gaming
from usl_assets.crm.features import response_counts
from usl_assets.crm.judge_pairs import HELDOUT_SPLIT, JUDGE_SOURCE
from usl_assets.crm.properties import PROPERTIES, pair_properties
from usl_assets.crm.splits import pick, prompt_key, unit_hash

SPLIT = "gaming_pairs"
WISH_SPLIT = "gaming_wishes"
LABEL_KIND = "gaming"
AUGMENTATIONS = (*(f"gaming_{kind}" for kind in gaming.KINDS), "gaming_reformatted")
TEST_SOURCE_SPLITS = ("human_heldout", HELDOUT_SPLIT)
# Tricks trained to lose to the pair's worse answer too. Generic and echo rows were tried as well: they cost the
# agreement with LMArena and PandaLM and were not needed (docs/crm.md, dev runs 10-13).
WEAK_REAL_KINDS = ("off_topic",)


@dataclass(frozen=True)
class GamingConfig:
    seed: int = 17
    judge_train_rate: float = 0.1  # share of the judge's train pairs that get one gaming row
    judge_test_rate: float = 0.06  # share of judge_heldout_models' pairs that get one gaming_pairs row
    weak_real: bool = True  # train rows: the WEAK_REAL_KINDS answers also lose to the pair's rejected answer
    wish_properties: tuple[str, ...] = ()  # trained properties a gaming_wishes row's wish may name; () no such rows


def _selected(row: dict, config: GamingConfig) -> str | None:
    """Which rows get gaming rows: 'all' (every trick), 'one', or None."""
    if row["augmentation"] != "original" or row["source"] == "hh_rlhf_harmless":
        return None
    is_judge = row["source"] == JUDGE_SOURCE
    if row["split"] == "train":
        if not is_judge:
            return "all"
        return "one" if unit_hash(config.seed, "gaming-train", row["origin_idx"]) < config.judge_train_rate else None
    if row["split"] in TEST_SOURCE_SPLITS:
        if not is_judge:
            return "one"
        return "one" if unit_hash(config.seed, "gaming-test", row["origin_idx"]) < config.judge_test_rate else None
    return None


def _weaker_side(row: dict) -> dict:
    """The row with its rejected answer as the real one: a worse answer to the prompt still beats no answer."""
    return {**row, "chosen": row["rejected"], "chosen_model": row.get("rejected_model")}


def _gamed(row: dict, kind: str, bank: str, other: dict | None, seed: int, *salt: str) -> dict | None:
    key = (row["origin_idx"], kind, *salt)
    real = str(row["chosen"])
    if kind == "off_topic":
        if other is None:
            return None
        text, model = str(other["chosen"]), other["chosen_model"]
    elif kind == "generic":
        text, model = gaming.generic(bank, seed, *key), None
    elif kind == "echo":
        text, model = gaming.echo(row["prompt"], bank, seed, *key), None
    elif kind == "padded":
        text, model = gaming.padded(real, bank, seed, *key), row["chosen_model"]
    elif kind == "reformatted":
        text, model = gaming.reformatted(real, bank, seed, *key), row["chosen_model"]
    else:
        text, model = gaming.truncated(real), row["chosen_model"]
    if text.strip() == real.strip():
        return None
    return {**row, "split": "train" if bank == "train" else SPLIT, "rejected": text,
            "augmentation": f"gaming_{kind}", "human_label": None, "chosen_is_longer": len(real) > len(text),
            "property": None, "property_direction": None, "label_kind": LABEL_KIND,
            "soft_label": 0.5 if kind == "reformatted" else 1.0, "rejected_model": model}


def _under_wish(row: dict, config: GamingConfig) -> dict | None:
    """A gaming_pairs row again under a wish its trick's answer meets better, in the gaming_wishes split; None when
    the two answers differ in no property."""
    sides = pair_properties(response_counts(str(row["chosen"])), response_counts(str(row["rejected"])))
    options = [name for name in config.wish_properties if name in sides]
    if not options:
        return None
    key = (row["origin_idx"], row["augmentation"], row["rejected"])
    name = pick(options, config.seed, "gaming-wish", *key)
    direction = "more" if sides[name] == "b" else "less"
    phrasing = pick(PROPERTIES[name].phrasings(direction, "paraphrase"), config.seed, "gaming-wish-phrasing", *key)
    return {**row, "split": WISH_SPLIT, "criteria": [phrasing], "property": name, "property_direction": direction}


def gaming_rows(rows: list[dict], config: GamingConfig) -> list[dict]:
    """The gaming rows of a training table's rows (dicts with crm.training_pairs' columns, before pair_id)."""
    chosen = [(row, _selected(row, config)) for row in rows]
    chosen = [(row, how) for row, how in chosen if how]
    groups: dict[tuple, list[int]] = {}
    for i, (row, _) in enumerate(chosen):
        group = (row["split"] == "train", row["source"] == JUDGE_SOURCE, row["split"])
        groups.setdefault(group, []).append(i)
    other_of: dict[int, int] = {}
    for group, members in groups.items():
        keys = [prompt_key(chosen[i][0]["prompt"]) for i in members]
        for i, j in zip(members, gaming.shifted(keys, config.seed, *group)):
            if j >= 0:
                other_of[i] = members[j]
    found = []
    for i, (row, how) in enumerate(chosen):
        bank = "train" if row["split"] == "train" else "heldout"
        kinds = gaming.KINDS if how == "all" else (pick(gaming.KINDS, config.seed, "gaming-kind", row["origin_idx"]),)
        if bank == "train" and "padded" in kinds:  # its filler-free twin, at even odds
            kinds = (*kinds, "reformatted")
        other = chosen[other_of[i]][0] if i in other_of else None
        reals = [(row, kind, ()) for kind in kinds]
        if bank == "train" and config.weak_real:
            reals += [(_weaker_side(row), kind, ("weak",)) for kind in kinds if kind in WEAK_REAL_KINDS]
        for real, kind, salt in reals:
            gamed = _gamed(real, kind, bank, other, config.seed, *salt)
            if gamed is not None:
                found.append(gamed)
                wished = _under_wish(gamed, config) if bank == "heldout" else None
                if wished is not None:
                    found.append(wished)
    return found

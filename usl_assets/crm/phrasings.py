"""How criteria word each measurable property (property_phrasings.yaml): phrasings in families per property and
direction, the families held out of training, and combined criteria that name two properties at once
(docs/crm_training_data.md, "Phrasings"). crm/properties.py joins them to the rules that measure the properties.

Pools of one property direction:
- `train`: every train family's phrasings but its last (train rows);
- `new_criteria`: the last phrasing of each train family (the new_criteria split);
- `train_families`: all train-family phrasings (new_criteria's rows of the held-out properties);
- `paraphrase`: the held-out families' phrasings (the criteria_paraphrase split);
- `any`: everything.
"""

from dataclasses import dataclass
from pathlib import Path

import yaml

DIRECTIONS = ("more", "less")
POOLS = ("train", "new_criteria", "train_families", "paraphrase", "any")
MIN_PER_FAMILY = 4  # a train family needs a train pool and a held-out phrasing; four keep the wording varied

Families = tuple[tuple[str, str, tuple[str, ...]], ...]  # (direction, family, phrasings), in the file's order


def family_phrasings(families: Families, direction: str) -> dict[str, tuple[str, ...]]:
    return {family: texts for d, family, texts in families if d == direction}


def pool_phrasings(families: Families, heldout_families: tuple[str, ...], direction: str,
                   pool: str) -> tuple[str, ...]:
    """The phrasings of one direction in one pool (module docstring)."""
    if pool not in POOLS:
        raise ValueError(f"unknown phrasing pool {pool!r}; choose from {POOLS}")
    found: list[str] = []
    for family, texts in family_phrasings(families, direction).items():
        held = family in heldout_families
        if pool == "any" or (pool == "paraphrase" and held) or (pool == "train_families" and not held):
            found += texts
        elif pool == "train" and not held:
            found += texts[:-1]
        elif pool == "new_criteria" and not held:
            found += texts[-1:]
    return tuple(found)


@dataclass(frozen=True)
class CombinedCriterion:
    """A criterion naming two (or more) properties with a direction each; `heldout` ones never train."""

    directions: tuple[tuple[str, str], ...]  # (property, direction) in the properties' order
    texts: tuple[str, ...]
    heldout: bool = False

    @property
    def name(self) -> str:
        """The row's `property`: the properties joined with '+'."""
        return "+".join(prop for prop, _ in self.directions)

    @property
    def direction(self) -> str:
        """The row's `property_direction`: the directions joined with '+'."""
        return "+".join(direction for _, direction in self.directions)

    def winner(self, more_sides: dict[str, str]) -> str | None:
        """The side ('a'/'b') that wins under every named direction, when the pair clearly differs in all the
        properties (more_sides: property -> the side with clearly more of it); None otherwise."""
        sides = set()
        for prop, direction in self.directions:
            if prop not in more_sides:
                return None
            more = more_sides[prop]
            sides.add(more if direction == "more" else ("b" if more == "a" else "a"))
        return sides.pop() if len(sides) == 1 else None


@dataclass(frozen=True)
class PhrasingBook:
    families: tuple[str, ...]
    heldout_families: tuple[str, ...]
    properties: dict[str, Families]
    combined: tuple[CombinedCriterion, ...]

    @property
    def train_families(self) -> tuple[str, ...]:
        return tuple(family for family in self.families if family not in self.heldout_families)


def _names(value: object, what: str, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValueError(f"{where}: {what} must be a non-empty list of names")
    return tuple(value)


def _texts(value: object, least: int, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) < least or not all(isinstance(t, str) and t.strip() for t in value):
        raise ValueError(f"{where} needs at least {least} non-empty phrasings")
    return tuple(value)


def _property_families(name: str, found: object, book: dict, where: str) -> Families:
    families: list[tuple[str, str, tuple[str, ...]]] = []
    for direction in DIRECTIONS:
        by_family = (found or {}).get(direction) if isinstance(found, dict) else None
        if not isinstance(by_family, dict) or not by_family:
            raise ValueError(f"{where}: {name}.{direction} needs phrasings in families "
                             f"({', '.join(book['families'])})")
        unknown = sorted(set(by_family) - set(book["families"]))
        if unknown:
            raise ValueError(f"{where}: {name}.{direction} has undeclared families {unknown}; declare them under "
                             "`families`")
        missing = [family for family in book["heldout_families"] if family not in by_family]
        if missing:
            raise ValueError(f"{where}: {name}.{direction} lacks the held-out families {missing}")
        if set(by_family) <= set(book["heldout_families"]):
            raise ValueError(f"{where}: {name}.{direction} needs at least one train family")
        for family in book["families"]:  # the declared order, whatever the file's
            if family in by_family:
                texts = _texts(by_family[family], MIN_PER_FAMILY, f"{where}: {name}.{direction}.{family}")
                families.append((direction, family, texts))
    return tuple(families)


def _combined(entries: object, order: list[str], where: str) -> tuple[CombinedCriterion, ...]:
    if entries is None:
        return ()
    if not isinstance(entries, list):
        raise ValueError(f"{where}: combined must be a list of entries")
    found = []
    for number, entry in enumerate(entries):
        at = f"{where}: combined[{number}]"
        props = entry.get("properties") if isinstance(entry, dict) else None
        if not isinstance(props, dict) or len(props) < 2:
            raise ValueError(f"{at} needs `properties` naming at least two properties with a direction each")
        unknown = sorted(set(props) - set(order))
        if unknown or not set(props.values()) <= set(DIRECTIONS):
            raise ValueError(f"{at}: properties {props} must be measured properties ({', '.join(order)}) with a "
                             "direction more/less")
        heldout = entry.get("heldout", False)
        if not isinstance(heldout, bool):
            raise ValueError(f"{at}: heldout must be true or false")
        directions = tuple((prop, props[prop]) for prop in order if prop in props)
        found.append(CombinedCriterion(directions, _texts(entry.get("texts"), 1, at), heldout))
    return tuple(found)


def load_phrasings(path: Path, property_names: list[str]) -> PhrasingBook:
    """The phrasing families, held-out families and combined criteria of `path`; fails loudly on a missing or
    stray property, an undeclared family, a direction without a held-out family or a train family, a family with
    fewer than MIN_PER_FAMILY phrasings, a phrasing used twice, or a malformed combined entry."""
    where = path.name
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a mapping with families, heldout_families, properties")
    families = _names(raw.get("families"), "families", where)
    heldout = _names(raw.get("heldout_families"), "heldout_families", where)
    undeclared = sorted(set(heldout) - set(families))
    if undeclared:
        raise ValueError(f"{where}: heldout_families {undeclared} are not declared under `families`")
    if set(families) <= set(heldout):
        raise ValueError(f"{where}: heldout_families holds out every family: leave at least one for training")
    book = {"families": families, "heldout_families": heldout}
    phrasings = raw.get("properties") or {}
    if set(phrasings) != set(property_names):
        raise ValueError(f"{where}: properties {sorted(phrasings)} differ from the measured ones "
                         f"{sorted(property_names)}")
    properties = {name: _property_families(name, phrasings[name], book, where) for name in property_names}
    combined = _combined(raw.get("combined"), list(property_names), where)
    seen: set[str] = set()
    every = [t for fams in properties.values() for _, _, texts in fams for t in texts]
    for text in every + [t for entry in combined for t in entry.texts]:
        key = " ".join(text.lower().split())
        if key in seen:
            raise ValueError(f"{where}: the phrasing {text!r} appears twice (a held-out phrasing must never be "
                             "a train one)")
        seen.add(key)
    return PhrasingBook(families, heldout, properties, combined)

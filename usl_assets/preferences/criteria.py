"""Auto-J's scenarios, groups and per-scenario criteria, read from the public data folder.

The criteria YAML files use a custom tag, `!include "./other_resources/scenario_criteria/basics/<file>.yaml"`,
which refers to `autoj_scenario_criteria/basics/<file>.yaml`; the loader resolves it.
"""

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

SCENARIOS_FILE = "preferences/autoj_scenarios.json"
CRITERIA_DIR = "preferences/autoj_scenario_criteria"


@dataclass(frozen=True)
class Criterion:
    scenario: str
    name: str
    content: str
    weight: int
    type: str  # basic, content, format, style


@dataclass(frozen=True)
class Scenarios:
    descriptions: dict[str, str]  # scenario -> one-line description
    groups: dict[str, list[str]]  # group -> scenarios

    def group_of(self, scenario: str) -> str | None:
        for group, members in self.groups.items():
            if scenario in members:
                return group
        return None


def load_scenarios(data_root: Path) -> Scenarios:
    raw = json.loads((data_root / SCENARIOS_FILE).read_text(encoding="utf-8"))
    return Scenarios(descriptions=raw["scenarios"], groups=raw["groups"])


def _include_loader(basics_dir: Path) -> type:
    class IncludeLoader(yaml.SafeLoader):
        pass

    def include(loader: yaml.SafeLoader, node: yaml.Node) -> dict:
        target = basics_dir / Path(loader.construct_scalar(node)).name
        return yaml.load(target.read_text(encoding="utf-8"), Loader=IncludeLoader) or {}

    IncludeLoader.add_constructor("!include", include)
    return IncludeLoader


def _flatten(scenario: str, tree: dict) -> list[Criterion]:
    """A criteria file nests groups (e.g. `basic-writing`, `extended`) of named criteria; keep the leaves."""
    found = []
    for name, value in tree.items():
        if isinstance(value, dict) and "content" in value:
            found.append(
                Criterion(scenario, str(name), str(value["content"]).strip(), int(value.get("weight", 1)),
                          str(value.get("type", "basic")))
            )
        elif isinstance(value, dict):
            found.extend(_flatten(scenario, value))
    return found


@lru_cache(maxsize=4)
def load_scenario_criteria(data_root: Path) -> dict[str, list[Criterion]]:
    """scenario -> its criteria, heaviest first. Scenarios without a file of their own get `others`' criteria."""
    criteria_dir = data_root / CRITERIA_DIR
    loader = _include_loader(criteria_dir / "basics")
    by_scenario = {}
    for path in sorted((criteria_dir / "specials").glob("*.yaml")):
        tree = yaml.load(path.read_text(encoding="utf-8"), Loader=loader) or {}
        by_scenario[path.stem] = sorted(_flatten(path.stem, tree), key=lambda c: (-c.weight, c.name))
    fallback = by_scenario.get("others", [])
    for scenario in load_scenarios(data_root).descriptions:
        by_scenario.setdefault(scenario, [Criterion(scenario, c.name, c.content, c.weight, c.type) for c in fallback])
    return by_scenario


def criteria_texts(data_root: Path, scenario: str | None) -> list[str]:
    """The criteria of a scenario as plain text lines, as they go into the CRM's system prompt."""
    if not scenario:
        return []
    return [c.content for c in load_scenario_criteria(data_root).get(scenario, [])]

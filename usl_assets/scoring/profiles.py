"""Criteria profiles: the sets of criteria the CRM scores responses under.

Three kinds (scoring.criteria_profiles.kind):
- scenario_default: one per Auto-J scenario, its criteria (heaviest first), profile name "default:<scenario>";
- named: read from criteria_profiles.yaml (or a configured file);
- adhoc: criteria a user typed for a custom leaderboard, named "adhoc:<criteria_hash>".
A profile is identified for caching by criteria_hash, a hash of its criteria lines in order.
"""

import hashlib
import importlib.resources
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from usl_assets.preferences.criteria import criteria_texts, load_scenarios
from usl_assets.settings import UslConfigError

PROFILES_TABLE = "scoring.criteria_profiles"
DEFAULT_PROFILES_FILE = importlib.resources.files("usl_assets.scoring") / "criteria_profiles.yaml"  # package data
PROFILE_COLUMNS = ["profile", "kind", "scenario", "criteria", "criteria_hash"]
MAX_CRITERIA = 20
MAX_CRITERION_CHARS = 500


@dataclass(frozen=True)
class RejectedProfile:
    profile: str
    reason: str


def normalize_criteria(criteria: Sequence[str]) -> tuple[str, ...]:
    return tuple(" ".join(str(line).split()) for line in criteria)


def criteria_hash(criteria: Sequence[str]) -> str:
    """16 hex digits of sha256 over the criteria lines in order (whitespace-normalized)."""
    joined = "\n".join(normalize_criteria(criteria))
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()[:16]


def default_profile_name(scenario: str) -> str:
    return f"default:{scenario}"


def adhoc_profile_name(criteria: Sequence[str]) -> str:
    return f"adhoc:{criteria_hash(criteria)}"


def criteria_problem(criteria: object) -> str | None:
    """Why a criteria list cannot be scored, or None when it can."""
    if not isinstance(criteria, list | tuple) or not criteria:
        return "criteria must be a non-empty list of text lines"
    if len(criteria) > MAX_CRITERIA:
        return f"{len(criteria)} criteria; at most {MAX_CRITERIA}"
    for line in criteria:
        if not isinstance(line, str) or not line.strip():
            return f"criterion {line!r} is not a non-empty text line"
        if len(line) > MAX_CRITERION_CHARS:
            return f"a criterion has {len(line)} characters; at most {MAX_CRITERION_CHARS}"
    return None


def profile_row(profile: str, kind: str, scenario: str | None, criteria: Sequence[str]) -> dict:
    lines = list(normalize_criteria(criteria))
    return {"profile": profile, "kind": kind, "scenario": scenario, "criteria": lines,
            "criteria_hash": criteria_hash(lines)}


def scenario_default_profiles(data_root: Path) -> pd.DataFrame:
    scenarios = sorted(load_scenarios(data_root).descriptions)
    rows = [profile_row(default_profile_name(s), "scenario_default", s, criteria_texts(data_root, s))
            for s in scenarios]
    return pd.DataFrame(rows, columns=PROFILE_COLUMNS)


def read_profiles_file(path: Path) -> list:
    """The raw entries of a profiles YAML; a missing or unparseable file is a configuration error."""
    if not path.is_file():
        raise UslConfigError(f"criteria profiles file {path} does not exist: fix the path or leave it empty")
    try:
        content = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise UslConfigError(f"criteria profiles file {path} is not valid YAML: {str(error).splitlines()[0]}")
    entries = content.get("profiles") if isinstance(content, dict) else None
    if not isinstance(entries, list):
        raise UslConfigError(f"criteria profiles file {path} needs a top-level `profiles:` list")
    return entries


def named_profiles(entries: list) -> tuple[pd.DataFrame, list[RejectedProfile]]:
    """Valid entries as profile rows; each invalid one (bad name, bad criteria, duplicate) with its reason."""
    rows, rejected, seen = [], [], set()
    for position, entry in enumerate(entries, start=1):
        name = entry.get("name") if isinstance(entry, dict) else None
        label = name if isinstance(name, str) and name.strip() else f"entry {position}"
        problem = _entry_problem(entry, seen)
        if problem:
            rejected.append(RejectedProfile(label, problem))
            continue
        seen.add(name.strip())
        rows.append(profile_row(name.strip(), "named", None, entry["criteria"]))
    return pd.DataFrame(rows, columns=PROFILE_COLUMNS), rejected


def _entry_problem(entry: object, seen: set[str]) -> str | None:
    if not isinstance(entry, dict):
        return "not a mapping with `name` and `criteria`"
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        return "missing `name`"
    if name.strip() in seen:
        return "duplicate name"
    if name.strip().startswith(("default:", "adhoc:")):
        return "names starting with default: or adhoc: are reserved"
    return criteria_problem(entry.get("criteria"))


def build_profiles(
    data_root: Path, profiles_file: Path, adhoc: pd.DataFrame | None = None
) -> tuple[pd.DataFrame, list[RejectedProfile]]:
    """Every profile: scenario defaults, named ones from the file, and the ad hoc ones kept from earlier runs."""
    named, rejected = named_profiles(read_profiles_file(profiles_file))
    parts = [scenario_default_profiles(data_root), named]
    if adhoc is not None and len(adhoc):
        parts.append(adhoc.loc[adhoc["kind"] == "adhoc", PROFILE_COLUMNS])
    profiles = pd.concat(parts, ignore_index=True)
    profiles["criteria"] = profiles["criteria"].map(list)
    return profiles, rejected

"""The Dagster instance the `usl` commands run on: DAGSTER_HOME, or `$USL_HOME/dagster` with the embedded default."""

import importlib.resources
import os
from pathlib import Path

import dagster as dg

from usl_assets.settings import UslConfigError, usl_home

EMBEDDED_INSTANCE_YAML = importlib.resources.files("usl_assets") / "dagster.yaml"


def dagster_home() -> Path:
    """DAGSTER_HOME, or `$USL_HOME/dagster` when unset; a missing folder is created with the embedded default
    instance (usl_assets/dagster.yaml: SQLite, one step at a time per pool). An existing dagster.yaml is kept."""
    configured = os.environ.get("DAGSTER_HOME", "")
    home = Path(configured).expanduser().resolve() if configured else usl_home() / "dagster"
    if home.exists() and not home.is_dir():
        raise UslConfigError(f"DAGSTER_HOME={home} is not a folder")
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        (home / "dagster.yaml").write_text(EMBEDDED_INSTANCE_YAML.read_text(encoding="utf-8"))
    return home


def open_instance() -> dg.DagsterInstance:
    """The Dagster instance of dagster_home()."""
    return dg.DagsterInstance.from_config(str(dagster_home()))

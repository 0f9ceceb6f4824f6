"""The one Definitions of the code location: each stage contributes its own `defs`; resources live here.

Stages are imported as modules, not their `defs` objects: Dagster refuses a module that holds more than one
Definitions at module scope, and `dagster dev -m usl_assets.definitions` would fail to load the location.
"""

import dagster as dg

from usl_assets import jobs
from usl_assets.crm import assets as crm_model_assets
from usl_assets.crm import data_assets as crm_data_assets
from usl_assets.leaderboards import assets as leaderboards_assets
from usl_assets.preferences import assets as preferences_assets
from usl_assets.preferences import tagging_assets as preferences_tagging_assets
from usl_assets.resources import default_resources
from usl_assets.responses import assets as responses_assets
from usl_assets.responses import endpoint_assets as responses_endpoint_assets
from usl_assets.responses import sensors as responses_sensors
from usl_assets.scoring import assets as scoring_assets

STAGE_MODULES = [
    preferences_assets,
    preferences_tagging_assets,
    crm_data_assets,
    crm_model_assets,
    responses_assets,
    responses_endpoint_assets,
    responses_sensors,
    scoring_assets,
    leaderboards_assets,
]


def build_definitions(resources: dict | None = None) -> dg.Definitions:
    """All stages with the default resources, or with some of them replaced (tests, other deployments)."""
    merged = dg.Definitions.merge(*(module.defs for module in STAGE_MODULES))
    return dg.Definitions(
        assets=merged.assets,
        asset_checks=merged.asset_checks,
        jobs=[*(merged.jobs or []), *jobs.phase_jobs(merged.assets)],
        sensors=merged.sensors,
        schedules=merged.schedules,
        resources={**default_resources(), **(merged.resources or {}), **(resources or {})},
    )


defs = build_definitions()

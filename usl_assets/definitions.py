"""The one Definitions of the code location: each stage contributes its own `defs`; resources live here."""

import dagster as dg

from usl_assets.crm.assets import defs as crm_model_defs
from usl_assets.crm.data_assets import defs as crm_data_defs
from usl_assets.leaderboards.assets import defs as leaderboards_defs
from usl_assets.preferences.assets import defs as preferences_defs
from usl_assets.preferences.tagging_assets import defs as preferences_tagging_defs
from usl_assets.resources import default_resources
from usl_assets.responses.assets import defs as responses_defs
from usl_assets.scoring.assets import defs as scoring_defs

STAGES = [
    preferences_defs,
    preferences_tagging_defs,
    crm_data_defs,
    crm_model_defs,
    responses_defs,
    scoring_defs,
    leaderboards_defs,
]


def build_definitions(resources: dict | None = None) -> dg.Definitions:
    """All stages with the default resources, or with some of them replaced (tests, other deployments)."""
    merged = dg.Definitions.merge(*STAGES)
    return dg.Definitions(
        assets=merged.assets,
        asset_checks=merged.asset_checks,
        jobs=merged.jobs,
        sensors=merged.sensors,
        schedules=merged.schedules,
        resources={**default_resources(), **(merged.resources or {}), **(resources or {})},
    )


defs = build_definitions()

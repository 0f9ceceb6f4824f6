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

defs = dg.Definitions.merge(
    dg.Definitions(resources=default_resources()),
    crm_data_defs,
    crm_model_defs,
    leaderboards_defs,
    preferences_defs,
    preferences_tagging_defs,
    responses_defs,
    scoring_defs,
)

"""The one Definitions of the code location: each stage contributes its own `defs`; resources live here."""

import dagster as dg

from usl_assets.resources import default_resources

defs = dg.Definitions.merge(
    dg.Definitions(resources=default_resources()),
)

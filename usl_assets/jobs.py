"""Named jobs for the runs the command line launches, so the Dagster UI's run list, timeline and partition pages say
which phase made a run (Dagster's implicit asset job would call them all `__ASSET_JOB`):

- `usl_run_upstream`: phase 1 of `usl run`, every unpartitioned asset upstream of the model partitions;
- `model_partitions`: phase 2 of `usl run` (every model partition in one run) and `usl add-model` (one partition);
- `usl_run_leaderboards`: phase 3 of `usl run`, the unpartitioned assets downstream of the partitions.
`leaderboards_after_model_job` (after `usl add-model`) and `leaderboards_job` (the nightly rebuild) are the
leaderboards stage's own. A run executes the assets chosen for it (pipeline.plan_phases: e.g. without the
optional neural CRMs); the job says what it may hold.
"""

import dagster as dg

from usl_assets.partitions import model_partitions

UPSTREAM_JOB, PARTITIONS_JOB, DOWNSTREAM_JOB = "usl_run_upstream", "model_partitions", "usl_run_leaderboards"


def partitioned_keys(assets) -> list[dg.AssetKey]:
    """The keys of the model-partitioned assets among `assets`."""
    return [key for asset in assets if isinstance(asset, dg.AssetsDefinition)
            and asset.partitions_def is not None for key in asset.keys]


def phase_jobs(assets) -> list:
    partitioned = dg.AssetSelection.assets(*partitioned_keys(assets))
    return [
        dg.define_asset_job(UPSTREAM_JOB, selection=dg.AssetSelection.all() - partitioned.downstream(),
                            description="usl run, phase 1 of 3: preferences, the CRM and the prompts — everything "
                                        "the model partitions read"),
        dg.define_asset_job(PARTITIONS_JOB, selection=partitioned, partitions_def=model_partitions,
                            description="usl run, phase 2 of 3 (every model in one run), and usl add-model (one "
                                        "model): a model's responses and their rewards, partition <pool>:<model>"),
        dg.define_asset_job(DOWNSTREAM_JOB, selection=partitioned.downstream() - partitioned,
                            description="usl run, phase 3 of 3: the leaderboards from every model's rewards, the "
                                        "audits and the published copy"),
    ]

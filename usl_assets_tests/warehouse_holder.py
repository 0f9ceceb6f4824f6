"""A second process that holds the `warehouse` pool slot the way a run does: one in-process run on the instance in
DAGSTER_HOME, tagged as a `usl run` phase, whose only step (in the pool) sleeps until the process is killed.
Prints `holding <run id>` once it has the slot.

    python -m usl_assets_tests.warehouse_holder
"""

import time

import dagster as dg

from usl_assets.pipeline import PHASE_TAG
from usl_assets.resources import WAREHOUSE_POOL

HOLDER_PHASE = "leaderboards"


@dg.asset(pool=WAREHOUSE_POOL)
def holds_the_warehouse(context: dg.AssetExecutionContext) -> None:
    print(f"holding {context.run.run_id}", flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    with dg.DagsterInstance.get() as instance:
        dg.materialize([holds_the_warehouse], instance=instance, tags={PHASE_TAG: HOLDER_PHASE})

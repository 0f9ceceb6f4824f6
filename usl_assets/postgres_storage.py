"""The shared instance's event-log storage: Dagster's PostgreSQL storage with an atomic pool-slot claim.

Dagster 1.13.27 claims a pool slot in two autocommitted statements on PostgreSQL: `SELECT … FOR UPDATE SKIP
LOCKED` finds a free slot (its lock ends with that statement), then `UPDATE … WHERE id = <slot>` takes it. Two
steps that claim within the same few milliseconds both find the one free slot and both take it, so the
one-slot `warehouse` pool let two writers run at once (usl_assets_tests/test_deployment_postgres.py caught it:
two `usl add-model` started together). Here the UPDATE only takes a slot that is still free (`step_key IS NULL`):
the loser gets BLOCKED and claims again later, as any blocked step does. Everything else is Dagster's.

Private Dagster imports, as in usl_assets/launch.py: on a Dagster upgrade, check whether upstream fixed the claim
and drop this class (deploy/dagster.postgres.yaml names it).
"""

from collections.abc import Mapping
from typing import Any

import sqlalchemy as db
from dagster._core.storage.event_log.schema import ConcurrencySlotsTable
from dagster._core.storage.sqlalchemy_compat import db_select
from dagster._utils.concurrency import ConcurrencySlotStatus
from dagster_postgres.event_log.event_log import PostgresEventLogStorage
from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config


class AtomicClaimPostgresEventLogStorage(PostgresEventLogStorage):
    @classmethod
    def from_config_value(cls, inst_data, config_value: Mapping[str, Any]) -> "AtomicClaimPostgresEventLogStorage":
        return cls(inst_data=inst_data, postgres_url=pg_url_from_config(config_value),
                   should_autocreate_tables=config_value.get("should_autocreate_tables", True),
                   token_provider=get_token_provider_from_config(config_value))

    def _claim_concurrency_slot(self, concurrency_key: str, run_id: str, step_key: str) -> ConcurrencySlotStatus:
        free = db.and_(ConcurrencySlotsTable.c.concurrency_key == concurrency_key,
                       ConcurrencySlotsTable.c.step_key == None,  # noqa: E711
                       ConcurrencySlotsTable.c.deleted == False)  # noqa: E712
        with self.index_connection() as conn:
            found = conn.execute(db_select([ConcurrencySlotsTable.c.id]).select_from(ConcurrencySlotsTable)
                                 .where(free).with_for_update(skip_locked=True).limit(1)).fetchone()
            if not found or not found[0]:
                return ConcurrencySlotStatus.BLOCKED
            taken = conn.execute(ConcurrencySlotsTable.update().values(run_id=run_id, step_key=step_key)
                                 .where(db.and_(ConcurrencySlotsTable.c.id == found[0], free))).rowcount
            return ConcurrencySlotStatus.CLAIMED if taken else ConcurrencySlotStatus.BLOCKED

"""The model partitions: one dynamic partition of `models` per (pool, model), key `<pool>:<model>`
(responses.pools.partition_key). The responses and scoring stages partition by it; `usl run`, `usl add-model`
and the inbox sensor register keys."""

from pathlib import Path

import dagster as dg

from usl_assets.responses import pools

model_partitions = dg.DynamicPartitionsDefinition(name="models")


def register_public_models(instance: dg.DagsterInstance, data_root: Path) -> list[str]:
    """Adds a `models` partition for every public model file; returns all their keys."""
    keys = pools.public_partition_keys(Path(data_root))
    existing = set(instance.get_dynamic_partitions(model_partitions.name))
    new = [key for key in keys if key not in existing]
    if new:
        instance.add_dynamic_partitions(model_partitions.name, new)
    return keys

"""`usl run`: the whole asset graph on the instance in DAGSTER_HOME, in three phases.

1. every unpartitioned asset upstream of the model partitions (preferences, CRM, prompts),
2. every model partition at once (the partitioned assets use a single-run backfill policy),
3. the unpartitioned assets downstream of them (leaderboards, the published copy).
Each phase is one Dagster run of the code location `usl_assets` (launch.py), of its own named job (jobs.py:
usl_run_upstream, model_partitions, usl_run_leaderboards), executed in this process: no daemon
or server is needed, and the UI lists the runs under the location (Runs, Overview → Timeline, Re-execute).
The terminal gets progress lines (a line per finished step: counts and elapsed time; a summary per phase);
`verbose` adds Dagster's own log.
"""

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import dagster as dg
import psutil

from usl_assets.jobs import DOWNSTREAM_JOB, PARTITIONS_JOB, UPSTREAM_JOB
from usl_assets.launch import console_log_config, execute_in_location, raise_if_interrupted
from usl_assets.partitions import model_partitions, register_public_models
from usl_assets.slot_wait import DEFAULT_WAIT_TIMEOUT_S, SlotWait


@dataclass
class PhaseResult:
    name: str
    assets: int
    partitions: int
    seconds: float
    run_id: str
    cpu_seconds: float = 0.0  # CPU time (user + system) of this process and its children in the phase


def cpu_seconds() -> float:
    """User + system CPU time so far of this process, its waited-for children and its live ones (the feature workers
    of crm/feature_workers.py stay alive between phases)."""
    times = os.times()
    live = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            spent = child.cpu_times()
            live += spent.user + spent.system
        except psutil.NoSuchProcess:  # ended since it was listed: counted by the children_* times once waited for
            pass
    return times.user + times.system + times.children_user + times.children_system + live


def cpu_share(cpu: float, wall: float) -> str:
    """`CPU 412 s, 0.71 of 2 cores`: how much of the machine a phase kept busy."""
    cores = os.cpu_count() or 1
    return f"CPU {cpu:,.0f} s, {cpu / max(wall, 1e-9) / cores:.2f} of {cores} cores"


OPTIONAL_TAG = "usl/optional"  # e.g. the LoRA CRMs: left out unless `include_optional`
# Which of the three phases a run is, besides its job (jobs.py): filter by it under Runs.
PHASE_TAG = "usl/phase"
# Dagster's run tags for a run over a range of partitions (the assets' single-run backfill policy runs it once).
PARTITION_RANGE_START_TAG = "dagster/asset_partition_range_start"
PARTITION_RANGE_END_TAG = "dagster/asset_partition_range_end"


def plan_phases(graph, include_optional: bool = False) -> tuple[list[dg.AssetKey], list[dg.AssetKey],
                                                                 list[dg.AssetKey]]:
    """Split the materializable assets into (before, partitioned, after) the model partitions."""
    keys = {key for key in graph.materializable_asset_keys
            if include_optional or OPTIONAL_TAG not in (graph.get(key).tags or {})}
    partitioned = {key for key in keys if graph.get(key).partitions_def is not None}
    after = set(dg.AssetSelection.assets(*partitioned).downstream().resolve(graph)) - partitioned if partitioned \
        else set()
    before = keys - partitioned - after
    order = lambda ks: sorted(ks, key=lambda k: k.to_user_string())  # noqa: E731
    return order(before), order(partitioned), order(after & keys)


def run_graph(
    instance: dg.DagsterInstance,
    resources: dict | None = None,
    log: Callable[[str], None] = print,
    tags: dict | None = None,
    op_config: dict | None = None,
    only_partitions: list[str] | None = None,
    include_optional: bool = False,
    verbose: bool = False,
    wait_timeout_s: float = DEFAULT_WAIT_TIMEOUT_S,
) -> list[PhaseResult]:
    """`op_config` maps an asset name to its config (e.g. smaller slices); each phase gets its own assets'.
    `only_partitions` limits the model partitions materialized (all public models are registered either way).
    `wait_timeout_s`: how long a step may wait for a pool slot another run holds (0: no limit)."""
    from usl_assets.definitions import build_definitions

    defs = build_definitions(resources)
    before, partitioned, after = plan_phases(defs.resolve_asset_graph(), include_optional)
    data_root = defs.resources["data_dir"].root()
    run = lambda job, name, keys, extra, **kw: _execute(  # noqa: E731
        defs.resolve_job_def(job), instance, name, keys, extra, tags, log, _phase_config(op_config, keys, verbose),
        SlotWait(wait_timeout_s, log), **kw)
    results = [run(UPSTREAM_JOB, "upstream of the model partitions", before, {})]
    registered = register_public_models(instance, data_root)
    log(f"registered {len(registered)} model partitions")
    for first, last, count in partition_ranges(instance, only_partitions):
        range_tags = {PARTITION_RANGE_START_TAG: first, PARTITION_RANGE_END_TAG: last}
        results.append(run(PARTITIONS_JOB, "model partitions", partitioned, range_tags, partitions=count))
    if after:
        results.append(run(DOWNSTREAM_JOB, "leaderboards", after, {}))
    return results


def partition_ranges(instance: dg.DagsterInstance, only: list[str] | None) -> list[tuple[str, str, int]]:
    """Contiguous runs of wanted keys, in the instance's partition order: (first, last, count) each."""
    keys = instance.get_dynamic_partitions(model_partitions.name)
    wanted = set(keys if only is None else only)
    unknown = wanted - set(keys)
    if unknown:
        raise ValueError(f"unknown model partitions: {sorted(unknown)}")
    ranges, current = [], []
    for key in keys + [None]:
        if key in wanted:
            current.append(key)
        elif current:
            ranges.append((current[0], current[-1], len(current)))
            current = []
    return ranges


def _phase_config(op_config: dict | None, keys: list[dg.AssetKey], verbose: bool = False) -> dict:
    names = {key.to_python_identifier() for key in keys}
    return {
        "ops": {name: {"config": cfg} for name, cfg in (op_config or {}).items() if name in names},
        **console_log_config(verbose),
    }


class StepProgress:
    """One line per finished step: `  ✓ step (done/total steps, elapsed s)`."""

    def __init__(self, log: Callable[[str], None]):
        self.log, self.started, self.done, self.total = log, time.perf_counter(), 0, 0

    def __call__(self, event: dg.DagsterEvent, total_steps: int) -> None:
        self.total = total_steps
        if event.is_step_success or event.is_step_failure:
            self.done += 1
            mark = "✓" if event.is_step_success else "✗"
            self.log(f"  {mark} {event.step_key} ({self.done}/{self.total} steps, "
                     f"{time.perf_counter() - self.started:,.0f} s)")


def _execute(job, instance, name, keys, extra_tags, tags, log, run_config, slot_wait,
             partitions=0) -> PhaseResult:
    log(f"▶ {name}: {len(keys)} assets" + (f" × {partitions} partitions" if partitions else ""))
    started, cpu_started = time.perf_counter(), cpu_seconds()
    result = execute_in_location(job, instance, run_config=run_config, asset_selection=keys,
                                 tags={**(tags or {}), **extra_tags, PHASE_TAG: name}, on_event=StepProgress(log),
                                 slot_wait=slot_wait)
    seconds, cpu = time.perf_counter() - started, cpu_seconds() - cpu_started
    raise_if_interrupted(result)
    if not result.success:
        failed = [event.step_key for event in result.all_events if event.is_step_failure]
        raise RuntimeError(f"{name} failed in step(s) {', '.join(failed) or '?'} (run {result.run_id}); "
                           f"see `make ui` → Runs for the logs")
    log(f"✔ {name}: {phase_figures(result, partitions, seconds)}; {cpu_share(cpu, seconds)} (run {result.run_id})")
    return PhaseResult(name, len(keys), partitions, seconds, result.run_id, cpu)


def phase_figures(result: dg.ExecuteInProcessResult, partitions: int, seconds: float) -> str:
    """`N materializations, passed/total checks passed in S s` (+ seconds per partition), then the checks that
    did not pass, by name (a warning check does not stop the run, so the terminal is where it is seen)."""
    materialized = len(result.get_asset_materialization_events())
    checks = result.get_asset_check_evaluations()
    passed = sum(check.passed for check in checks)
    rate = f", {seconds / partitions:.1f} s per partition" if partitions else ""
    failed = sorted({check.check_name for check in checks if not check.passed})
    named = f"; not passed: {', '.join(failed)}" if failed else ""
    return f"{materialized} materializations, {passed}/{len(checks)} checks passed in {seconds:,.0f} s{rate}{named}"

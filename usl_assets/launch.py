"""Runs that the CLI executes in this process, recorded as runs of the code location `usl_assets`; how they stop
on Ctrl-C / SIGTERM and what they print to the terminal.

`JobDefinition.execute_in_process` creates its run without a code origin: the UI then shows it as a
"manually launched" run of no location, leaves it off Overview → Timeline and warns on "Re-execute". Here the
run is created with the origin the webserver gives runs of workspace.yaml's location (the same module, attribute
and location name), then executed in this process exactly as `execute_in_process` does it: no daemon, no
server, no subprocess, and resources may still be replaced (tests).

Its steps run in Dagster's in-process executor with one change: a step whose pool is full waits in slot_wait.py.
Dagster 1.13's in-process loop asks again at once without sleeping (a core at ~100 % for as long as another run
holds the `warehouse` slot) and only notes Ctrl-C / SIGTERM until the next step starts; here the wait sleeps,
says who holds the slot, releases a dead holder, gives up after --wait-timeout and stops at once on a signal.

The runs need Dagster's private API (`dagster._core`), imported here and in no other run code: Dagster has no
public call that executes a run in this process under a code-location origin (its public launchers hand the run
to a daemon, a gRPC server or a run worker process), nor a hook for how a step waits for its pool, and
interrupted steps are told apart only by the private `ErrorSource`. The pins in pyproject.toml fix the Dagster
release; usl_assets_tests/test_workspace.py checks against a real webserver that the runs still show under the
location, usl_assets_tests/test_warehouse_wait.py how a step waits. On a Dagster upgrade, start here.
"""

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import dagster as dg
from dagster._core.definitions.job_base import InMemoryJob
from dagster._core.definitions.reconstruct import ReconstructableRepository
from dagster._core.definitions.repository_definition.valid_definitions import SINGLETON_REPOSITORY_NAME
from dagster._core.errors import DagsterExecutionInterruptedError
from dagster._core.events import DagsterEvent, EngineEventData
from dagster._core.execution.api import ExecuteRunWithPlanIterable, create_execution_plan, job_execution_iterator
from dagster._core.execution.context_creation_job import (
    PlanExecutionContextManager,
    PlanOrchestrationContextManager,
    orchestration_context_event_generator,
)
from dagster._core.execution.execute_in_process import merge_run_tags
from dagster._core.execution.plan.execute_plan import inner_plan_execution_iterator
from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext
from dagster._core.execution.plan.objects import ErrorSource
from dagster._core.execution.retries import RetryMode
from dagster._core.executor.in_process import InProcessExecutor
from dagster._core.origin import JobPythonOrigin
from dagster._core.remote_origin import (
    ManagedGrpcPythonEnvCodeLocationOrigin,
    RemoteJobOrigin,
    RemoteRepositoryOrigin,
)
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._utils.interrupts import pop_captured_interrupt

from usl_assets.interrupts import interrupt, received
from usl_assets.settings import SlotWaitTimeout
from usl_assets.slot_wait import SlotWait

# What workspace.yaml names (usl_assets_tests/test_workspace.py checks that the two agree).
LOCATION_NAME = "usl_assets"
DEFINITIONS_MODULE = "usl_assets.definitions"
DEFINITIONS_ATTRIBUTE = "defs"
PROJECT_ROOT = Path(__file__).resolve().parents[1]


def location_origin() -> ManagedGrpcPythonEnvCodeLocationOrigin:
    return ManagedGrpcPythonEnvCodeLocationOrigin(
        loadable_target_origin=LoadableTargetOrigin(
            executable_path=sys.executable, module_name=DEFINITIONS_MODULE, attribute=DEFINITIONS_ATTRIBUTE,
            working_directory=str(PROJECT_ROOT) if (PROJECT_ROOT / "workspace.yaml").exists() else os.getcwd(),
        ),
        location_name=LOCATION_NAME,
    )


def job_origins(job_name: str) -> tuple[RemoteJobOrigin, JobPythonOrigin]:
    """(the origin the UI matches a run to its location by, the origin a run worker would load the job from)."""
    remote = RemoteJobOrigin(
        repository_origin=RemoteRepositoryOrigin(location_origin(), SINGLETON_REPOSITORY_NAME), job_name=job_name)
    code = ReconstructableRepository.for_module(
        DEFINITIONS_MODULE, DEFINITIONS_ATTRIBUTE, location_origin().loadable_target_origin.working_directory)
    return remote, JobPythonOrigin(job_name, code.get_python_origin())


def execute_in_location(
    job_def: dg.JobDefinition,
    instance: dg.DagsterInstance,
    run_config: Mapping | None = None,
    asset_selection: Sequence[dg.AssetKey] | None = None,
    partition_key: str | None = None,
    tags: Mapping[str, str] | None = None,
    on_event: Callable[[dg.DagsterEvent, int], None] | None = None,
    slot_wait: SlotWait | None = None,
) -> dg.ExecuteInProcessResult:
    """`job_def.execute_in_process(..., raise_on_error=False)`, with the run recorded under this location.
    `on_event(event, steps_in_plan)` sees each event as it happens (progress lines); `slot_wait` says how a step
    waits for a full pool (default: SlotWait(), printing). Raises SlotWaitTimeout when a step gave up waiting."""
    slot_wait = SlotWait() if slot_wait is None else slot_wait
    slot_wait.gave_up = None
    selection = list(asset_selection or [])
    ephemeral = job_def.as_ephemeral_job(resource_defs={}, input_values={}, op_selection=None,
                                         asset_selection=selection).with_executor_def(
        dg.ExecutorDefinition(name="usl_in_process", executor_creation_fn=lambda _: SlotWaitingExecutor(slot_wait)))
    run_config = dict(run_config or {})
    run_tags = merge_run_tags(job_def=job_def, partition_key=partition_key, tags=tags, asset_selection=selection,
                              instance=instance, run_config=run_config)
    job = InMemoryJob(job_def=ephemeral)
    plan = create_execution_plan(job, run_config=run_config, instance_ref=instance.get_ref()
                                 if instance.is_persistent else None)
    remote_origin, code_origin = job_origins(job_def.name)
    run = instance.create_run_for_job(
        job_def=ephemeral, run_config=run_config, tags={**ephemeral.run_tags, **run_tags},
        asset_selection=frozenset(selection) if selection else None, execution_plan=plan,
        remote_job_origin=remote_origin, job_code_origin=code_origin,
    )
    steps = len(plan.step_keys_to_execute)
    events = []
    try:
        for event in ExecuteRunWithPlanIterable(
            execution_plan=plan,
            iterator=job_execution_iterator,
            execution_context_manager=PlanOrchestrationContextManager(
                context_event_generator=orchestration_context_event_generator, job=job, execution_plan=plan,
                dagster_run=run, instance=instance, run_config=run_config, executor_defs=None,
                output_capture=None, raise_on_error=False,
            ),
        ):
            events.append(event)
            if on_event is not None:
                on_event(event, steps)
    except KeyboardInterrupt:
        # Interrupted outside Dagster's own handling (before the first step): never leave a run that looks alive.
        current = instance.get_run_by_id(run.run_id)
        if current is not None and not current.is_finished:
            instance.report_run_failed(current, "interrupted (SIGINT/SIGTERM) before it finished")
        raise
    finally:
        # The run is over in this process: nothing of it may keep or wait for a slot (a step that never ran
        # after being queued, an interrupted wait).
        if instance.event_log_storage.supports_global_concurrency_limits:
            instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
    if slot_wait.gave_up is not None:
        raise slot_wait.gave_up
    return dg.ExecuteInProcessResult(job_def=ephemeral, event_list=events,
                                     dagster_run=instance.get_run_by_id(run.run_id), output_capture={})


class SlotWaitingExecutor(InProcessExecutor):
    """Dagster's in-process executor (its `execute`, Dagster 1.13) whose steps claim pool slots through
    SlotWaitingConcurrency."""

    def __init__(self, slot_wait: SlotWait):
        super().__init__(retries=RetryMode.ENABLED)
        self.slot_wait = slot_wait

    def execute(self, plan_context, execution_plan) -> Iterator[DagsterEvent]:
        pid, step_keys = os.getpid(), execution_plan.step_keys_to_execute
        # recovery.py finds the run's process by this event's pid: a run waiting for a slot is alive.
        yield DagsterEvent.engine_event(plan_context, f"Executing steps in process (pid: {pid})",
                                        event_specific_data=EngineEventData.in_process(pid, step_keys))
        yield from ExecuteRunWithPlanIterable(
            execution_plan=plan_context.execution_plan,
            iterator=self.steps,
            execution_context_manager=PlanExecutionContextManager(
                job=plan_context.job, retry_mode=plan_context.retry_mode,
                execution_plan=plan_context.execution_plan, run_config=plan_context.run_config,
                dagster_run=plan_context.dagster_run, instance=plan_context.instance,
                raise_on_error=plan_context.raise_on_error, output_capture=plan_context.output_capture,
                step_dependency_config=self.step_dependency_config,
            ),
        )
        yield DagsterEvent.engine_event(plan_context, f"Finished steps in process (pid: {pid})",
                                        event_specific_data=EngineEventData.in_process(pid, step_keys))

    def steps(self, job_context, execution_plan) -> Iterator[DagsterEvent]:
        with SlotWaitingConcurrency(job_context.instance, job_context.dagster_run, self.slot_wait) as slots:
            yield from inner_plan_execution_iterator(job_context, execution_plan, slots)


class SlotWaitingConcurrency(InstanceConcurrencyContext):
    """Dagster's pool slots of one run, except that a step refused a slot waits in SlotWait.wait (the in-process
    executor runs one step at a time: there is nothing else to do meanwhile) and signals end the wait at once."""

    def __init__(self, instance: dg.DagsterInstance, run: dg.DagsterRun, slot_wait: SlotWait):
        super().__init__(instance, run)
        self.instance, self.run, self.slot_wait = instance, run, slot_wait

    def claim(self, concurrency_key: str, step_key: str, step_priority: int = 0) -> bool:
        if super().claim(concurrency_key, step_key, step_priority):
            return True

        def try_claim() -> bool:
            # Dagster's context re-asks the storage only after a back-off of up to 15 s: ask at SlotWait's pace.
            self._pending_timeouts.pop(step_key, None)
            return super(SlotWaitingConcurrency, self).claim(concurrency_key, step_key, step_priority)

        self.instance.report_engine_event(f"Step {step_key} waits for a slot of the pool {concurrency_key}",
                                          self.run, step_key=step_key)
        try:
            with signals_end_at_once():
                self.slot_wait.wait(self.instance, self.run.run_id, concurrency_key, step_key, try_claim)
        except KeyboardInterrupt:
            # Failed here with the reason: Dagster then ends the run quietly (no traceback on the terminal).
            self.instance.report_run_failed(self.run, f"interrupted (SIGINT/SIGTERM) while step {step_key} waited "
                                                      f"for a slot of the pool {concurrency_key}")
            raise
        except SlotWaitTimeout as gave_up:
            self.instance.report_run_failed(self.run, str(gave_up))
            raise DagsterExecutionInterruptedError(str(gave_up)) from gave_up
        return True


@contextlib.contextmanager
def signals_end_at_once() -> Iterator[None]:
    """Inside a run Dagster only notes SIGINT / SIGTERM until the next step starts; a wait for a slot is no step,
    so for its duration the handlers of stop_on_signals raise at once (also for a signal noted just before)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    try:
        if pop_captured_interrupt():
            interrupt(signal.SIGINT, None)
        yield
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])


def was_interrupted(result: dg.ExecuteInProcessResult) -> bool:
    return received["signal"] is not None or any(
        event.is_step_failure and event.step_failure_data.error_source == ErrorSource.INTERRUPT
        for event in result.all_events)


def raise_if_interrupted(result: dg.ExecuteInProcessResult) -> None:
    if was_interrupted(result):
        raise KeyboardInterrupt(f"run {result.run_id} interrupted")


def console_log_config(verbose: bool) -> dict:
    """The terminal shows progress lines and Dagster's warnings; `--verbose` adds its INFO log. Every event stays
    in the run's event log in the UI either way."""
    return {"loggers": {"console": {"config": {"log_level": "INFO" if verbose else "WARNING"}}}}


def add_verbose_flag(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS: `usl --verbose run` (top-level flag) is not reset by the subcommand's default.
    parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="show Dagster's own log (INFO) besides the progress lines")

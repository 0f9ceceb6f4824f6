import dagster as dg
import pytest

from usl_assets.crm.checkpoints import default_checkpoint, write_default_architecture
from usl_assets.scoring.assets import criteria_profiles, response_rewards
from usl_assets_tests.test_scoring_support import (  # noqa: F401  (fixtures)
    alpaca_responses, crm_models, install_crm, materialize_default_checkpoint, prompt_sample, write_upstream)

MODELS = ["gpt4_1106_preview", "claude-2.1", "vicuna-13b"]
N_PROMPTS = 5  # prompt 3 has a scenario without a default profile: quarantined for that profile


@pytest.fixture
def scoring_env(usl_env, shared_data_dir, crm_models):
    home = usl_env["usl_home"].root()
    install_crm(crm_models, home, "cross")
    responses = alpaca_responses(shared_data_dir, MODELS, N_PROMPTS)
    write_upstream(usl_env["warehouse"], responses, prompt_sample(responses))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("models", [f"alpaca_eval:{m}" for m in MODELS])
    assert dg.materialize([criteria_profiles], resources=usl_env, instance=instance).success
    materialize_default_checkpoint(usl_env, instance, "cross")
    return usl_env, instance


def run_rewards(env, instance, tags=None, partition_key=None, config=None, raise_on_error=True):
    """(result, metadata, checks) of a one-partition run; for a range, both keyed by partition."""
    result = dg.materialize([response_rewards], resources=env, instance=instance, partition_key=partition_key,
                            tags=tags, run_config={"ops": {"response_rewards": {"config": config or {}}}},
                            raise_on_error=raise_on_error)
    if not result.success:
        return result, {}, {}
    metadata = {m.partition: {k: v.value for k, v in m.metadata.items()}
                for m in result.asset_materializations_for_node("response_rewards")}
    checks = {}
    for evaluation in result.get_asset_check_evaluations():
        checks.setdefault(evaluation.partition, {})[evaluation.check_name] = evaluation.passed
    if partition_key:
        return result, metadata[partition_key], checks[partition_key]
    return result, metadata, checks


def check_stamps(instance, run_id):
    """(partition, the check's target materialization's storage id, that partition's materialization in the run)."""
    from dagster._core.events import DagsterEventType

    records = instance.get_records_for_run(run_id).records
    materialized = {r.event_log_entry.dagster_event.partition: r.storage_id for r in records
                    if r.event_log_entry.dagster_event_type == DagsterEventType.ASSET_MATERIALIZATION}
    stamps = []
    for r in records:
        if r.event_log_entry.dagster_event_type == DagsterEventType.ASSET_CHECK_EVALUATION:
            evaluation = r.event_log_entry.dagster_event.event_specific_data
            stamps.append((evaluation.partition, evaluation.target_materialization_data.storage_id,
                           materialized[evaluation.partition], r.storage_id))
    return stamps


def model_rows(warehouse, model):
    return warehouse.query("SELECT count(*) AS n FROM scoring.response_rewards WHERE model = ?", [model])["n"][0]


def test_each_model_is_scored_once_and_reruns_come_from_the_cache(scoring_env):
    env, instance = scoring_env
    warehouse = env["warehouse"]
    named = warehouse.query("SELECT count(*) AS n FROM scoring.criteria_profiles WHERE kind = 'named'")["n"][0]
    per_model = N_PROMPTS * (1 + named) - 1

    # Which checkpoint scores is crm_default_checkpoint's materialization (an upstream asset), not a file: a
    # default.json naming another architecture changes nothing.
    write_default_architecture(env["usl_home"].models_dir() / "crm", "factorized")
    _, first, checks = run_rewards(env, instance, partition_key="alpaca_eval:gpt4_1106_preview")
    assert checks == {"one_reward_per_response_profile": True, "rewards_finite": True, "checkpoint_is_default": True}
    assert first["scored"] == per_model and first["cache_hits"] == 0 and first["quarantined"] == 1
    assert first["checkpoint_id"] == default_checkpoint(env["usl_home"].root(), "cross").name
    assert model_rows(warehouse, "gpt4_1106_preview") == per_model

    # Adding models scores only them: one single-run backfill over the two new partitions, each partition with
    # its own figures and its own check evaluations, stamped after (and pointing at) its own materialization.
    result, added, checks = run_rewards(env, instance, tags={
        "dagster/asset_partition_range_start": "alpaca_eval:claude-2.1",
        "dagster/asset_partition_range_end": "alpaca_eval:vicuna-13b"})
    assert set(added) == set(checks) == {"alpaca_eval:claude-2.1", "alpaca_eval:vicuna-13b"}
    for key, figures in added.items():
        assert all(checks[key].values()) and len(checks[key]) == 3
        assert figures["responses"] == N_PROMPTS and figures["scored"] == per_model
        assert figures["dagster/row_count"] == model_rows(warehouse, key.split(":")[1])
    stamps = check_stamps(instance, result.run_id)
    assert len(stamps) == 6
    assert all(target == own and own < stamped for _, target, own, stamped in stamps)

    _, again, checks = run_rewards(env, instance, partition_key="alpaca_eval:gpt4_1106_preview")
    assert all(checks.values()) and again["scored"] == 0 and again["cache_hits"] == per_model
    assert model_rows(warehouse, "gpt4_1106_preview") == per_model  # replaced, not appended
    quarantine = warehouse.query("SELECT DISTINCT rule FROM scoring.reward_quarantine")
    assert list(quarantine["rule"]) == ["no_default_profile"]


def test_rewards_from_a_non_default_checkpoint_fail_the_checkpoint_check(scoring_env, crm_models):
    env, instance = scoring_env
    factorized = default_checkpoint(env["usl_home"].root(), "factorized")
    _, metadata, checks = run_rewards(env, instance, partition_key="alpaca_eval:claude-2.1",
                                      config={"checkpoint": str(factorized), "batch_size": 4})
    assert checks == {"one_reward_per_response_profile": True, "rewards_finite": True,
                      "checkpoint_is_default": False}
    assert metadata["architecture"] == "factorized" and metadata["responses_embedded"] == N_PROMPTS


def test_without_a_default_checkpoint_materialization_scoring_fails_with_one_clear_line(scoring_env):
    env, _ = scoring_env
    fresh = dg.DagsterInstance.ephemeral()
    fresh.add_dynamic_partitions("models", ["alpaca_eval:claude-2.1"])
    result, _, _ = run_rewards(env, fresh, partition_key="alpaca_eval:claude-2.1", raise_on_error=False)
    cause = next(e for e in result.all_events if e.is_step_failure).step_failure_data.error.cause
    assert cause.cls_name == "UslConfigError" and "crm_default_checkpoint has never been materialized" in cause.message


def test_bad_batch_size_fails_with_one_clear_line(scoring_env):
    env, instance = scoring_env
    result, _, _ = run_rewards(env, instance, partition_key="alpaca_eval:claude-2.1", config={"batch_size": 0},
                               raise_on_error=False)
    failure = next(e for e in result.all_events if e.is_step_failure)
    cause = failure.step_failure_data.error.cause
    assert cause.cls_name == "UslConfigError" and "batch_size must be at least 1, got 0" in cause.message


def test_a_bad_named_profile_is_shown_not_loaded(usl_env, tmp_path):
    path = tmp_path / "profiles.yaml"
    path.write_text("profiles:\n  - name: terse\n    criteria: [Be terse.]\n  - name: broken\n", encoding="utf-8")
    result = dg.materialize([criteria_profiles], resources=usl_env,
                            run_config={"ops": {"criteria_profiles": {"config": {"profiles_file": str(path)}}}})
    metadata = result.asset_materializations_for_node("criteria_profiles")[0].metadata
    assert metadata["named_profiles"].value == 1 and metadata["rejected_profiles"].value == 1
    assert "broken" in metadata["rejected"].value
    assert all(e.passed for e in result.get_asset_check_evaluations())

"""materialize() of the whole leaderboards group on upstream tables in the contract schema (real slices)."""

import dagster as dg
import duckdb
import pytest
from scipy import stats

from usl_assets.leaderboards import assets as leaderboard_assets
from usl_assets.resources import DataDir, UslHome, Warehouse
from usl_assets_tests.test_leaderboards_fixtures import ALPACA_MODELS, NAMED_PROFILE, UNRANKED_REASONS, write_upstream

GROUP_ASSETS = [*leaderboard_assets.sql_assets, leaderboard_assets.reference_models,
                leaderboard_assets.bradley_terry_ratings, leaderboard_assets.rankings,
                leaderboard_assets.external_validity, leaderboard_assets.contradiction_vs_leaderboard,
                leaderboard_assets.published_warehouse]
GROUP_CHECKS = [*leaderboard_assets.sql_checks, leaderboard_assets.reference_models_present,
                leaderboard_assets.bradley_terry_well_formed,
                leaderboard_assets.rankings_consistent, leaderboard_assets.external_validity_measured,
                leaderboard_assets.leaderboard_beats_length_baseline, leaderboard_assets.contradiction_in_range,
                leaderboard_assets.published_copy_matches, leaderboard_assets.unranked_rewards_by_reason]
FAST = {"ops": {name: {"config": {"usl_bootstrap_rounds": 300, "bt_bootstrap_rounds": 30}}
                for name in ("rankings", "bradley_terry_ratings")}}


def materialize_leaderboards(usl_env, run_config=FAST) -> dg.ExecuteInProcessResult:
    return dg.materialize([*GROUP_ASSETS, *GROUP_CHECKS], resources=usl_env, run_config=run_config)


def build(usl_env, shared_data_dir):
    responses = write_upstream(usl_env["warehouse"], shared_data_dir)
    result = materialize_leaderboards(usl_env)
    assert result.success
    return usl_env["warehouse"], responses, result


@pytest.fixture(scope="module")
def built(tmp_path_factory, shared_data_dir):
    """One build shared by the read-only tests (every resource path explicit, so no environment is needed)."""
    home = tmp_path_factory.mktemp("leaderboards") / "usl_home"
    resources = {"data_dir": DataDir(path=str(shared_data_dir)), "usl_home": UslHome(path=str(home)),
                 "warehouse": Warehouse(path=str(home / "warehouse.duckdb"))}
    return build(resources, shared_data_dir)


def test_group_builds_rankings_that_follow_the_known_rewards(built):
    warehouse, responses, _ = built
    table = warehouse.read_table("leaderboard.rankings")
    assert set(table["pool"]) == {"alpaca_eval", "mt_bench"}
    assert set(table["profile"]) == {"default", NAMED_PROFILE}  # the ad hoc profile stays out
    assert set(table["method"]) == {"usl", "usl_soft", "usl_lc", "bradley_terry"}
    overall = table[(table["pool"] == "alpaca_eval") & (table["scenario"] == "all") & (table["method"] == "usl")]
    default = overall[overall["profile"] == "default"].set_index("model")["score"]
    brief = overall[overall["profile"] == NAMED_PROFILE].set_index("model")["score"]
    assert set(default.index) == set(ALPACA_MODELS)
    assert default["gpt4_1106_preview"] == 50.0  # the reference ties with itself
    assert stats.kendalltau(default, brief[default.index]).statistic < -0.9  # "brief" reverses the order
    sampled = responses[responses["pool"] == "alpaca_eval"]["prompt_id"].nunique()
    assert (overall[overall["profile"] == "default"]["n_prompts"] == sampled).all()
    # the reference's non-finite "brief answers" reward on one prompt takes that prompt off that leaderboard
    assert (overall[overall["profile"] == NAMED_PROFILE]["n_prompts"] == sampled - 1).all()
    # ranks: 1 + number of models whose interval lies wholly above
    for _, part in table.groupby(["pool", "scenario", "profile", "method"]):
        for row in part.itertuples():
            assert row.rank == 1 + (part["ci_low"] > row.ci_high).sum()


def test_checks_pass_and_validity_and_contradiction_are_measured(built):
    warehouse, _, result = built
    evaluations = {e.asset_check_key.name: e for e in result.get_asset_check_evaluations()}
    for name in ["response_scores_contract", "reference_comparisons_contract", "pairwise_comparisons_contract",
                 "model_lengths_contract", "reference_models_present", "bradley_terry_well_formed", "rankings_consistent",
                 "external_validity_measured", "contradiction_in_range", "published_copy_matches"]:
        assert evaluations[name].passed, name
    unranked = warehouse.read_table("leaderboard.unranked_rewards")
    assert unranked["reason"].value_counts().to_dict() == UNRANKED_REASONS
    assert not evaluations["unranked_rewards_by_reason"].passed  # a warning that shows the count
    assert evaluations["unranked_rewards_by_reason"].metadata["unranked"].value == 3
    validity = warehouse.read_table("leaderboard.external_validity").set_index(["pool", "method", "external_ranking"])
    # default rewards are log length, so the USL leaderboard and the length baseline must agree on LMArena
    usl = validity.loc[("alpaca_eval", "usl", "lmarena_2025")]
    length = validity.loc[("alpaca_eval", "mean_length", "lmarena_2025")]
    assert usl["n_models"] == length["n_models"] == 7
    assert usl["spearman"] == pytest.approx(length["spearman"], abs=0.15)
    contradiction = warehouse.read_table("leaderboard.contradiction_by_scenario")
    assert len(contradiction) == 5 and contradiction["ranking_change"].between(0, 2).all()
    assert contradiction["ranking_change"].mean() > 1.0  # the named profile reverses most rankings
    assert len(warehouse.read_table("leaderboard.contradiction_correlations")) == 6


def test_metadata_and_published_copy(built):
    warehouse, _, result = built
    rankings_meta = result.asset_materializations_for_node("rankings")[0].metadata
    assert rankings_meta["dagster/row_count"].value == len(warehouse.read_table("leaderboard.rankings"))
    assert "dagster/column_schema" in rankings_meta
    chart = result.asset_materializations_for_node("contradiction_vs_leaderboard")[0].metadata["chart"].value
    assert chart.startswith("![contradiction vs leaderboard](data:image/png;base64,iVBOR")
    published = warehouse.published_path()
    assert published.exists() and published != warehouse.database_path()
    with duckdb.connect(str(published), read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM leaderboard.rankings").fetchone()[0] == rankings_meta[
            "dagster/row_count"].value


def test_a_rerun_replaces_every_table(usl_env, shared_data_dir):
    warehouse, responses, _ = build(usl_env, shared_data_dir)
    dropped = "vicuna-13b"
    warehouse.replace_table("responses.responses", responses[responses["model"] != dropped])
    assert materialize_leaderboards(usl_env).success
    for table in ["leaderboard.response_scores", "leaderboard.rankings", "leaderboard.model_lengths"]:
        assert dropped not in set(warehouse.read_table(table)["model"]), table


def test_missing_reference_model_gives_bradley_terry_only(usl_env, shared_data_dir):
    write_upstream(usl_env["warehouse"], shared_data_dir, n_prompts=12)
    config = {"ops": {**FAST["ops"], "reference_models": {"config": {"reference_models": {
        "alpaca_eval": "no-such-model", "mt_bench": "gpt-4"}}}}}
    result = materialize_leaderboards(usl_env, run_config=config)
    assert result.success
    evaluations = {e.asset_check_key.name: e for e in result.get_asset_check_evaluations()}
    assert not evaluations["reference_models_present"].passed
    table = usl_env["warehouse"].read_table("leaderboard.rankings")
    assert set(table[table["pool"] == "alpaca_eval"]["method"]) == {"bradley_terry"}


def test_job_and_nightly_schedule_are_defined():
    from usl_assets.definitions import defs

    schedule = defs.resolve_schedule_def("leaderboards_nightly")
    assert schedule.cron_schedule == "0 3 * * *"
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    job = defs.resolve_job_def("leaderboards_job")
    assert {"rankings", "published_warehouse", "response_scores"} <= {n.name for n in job.graph.node_defs}

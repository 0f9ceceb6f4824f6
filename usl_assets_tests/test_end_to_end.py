"""What `make run` does, on small slices: the whole graph in three phases on a real (SQLite) instance, then
`usl status`. Slices come from configuration only (fewer tagger queries, one prompt per scenario, a tiny CRM
backbone, few bootstrap rounds); the data is the real public data."""

import dagster as dg
import duckdb

from usl_assets import warehouse_docs
from usl_assets.cli import main
from usl_assets.crm.assets import CrmSettings
from usl_assets.jobs import DOWNSTREAM_JOB, PARTITIONS_JOB, UPSTREAM_JOB
from usl_assets.pipeline import PHASE_TAG, cpu_seconds, cpu_share, phase_figures, plan_phases, run_graph
from usl_assets_tests.conftest import REPO_ROOT
from usl_assets_tests.llama_server import MODEL_ID, llama_server  # noqa: F401 (the fixture)
from usl_assets_tests.test_crm_assets import assert_evaluation_figures

# Three models per pool, the pools' reference models among them (AlpacaEval 2's and MT-Bench's).
MODELS = ["alpaca_eval:gpt4_1106_preview", "alpaca_eval:Qwen1.5-72B-Chat", "alpaca_eval:gemma-7b-it",
          "mt_bench:gpt-4", "mt_bench:vicuna-13b-v1.3", "mt_bench:alpaca-13b"]
SMALL_SLICES = {
    "scenario_tagger": {"max_length": 48},
    "raw_alpaca_eval_judgments": {"max_prompts": 20},
    "prompt_sample": {"per_scenario": 1, "full_pool": False},
    "rankings": {"usl_bootstrap_rounds": 50, "bt_bootstrap_rounds": 5},
    "bradley_terry_ratings": {"usl_bootstrap_rounds": 50, "bt_bootstrap_rounds": 5},
}


def tiny_crm_settings(tiny_backbone) -> CrmSettings:
    return CrmSettings(backbone=str(tiny_backbone), factorized_backbone="minilm", max_length=64, max_steps=3,
                       max_minutes=10.0, batch_size=4, head_epochs=2, checkpoint_every=2, max_train_pairs=48,
                       eval_pairs_per_split=8, eval_pairs_per_judged_model=4, base_model_pairs_per_split=4,
                       linear_iterations=30)


def test_a_phase_s_line_names_the_checks_that_did_not_pass():
    @dg.asset
    def numbers() -> int:
        return 3

    @dg.asset_check(asset=numbers)
    def numbers_positive() -> dg.AssetCheckResult:
        return dg.AssetCheckResult(passed=True)

    @dg.asset_check(asset=numbers)
    def numbers_even() -> dg.AssetCheckResult:
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN)

    result = dg.materialize([numbers, numbers_positive, numbers_even])
    assert phase_figures(result, 0, 2.0) == "1 materializations, 1/2 checks passed in 2 s; not passed: numbers_even"


def test_a_phase_s_cpu_time_counts_children_still_running():
    # the feature workers (crm/feature_workers.py) outlive a phase: their CPU time counts while they run
    import subprocess
    import sys
    import time

    import psutil

    before = cpu_seconds()
    burn = "import sys, time\nstart = time.process_time()\nwhile time.process_time() - start < 0.6: pass\nsys.stdin.read()"
    child = subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE)
    try:
        process, deadline = psutil.Process(child.pid), time.monotonic() + 60
        while sum(process.cpu_times()[:2]) < 0.5:  # the child burns 0.6 s of CPU, then waits on its stdin
            assert time.monotonic() < deadline, "the child never burnt its CPU"
            time.sleep(0.05)
        assert cpu_seconds() - before >= 0.5
    finally:
        child.communicate(b"")


def test_a_phase_s_cpu_share_is_its_cpu_time_over_wall_time_and_cores(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert cpu_share(412.0, 290.0) == "CPU 412 s, 0.71 of 2 cores"


def test_plan_puts_every_asset_in_exactly_one_phase():
    from usl_assets.definitions import defs

    graph = defs.resolve_asset_graph()
    before, partitioned, after = plan_phases(graph)
    optional = {dg.AssetKey("crm_cross"), dg.AssetKey("crm_factorized"), dg.AssetKey("crm_backbone_smollm2")}
    assert set(before) | set(partitioned) | set(after) == set(graph.materializable_asset_keys) - optional
    assert optional <= set(plan_phases(graph, include_optional=True)[0])
    assert not (set(before) & set(after))
    assert dg.AssetKey("validated_preferences") in before and dg.AssetKey("rankings") in after
    assert {graph.get(k).partitions_def.name for k in partitioned} == {"models"}


def test_whole_graph_end_to_end(usl_env, tiny_backbone, llama_server, tmp_path, monkeypatch, capsys):  # noqa: F811
    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    (dagster_home / "dagster.yaml").write_text((REPO_ROOT / "usl_assets" / "dagster.yaml").read_text())
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    resources = {**usl_env, "crm_settings": tiny_crm_settings(tiny_backbone)}
    with dg.DagsterInstance.get() as instance:
        phases = run_graph(instance, resources=resources, op_config=SMALL_SLICES, only_partitions=MODELS,
                           log=lambda line: None)
        assert phases[0].name == "upstream of the model partitions" and phases[-1].name == "leaderboards"
        assert sum(p.partitions for p in phases) == len(MODELS)
        assert all(p.cpu_seconds > 0 for p in phases)  # each phase's steps ran in this process, or were waited for
        from usl_assets.definitions import defs

        optional = {"crm_cross", "crm_factorized", "crm_backbone_smollm2"}  # `usl run --neural-crm`
        never = [k.to_user_string() for k in defs.resolve_asset_graph().materializable_asset_keys
                 if k.to_user_string() not in optional and not instance.get_latest_materialization_event(k)
                 and not instance.get_materialized_partitions(k)]
        assert not never, f"never materialized: {never}"
        rankings_schema = instance.get_latest_materialization_event(dg.AssetKey("rankings")).asset_materialization \
            .metadata["dagster/column_schema"].value
        assert {c.name: c.description for c in rankings_schema.columns} == \
            warehouse_docs.tables()["leaderboard.rankings"].columns
        # Every run of the CLI is a run of the code location (the UI lists it there; Re-execute works).
        assert {run.remote_job_origin.location_name for run in instance.get_runs()} == {"usl_assets"}
        # and says which phase it was, by its job (jobs.py) and by tag
        assert {(run.job_name, run.tags.get(PHASE_TAG)) for run in instance.get_runs()} == {
            (UPSTREAM_JOB, "upstream of the model partitions"), (PARTITIONS_JOB, "model partitions"),
            (DOWNSTREAM_JOB, "leaderboards")}

    warehouse = usl_env["warehouse"]
    with duckdb.connect(str(warehouse.published_path()), read_only=True) as published:
        evaluation = published.execute("SELECT split, variant, n, accuracy FROM crm.evaluation").df()
        evaluation_pairs = published.execute("SELECT * FROM crm.evaluation_pairs").df()
        ranked = published.execute(
            "SELECT pool, count(DISTINCT model) AS models FROM leaderboard.rankings "
            "WHERE scenario = 'all' GROUP BY pool ORDER BY pool").fetchall()
        rewarded = published.execute("SELECT count(DISTINCT pool || model) FROM scoring.response_rewards").fetchone()
        described = published.execute(
            "SELECT t.schema_name || '.' || t.table_name, t.comment, c.column_name, c.comment FROM duckdb_tables() t "
            "JOIN duckdb_columns() c USING (table_oid) WHERE NOT t.internal").fetchall()
    # Every table the run wrote is described in warehouse_tables.yaml, and its DuckDB comments are that text.
    catalog = warehouse_docs.tables()
    assert {table for table, *_ in described} == set(catalog)
    for table, table_comment, column, column_comment in described:
        assert table_comment == catalog[table].description, table
        assert column_comment and column_comment == warehouse_docs.column_description(table, column), (table, column)
    assert {"human_heldout", "criteria_reversed", "pandalm_majority"} <= set(evaluation["split"])
    assert {"crm", "length_baseline", "crm_no_criteria"} <= set(evaluation["variant"])
    assert_evaluation_figures(evaluation, evaluation_pairs)
    assert rewarded[0] == len(MODELS)
    assert dict(ranked) == {"alpaca_eval": 3, "mt_bench": 3}

    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert "leaderboard.rankings" in out and "never" not in out

    # README, "Your own prompts, your own models": a user pool answered by two models of a real llama.cpp server.
    assert main(["add-pool", "helpdesk", "--prompts", str(REPO_ROOT / "examples" / "helpdesk" / "prompts.jsonl")]) == 0
    for model, extra in [("smol-plain", []), ("smol-brief", ["--system-prompt", "Answer in one short sentence."])]:
        assert main(["generate", "--pool", "helpdesk", "--model", model, "--endpoint", llama_server,
                     "--max-tokens", "40", *extra]) == 0
    out = capsys.readouterr().out
    assert "registered pool helpdesk: 35 prompts" in out and "leaderboards rebuilt with helpdesk:smol-brief" in out
    with duckdb.connect(str(warehouse.published_path()), read_only=True) as published:
        helpdesk = published.execute(
            "SELECT method, scenario, count(DISTINCT model) FROM leaderboard.rankings WHERE pool = 'helpdesk' "
            "AND profile = 'default' GROUP BY ALL").fetchall()
        settings = published.execute("SELECT model, api_model, system_prompt, answered FROM responses.generations "
                                     "ORDER BY model").fetchall()
        pools_listed = published.execute("SELECT pool, kind FROM responses.pools ORDER BY pool").fetchall()
        network_prompts = published.execute(
            "SELECT any_value(n_prompts) FROM leaderboard.rankings WHERE pool = 'helpdesk' AND scenario = 'Network' "
            "AND profile = 'default' AND method = 'usl_soft'").fetchone()[0]
    assert ("usl_soft", "all", 2) in helpdesk and ("usl_soft", "Network", 2) in helpdesk  # a user topic ranks
    assert settings == [("smol-brief", MODEL_ID, "Answer in one short sentence.", 35),
                        ("smol-plain", MODEL_ID, None, 35)]
    assert ("helpdesk", "user") in pools_listed
    assert main(["leaderboard", "--pool", "helpdesk", "--topic", "Network", "--criteria",
                 "The answer gives concrete steps the user can follow."]) == 0
    out = capsys.readouterr().out
    # A prompt's topic is its own, not one its tagged scenario implies: your criteria rank the same prompts.
    assert "smol-plain" in out and "smol-brief" in out and f"ranked by Network: {network_prompts} prompts" in out
    assert main(["status"]) == 0
    assert "helpdesk         user       35 prompts    2 models, reference smol-plain" in capsys.readouterr().out

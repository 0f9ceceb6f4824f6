"""The code location as users load it: `dagster dev -w workspace.yaml` (what `make ui` starts) and
`dagster definitions validate -w workspace.yaml`; runs the CLI executes are listed under the location and can be
re-executed from it; the UI pages render (screenshots for docs/ with USL_UPDATE_SCREENSHOTS=1)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from usl_assets.definitions import defs
from usl_assets.jobs import PARTITIONS_JOB, UPSTREAM_JOB
from usl_assets.launch import console_log_config, execute_in_location, location_origin
from usl_assets.partitions import model_partitions
from usl_assets.responses import pools
from usl_assets_tests.conftest import REPO_ROOT
from usl_assets_tests.taggers import TfidfScenarioTagger
from usl_assets_tests.webserver import graphql, location_entry, running_webserver

PARTITIONS = ["alpaca_eval:gemma-2b-it", "alpaca_eval:gemma-7b-it"]


@pytest.fixture(scope="module")
def ui(tmp_path_factory, shared_data_dir):
    """A fresh instance with three runs executed the way `usl run` executes them, then the webserver on it."""
    root = tmp_path_factory.mktemp("ui")
    dagster_home, usl_home = root / "dagster", root / "usl_home"
    dagster_home.mkdir()
    (dagster_home / "dagster.yaml").write_text((REPO_ROOT / "usl_assets" / "dagster.yaml").read_text())
    env = {"USL_HOME": str(usl_home), "USL_DATA_DIR": str(shared_data_dir)}
    run_ids = []
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        tagger = TfidfScenarioTagger(shared_data_dir)  # the small tagger of the responses tests, not a trained one
        patch.setattr(pools, "load_scenario_tagger", lambda usl_home_root: tagger)
        with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
            instance.add_dynamic_partitions(model_partitions.name, PARTITIONS)
            for job, keys, tags in (  # as `usl run` launches its phases (jobs.py)
                (UPSTREAM_JOB, ["raw_autoj_pairwise"], {}),
                (UPSTREAM_JOB, ["pool_prompts"], {}),
                (PARTITIONS_JOB, ["model_responses"], {"dagster/asset_partition_range_start": PARTITIONS[0],
                                                       "dagster/asset_partition_range_end": PARTITIONS[1]}),
            ):
                result = execute_in_location(defs.resolve_job_def(job), instance,
                                             run_config=console_log_config(False),
                                             asset_selection=[dg.AssetKey(k) for k in keys], tags=tags)
                assert result.success, keys
                run_ids.append(result.run_id)
            origins = [instance.get_run_by_id(run_id).remote_job_origin for run_id in run_ids]
    with running_webserver(dagster_home, env, root / "webserver.log") as url:
        yield {"url": url, "run_ids": run_ids, "origins": origins, "dagster_home": dagster_home, "env": env}


def test_the_location_loads_with_every_asset(ui):
    entry = location_entry(ui["url"])
    assert entry["loadStatus"] == "LOADED" and entry["locationOrLoadError"]["__typename"] == "RepositoryLocation"
    nodes = graphql(ui["url"], "{ assetNodes { assetKey { path } } }")["assetNodes"]
    expected = {key.to_user_string() for key in defs.resolve_asset_graph().get_all_asset_keys()}
    assert len(nodes) >= 31 and {"/".join(n["assetKey"]["path"]) for n in nodes} == expected


def test_cli_runs_are_runs_of_the_location_and_can_be_re_executed(ui):
    assert {(o.location_name, o.repository_origin.repository_name, o.job_name) for o in ui["origins"]} == {
        ("usl_assets", "__repository__", UPSTREAM_JOB), ("usl_assets", "__repository__", PARTITIONS_JOB)}
    for job, run_ids in ((UPSTREAM_JOB, ui["run_ids"][:2]), (PARTITIONS_JOB, ui["run_ids"][2:])):
        job_runs = graphql(ui["url"], """{ pipelineOrError(params: {repositoryLocationName: "usl_assets",
            repositoryName: "__repository__", pipelineName: "%s"}) { ... on Pipeline { description runs { runId } } }
            }""" % job)["pipelineOrError"]  # the UI lists each run under its phase's job, with what the job is
        assert set(run_ids) <= {run["runId"] for run in job_runs["runs"]}
        assert "usl run, phase" in job_runs["description"]
    launched = graphql(ui["url"], f"""mutation {{ launchPipelineReexecution(reexecutionParams: {{
        parentRunId: "{ui['run_ids'][0]}", strategy: ALL_STEPS }}) {{
        __typename ... on LaunchRunSuccess {{ run {{ runId }} }} ... on PythonError {{ message }}
        ... on InvalidSubsetError {{ message }} ... on RunConfigValidationInvalid {{ errors {{ message }} }} }} }}""")
    outcome = launched["launchPipelineReexecution"]
    assert outcome["__typename"] == "LaunchRunSuccess", outcome
    run_id = outcome["run"]["runId"]
    deadline = time.monotonic() + 180
    while (status := graphql(ui["url"], f'{{ runOrError(runId: "{run_id}") {{ ... on Run {{ status }} }} }}')
           ["runOrError"]["status"]) not in {"SUCCESS", "FAILURE", "CANCELED"}:
        assert time.monotonic() < deadline, status
        time.sleep(2)
    assert status == "SUCCESS"


def test_the_origin_is_the_one_workspace_yaml_gives():
    from dagster._core.workspace.load import location_origins_from_yaml_paths

    (from_yaml,) = location_origins_from_yaml_paths([str(REPO_ROOT / "workspace.yaml")])
    ours = location_origin()
    assert from_yaml.location_name == ours.location_name
    for field in ("module_name", "attribute"):
        assert getattr(from_yaml.loadable_target_origin, field) == getattr(ours.loadable_target_origin, field)


# workspace.yaml names the attribute; `-m` alone (also pyproject's [tool.dagster]) needs one Definitions in the module.
@pytest.mark.parametrize("target", [["-w", "workspace.yaml"], ["-m", "usl_assets.definitions"]], ids=["w", "m"])
def test_dagster_definitions_validate_accepts_the_workspace(target, tmp_path):
    done = subprocess.run([str(Path(sys.executable).with_name("dagster")), "definitions", "validate", *target],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "DAGSTER_HOME": str(tmp_path)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Validation successful" in done.stdout + done.stderr


# (page, URL path, text the page must show once rendered)
UI_PAGES = [
    ("asset_graph_groups", "/asset-groups", "preferences"),
    # The column descriptions come from warehouse_tables.yaml.
    ("asset_metadata_and_columns", "/assets/raw_autoj_pairwise", "1-based line number"),
    ("asset_checks", "/assets/raw_autoj_pairwise?view=checks", "raw_autoj_pairwise_readable"),
    ("model_partition", "/assets/model_responses?view=partitions&partition=alpaca_eval%3Agemma-2b-it",
     "alpaca_eval:gemma-2b-it"),
    ("automation", "/automation", "model_inbox_sensor"),
]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def test_ui_pages_render_and_screenshots(ui, tmp_path):
    """docs/screenshots/*.png with USL_UPDATE_SCREENSHOTS=1; otherwise into a temporary folder."""
    playwright = pytest.importorskip("playwright.sync_api")
    if not Path("/usr/bin/chromium").exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    out = REPO_ROOT / "docs" / "screenshots" if os.environ.get("USL_UPDATE_SCREENSHOTS") == "1" else tmp_path
    out.mkdir(parents=True, exist_ok=True)
    with playwright.sync_playwright() as p:
        # launch() gives Chromium a fresh temporary profile (the --user-data-dir of the house rules) by itself.
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        for name, path, text in UI_PAGES:
            page.goto(ui["url"] + path, wait_until="networkidle", timeout=120_000)
            page.get_by_text(text, exact=False).first.wait_for(timeout=60_000)
            page.wait_for_timeout(2000)  # graph layout and fonts settle; the pop-up would be up by now
            assert page.get_by_text("Join the Dagster community").count() == 0  # nux disabled in dagster.yaml
            page.screenshot(path=str(out / f"{name}.png"))
            assert (out / f"{name}.png").stat().st_size > 20_000, name
        browser.close()

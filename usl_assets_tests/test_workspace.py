"""The code location as users load it: `dagster dev -w workspace.yaml` (what `make ui` starts) and
`dagster definitions validate -w workspace.yaml`; runs the CLI executes are listed under the location and can be
re-executed from it; the UI pages render (screenshots for docs/ with USL_UPDATE_SCREENSHOTS=1)."""

import os
import re
import subprocess
import sys
import time
from contextlib import contextmanager
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


def screenshot_dir(tmp_path: Path) -> Path:
    """docs/screenshots/ with USL_UPDATE_SCREENSHOTS=1; otherwise a temporary folder."""
    out = REPO_ROOT / "docs" / "screenshots" if os.environ.get("USL_UPDATE_SCREENSHOTS") == "1" else tmp_path
    out.mkdir(parents=True, exist_ok=True)
    return out


@contextmanager
def chromium_page():
    """A page of headless Debian Chromium (the test is skipped without it or Playwright)."""
    playwright = pytest.importorskip("playwright.sync_api")
    if not Path("/usr/bin/chromium").exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    with playwright.sync_playwright() as p:
        # launch() gives Chromium a fresh temporary profile (the --user-data-dir of the house rules) by itself.
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_FLAGS)
        try:
            yield browser.new_page(viewport={"width": 1600, "height": 1000})
        finally:
            browser.close()


def test_ui_pages_render_and_screenshots(ui, tmp_path):
    """docs/screenshots/*.png with USL_UPDATE_SCREENSHOTS=1; otherwise into a temporary folder."""
    out = screenshot_dir(tmp_path)
    with chromium_page() as page:
        for name, path, text in UI_PAGES:
            page.goto(ui["url"] + path, wait_until="networkidle", timeout=120_000)
            page.get_by_text(text, exact=False).first.wait_for(timeout=60_000)
            page.wait_for_timeout(2000)  # graph layout and fonts settle; the pop-up would be up by now
            assert page.get_by_text("Join the Dagster community").count() == 0  # nux disabled in dagster.yaml
            page.screenshot(path=str(out / f"{name}.png"))
            assert (out / f"{name}.png").stat().st_size > 20_000, name


# The optional neural CRMs (`usl run --neural-crm`), each with its one check: the fixture's runs, like `usl run`
# without the flag, never build them, so no check of theirs ever executes.
OPTIONAL_GROUP = "crm_neural_optional"
OPTIONAL_CRMS = {"crm_backbone_smollm2": "smollm2_backbone_ready", "crm_factorized": "crm_factorized_checkpoint_scores",
                 "crm_cross": "crm_cross_checkpoint_scores"}
PASSED_CHECK = ("raw_autoj_pairwise", "raw_autoj_pairwise_readable")  # materialized by the fixture; its check passed


def goto(page, url: str, wait_for_text: str) -> None:
    page.goto(url, wait_until="networkidle", timeout=120_000)
    page.get_by_text(wait_for_text, exact=False).first.wait_for(timeout=60_000)
    page.wait_for_timeout(2000)  # live data (materializations, check executions) arrives after the definitions


def check_status_shown(page, url: str, asset: str, check: str) -> tuple[str, str]:
    """What the asset's Checks tab draws for the check: the status under its name in the list of checks, and the
    tag under "Evaluation result" (the one check of the asset is selected by default)."""
    goto(page, f"{url}/assets/{asset}?view=checks", "Evaluation result")
    name = page.get_by_title(check, exact=True)  # the check's (maybe middle-truncated) name in the list of checks
    status = name.locator("xpath=following-sibling::span[1]").inner_text()  # the status line under the name
    result = page.get_by_text("Evaluation result", exact=True).locator("xpath=following-sibling::*[1]").inner_text()
    return status.strip(), result.strip()


def passed_count(summary: str) -> int | None:
    """The lineage node's check summary ("0 / 1 Passed" in Dagster 1.13): how many it counts as passed."""
    found = re.search(r"(\d+) / \d+ Passed", summary)
    return int(found[1]) if found else None


def test_optional_neural_crms_read_as_optional_and_their_checks_as_not_evaluated(ui, tmp_path):
    """Issue 20 (6): the optional neural CRMs sit in a group of their own, each described as optional, and the UI
    draws no check of theirs as passed: the Checks tab reads "Not evaluated". A control asset whose check did pass
    reads "Passed" through the same locators, so the negative assertions can fail."""
    for asset, check in OPTIONAL_CRMS.items():  # the state the UI draws: never materialized, no check execution
        executions = graphql(ui["url"], """{ assetCheckExecutions(assetKey: {path: ["%s"]}, checkName: "%s",
            limit: 5) { id status } }""" % (asset, check))["assetCheckExecutions"]
        assert executions == [], (asset, check, executions)
    out = screenshot_dir(tmp_path)
    with chromium_page() as page:
        # The group's listing: each optional CRM in its row with a description saying it is optional.
        goto(page, f"{ui['url']}/locations/usl_assets/asset-groups/{OPTIONAL_GROUP}/list", "crm_cross")
        for asset in OPTIONAL_CRMS:
            row = (page.locator("div").filter(has=page.locator(f'a[href="/assets/{asset}"]'))
                   .filter(has_text="Never materialized").last)  # the innermost: the asset's row
            text = row.inner_text()
            assert re.search(r"\(optional: `?usl run --neural-crm", text) and OPTIONAL_GROUP in text, text
        # The asset's own page: its group and the optional description.
        goto(page, f"{ui['url']}/assets/crm_cross", "Description")
        assert page.get_by_text(OPTIONAL_GROUP, exact=True).first.is_visible()
        description = page.get_by_text(re.compile(r"optional: usl run --neural-crm")).first
        assert description.is_visible(), page.inner_text("body")[:2000]
        # The control: a check that ran and passed is drawn as passed by the same locators.
        control_row, control_result = check_status_shown(page, ui["url"], *PASSED_CHECK)
        assert (control_row.lower(), control_result.lower()) == ("succeeded", "passed"), (control_row, control_result)
        for asset, check in OPTIONAL_CRMS.items():
            row_status, result = check_status_shown(page, ui["url"], asset, check)
            assert (row_status.lower(), result.lower()) == ("not evaluated", "not evaluated"), \
                (asset, row_status, result)
            assert page.get_by_text(re.compile(r"^(Passed|Succeeded)$")).count() == 0, asset
            if asset == "crm_cross":
                page.screenshot(path=str(out / "dagster_optional_crm.png"))
                assert (out / "dagster_optional_crm.png").stat().st_size > 20_000
        # The group's lineage: each node's check summary counts no check as passed. (Dagster 1.13 draws it as
        # "0 / 1 Passed" beside a green tick for checks that never ran: its AssetChecksStatusSummary falls back
        # to the green icon for "not evaluated"; the count, 0, is the part that tells.)
        goto(page, f"{ui['url']}/locations/usl_assets/asset-groups/{OPTIONAL_GROUP}", "crm_cross")
        for asset in OPTIONAL_CRMS:
            summary = page.locator(f'a[href="/assets/{asset}?view=checks"]').first.inner_text()
            assert passed_count(summary) == 0 or (passed_count(summary) is None and "Passed" not in summary), \
                (asset, summary)

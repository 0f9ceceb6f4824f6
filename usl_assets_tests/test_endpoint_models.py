"""The `endpoint_models` asset (responses/endpoint_assets.py): models declared in $USL_HOME/endpoint_models.yaml
answered by a real llama.cpp server, stored and registered as partitions; a rerun asks nothing again and stores
nothing; a declared model whose endpoint is down is reported by the asset and its WARN check, never fatal; the
sensor turns a refresh into one partition run per refreshed model."""

import json
from pathlib import Path

import dagster as dg
import pytest

from usl_assets.responses import endpoint_models as declared, pools, user_pools
from usl_assets.responses.endpoint_assets import endpoint_models, endpoint_models_refreshed, \
    endpoint_models_refreshed_all
from usl_assets.settings import UslConfigError
from usl_assets_tests.conftest import REPO_ROOT
from usl_assets_tests.llama_server import llama_server  # noqa: F401 (the fixture)
from usl_assets_tests.webserver import free_port


def declare(home: Path, entries: list[dict]) -> None:
    (home / declared.DECLARED_FILE).write_text(json.dumps({"models": entries}))  # JSON is YAML


def test_declared_models_are_answered_stored_and_registered(usl_env, llama_server, tmp_path):  # noqa: F811
    home = Path(usl_env["usl_home"].path)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(line + "\n" for line in
                               (REPO_ROOT / "examples" / "helpdesk" / "prompts.jsonl").read_text().splitlines()[:4]))
    user_pools.register_pool("helpdesk", prompts, home)
    down = f"http://127.0.0.1:{free_port()}/v1"
    declare(home, [{"pool": "helpdesk", "model": "smol", "endpoint": llama_server, "max_tokens": 12},
                   {"pool": "helpdesk", "model": "offline", "endpoint": down, "max_attempts": 1}])
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([endpoint_models, endpoint_models_refreshed_all], resources=usl_env, instance=instance)
    assert result.success  # the endpoint that is down does not fail the asset
    metadata = result.asset_materializations_for_node("endpoint_models")[0].metadata
    assert [item["key"] for item in metadata["refreshed"].value] == ["helpdesk:smol"]
    assert metadata["not_refreshed"].value == 1 and "cannot reach" in metadata["models"].value
    check = result.get_asset_check_evaluations()[0]
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    stored = pools.accepted_model_files(home, "helpdesk")
    assert list(stored) == ["smol"] and len(stored["smol"].read_text().splitlines()) == 4
    assert json.loads(pools.generation_sidecar(stored["smol"]).read_text())["max_tokens"] == 12
    assert instance.get_dynamic_partitions("models") == ["helpdesk:smol"]
    assert user_pools.read_record(home, "helpdesk").reference_model == "smol"

    # The sensor: one run of the refreshed model's partition (its run key names the file's content).
    requests = endpoint_models_refreshed(dg.build_sensor_context(instance=instance))
    assert [(r.partition_key, r.run_key.rsplit(":", 1)[0]) for r in requests] == [
        ("helpdesk:smol", "endpoint:helpdesk:smol")]

    again = dg.materialize([endpoint_models], resources=usl_env, instance=instance)
    metadata = again.asset_materializations_for_node("endpoint_models")[0].metadata
    assert metadata["refreshed"].value == [] and "| helpdesk:smol | unchanged | 4 | 0 |" in metadata["models"].value


def test_a_declaration_that_cannot_be_used_is_one_line(usl_env):
    home = usl_env["usl_home"].root()
    assert declared.declared_models(home) == []  # none declared: nothing to do
    for text, message in [("models: {pool: x}", "expected `models:`"), ("models:\n  - {pool: x}", "needs pool"),
                          ("models:\n  - {pool: x, model: y, endpoint: z, colour: red}", "unknown keys"),
                          ("models: [", "not valid YAML")]:
        (home / declared.DECLARED_FILE).write_text(text)
        with pytest.raises(UslConfigError, match=message):
            declared.declared_models(home)

"""What can be proved here of the Kubernetes deployment (deploy/): the code location loads with the
k8s_job_executor and a valid config asking for GPUs on training and scoring, and the values name the chart."""

import re

import pytest

from usl_assets_tests.conftest import REPO_ROOT

pytest.importorskip("dagster_k8s", reason="the optional extra usl[k8s] (dagster-k8s) is not installed; "
                                          "`make install` installs it")


def test_definitions_load_with_the_k8s_executor_and_gpu_steps():
    from dagster._config import process_config

    from usl_assets import k8s

    defs = k8s.build_k8s_definitions()
    job = defs.resolve_implicit_global_asset_job_def()
    assert job.executor_def.name == "usl_k8s_job_executor"
    steps = {key.to_python_identifier() for key in defs.resolve_asset_graph().materializable_asset_keys}
    assert set(k8s.GPU_STEPS) <= steps  # the per-step config names real steps
    base = k8s.k8s_job_executor
    checked = process_config(base.config_schema.config_type, k8s.EXECUTOR_CONFIG)
    assert checked.success, checked.errors
    gpu = checked.value["per_step_k8s_config"]["response_rewards"]["container_config"]["resources"]
    assert gpu["requests"]["nvidia.com/gpu"] == "1" and gpu["limits"]["nvidia.com/gpu"] == "1"
    assert "nvidia.com/gpu" not in str(checked.value["step_k8s_config"])


def test_values_and_image_name_the_chart_version_and_module():
    import dagster

    values = (REPO_ROOT / "deploy" / "k8s" / "values.yaml").read_text()
    version = re.search(r"chart version (\d+\.\d+\.\d+)", values).group(1)
    assert version == dagster.__version__  # the chart follows the pinned Dagster release
    assert f"--version {version}" in values and "usl_assets.k8s" in values
    assert "usl_assets.k8s" in (REPO_ROOT / "deploy" / "Dockerfile").read_text()

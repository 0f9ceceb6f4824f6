"""The code location on Kubernetes (deploy/k8s/values.yaml, module `usl_assets.k8s`): the same Definitions with
every step in its own pod (dagster-k8s `k8s_job_executor`, the optional extra `usl[k8s]`).

CRM training (`crm_cross`, `crm_factorized`) and scoring (`response_rewards`) ask for one GPU; every other step
gets a small CPU pod. The requests are set per step in the executor (`per_step_k8s_config`, the schema of the
`dagster-k8s/config` op tag), so the stages' asset definitions stay the same on every deployment.
"""

import dagster as dg
from dagster_k8s import k8s_job_executor

from usl_assets.definitions import build_definitions

GPU_STEPS = ("crm_cross", "crm_factorized", "response_rewards")
CPU_STEP = {"container_config": {"resources": {"requests": {"cpu": "1", "memory": "4Gi"},
                                               "limits": {"memory": "8Gi"}}}}
GPU_STEP = {
    "container_config": {"resources": {"requests": {"cpu": "4", "memory": "24Gi", "nvidia.com/gpu": "1"},
                                       "limits": {"memory": "48Gi", "nvidia.com/gpu": "1"}}},
    "pod_spec_config": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
}
EXECUTOR_CONFIG = {
    "max_concurrent": 4,  # the namespace and image come from the K8sRunLauncher of the chart
    "step_k8s_config": CPU_STEP,
    "per_step_k8s_config": {step: GPU_STEP for step in GPU_STEPS},
}

usl_k8s_executor = k8s_job_executor.configured(EXECUTOR_CONFIG, name="usl_k8s_job_executor")


def build_k8s_definitions(resources: dict | None = None) -> dg.Definitions:
    base = build_definitions(resources)
    return dg.Definitions(assets=base.assets, asset_checks=base.asset_checks, jobs=base.jobs, sensors=base.sensors,
                          schedules=base.schedules, resources=base.resources, executor=usl_k8s_executor)


defs = build_k8s_definitions()

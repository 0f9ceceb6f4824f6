"""The code location as the UI loads it: one Definitions, every asset with its checks, every group known."""

import dagster as dg

from usl_assets.definitions import defs

EXPECTED_GROUPS = {"preferences", "crm", "crm_neural_optional", "responses", "scoring", "leaderboards"}


def test_definitions_load_and_validate():
    dg.Definitions.validate_loadable(defs)
    assert defs.resolve_asset_graph().get_all_asset_keys()


def test_every_asset_has_at_least_one_check():
    graph = defs.resolve_asset_graph()
    checked = {check_key.asset_key for check_key in graph.asset_check_keys}
    unchecked = sorted(k.to_user_string() for k in graph.get_all_asset_keys() if k not in checked)
    assert not unchecked, f"assets without asset checks: {unchecked}"


def test_assets_are_grouped_by_stage():
    graph = defs.resolve_asset_graph()
    groups = {graph.get(key).group_name for key in graph.get_all_asset_keys()}
    assert groups == EXPECTED_GROUPS, groups ^ EXPECTED_GROUPS
    optional = {key.to_user_string() for key in graph.get_all_asset_keys()
                if graph.get(key).group_name == "crm_neural_optional"}
    assert optional == {"crm_cross", "crm_factorized", "crm_backbone_smollm2"}  # what `usl run --neural-crm` adds
    assert all("optional" in graph.get(dg.AssetKey(name)).description for name in optional)


def test_assets_use_only_the_known_pools():
    """`warehouse` for every DuckDB writer; `crm_training` keeps long CPU training out of the warehouse pool."""
    graph = defs.resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assert node.pools <= {"warehouse", "crm_training"}, (key, node.pools)


def test_what_picks_the_scoring_checkpoint_and_the_backbone_is_in_the_lineage():
    """Which checkpoint scores the pools (crm_default_checkpoint) and the converted SmolLM2 backbone are assets
    that their users depend on, not files read behind Dagster's back."""
    graph = defs.resolve_asset_graph()
    parents = lambda name: {k.to_user_string() for k in graph.get(dg.AssetKey(name)).parent_keys}  # noqa: E731
    assert "crm_default_checkpoint" in parents("response_rewards") and "crm_default_checkpoint" in parents(
        "crm_evaluation")
    assert {"crm_linear", "crm_factorized", "crm_cross"} <= parents("crm_default_checkpoint")
    assert "crm_backbone_smollm2" in parents("crm_cross") and "crm_backbone_smollm2" in parents("crm_evaluation")


"""A small real published warehouse for the page tests: the leaderboard fixtures' upstream tables (real AlpacaEval
and MT-Bench responses) through the real leaderboard assets, and a tiny factorized CRM (MiniLM, a couple of
training steps) as USL_HOME's default checkpoint, so custom criteria are really scored. Beside it, a small linear
CRM (real pairs, a few L-BFGS iterations) for what only the linear CRM can do: show how it reads the criteria."""

import socket
from pathlib import Path

import pytest

from usl_assets.crm.checkpoints import write_default_architecture
from usl_assets.crm.train import TrainConfig, train_crm
from usl_assets.resources import DataDir, UslHome, Warehouse
from usl_assets_tests.test_leaderboards_assets import materialize_leaderboards
from usl_assets_tests.test_leaderboards_fixtures import write_upstream
from usl_assets_tests.test_scoring_support import train_tiny_crm


def train_small_linear_crm(data_root: Path, models_root: Path, iterations: int = 30) -> Path:
    """A linear CRM on a real slice (every 12th Auto-J pair with crm/data.py's criteria augmentations, a few
    PandaLM, hh-rlhf and judge rows): enough criteria phrasings for its gate to read length and structure."""
    from usl_assets.crm import data
    from usl_assets.crm.backbones import resolve_backbone
    from usl_assets_tests.crm_data_inputs import scenario_criteria_frame, tagged_preferences_frame

    tagged = tagged_preferences_frame(data_root, autoj_step=12, pandalm=10, hh=10, judge_prompts=2)
    table, _, _ = data.build_training_pairs(tagged, scenario_criteria_frame(data_root), data.PairsConfig())
    return train_crm(table[table["split"] == "train"], resolve_backbone("minilm", models_root / "backbones"),
                     TrainConfig(architecture="linear", max_steps=iterations), models_root / "crm",
                     log=lambda _: None).checkpoint_dir


def build_page_home(home: Path, data_root: Path) -> Path:
    resources = {"data_dir": DataDir(path=str(data_root)), "usl_home": UslHome(path=str(home)),
                 "warehouse": Warehouse(path=str(home / "warehouse.duckdb"))}
    write_upstream(resources["warehouse"], data_root)
    assert materialize_leaderboards(resources).success
    train_tiny_crm(data_root, "minilm", "factorized", home / "models")
    write_default_architecture(home / "models" / "crm", "factorized")
    return home


@pytest.fixture(scope="module")
def page_home(tmp_path_factory, shared_data_dir):
    """USL_HOME with a published warehouse and a default CRM; USL_HOME and USL_DATA_DIR point at it."""
    home = build_page_home(tmp_path_factory.mktemp("page") / "usl_home", shared_data_dir)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("USL_HOME", str(home))
        patch.setenv("USL_DATA_DIR", str(shared_data_dir))
        yield home


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def page_url(page_home):
    """The page served by `usl serve`'s launch() on a free port, for the module."""
    from usl_assets.page.commands import launch

    port = free_port()
    app = launch(page_home / "published" / "warehouse.duckdb", page_home, port=port, block=False)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        app.close()


@pytest.fixture(scope="module")
def linear_checkpoint(page_home, shared_data_dir) -> Path:
    """A small linear CRM in page_home's models (the default stays the factorized one)."""
    return train_small_linear_crm(shared_data_dir, page_home / "models")


@pytest.fixture(scope="module")
def linear_page_url(page_home, linear_checkpoint):
    """The page served with the linear CRM (`usl serve --checkpoint`), for the module."""
    from usl_assets.page.commands import launch

    port = free_port()
    app = launch(page_home / "published" / "warehouse.duckdb", page_home, port=port, block=False,
                 checkpoint=str(linear_checkpoint))
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        app.close()

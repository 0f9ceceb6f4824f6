import json
import os
from pathlib import Path

import pytest

from usl_assets.resources import DataDir, UslHome, Warehouse

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """The real public data: USL_DATA_DIR, or ../shared/data beside the checkout (as in CI)."""
    path = Path(os.environ.get("USL_DATA_DIR") or REPO_ROOT.parent / "shared" / "data")
    assert path.is_dir(), f"tests need the public data folder; set USL_DATA_DIR (looked at {path})"
    return path


@pytest.fixture
def usl_env(tmp_path, shared_data_dir, monkeypatch) -> dict:
    """A fresh USL_HOME per test, pointing at the real data; returns the resources dict for materialize()."""
    home = tmp_path / "usl_home"
    monkeypatch.setenv("USL_HOME", str(home))
    monkeypatch.setenv("USL_DATA_DIR", str(shared_data_dir))
    return {
        "data_dir": DataDir(path=str(shared_data_dir)),
        "usl_home": UslHome(path=str(home)),
        "warehouse": Warehouse(path=str(home / "warehouse.duckdb")),
    }


@pytest.fixture(scope="session")
def tiny_backbone(tmp_path_factory, shared_data_dir) -> Path:
    """A 2-layer Llama sequence classifier with a BPE tokenizer trained on real Auto-J prompts."""
    from usl_assets_tests.tiny_model import build_tiny_backbone

    texts = []
    with open(shared_data_dir / "preferences" / "autoj_pairwise.jsonl", encoding="utf-8") as handle:
        for line in list(handle)[:300]:
            row = json.loads(line)
            texts += [row["prompt"], str(row["response 1"]), str(row["response 2"])]
    return build_tiny_backbone(texts, tmp_path_factory.mktemp("tiny_backbone"))

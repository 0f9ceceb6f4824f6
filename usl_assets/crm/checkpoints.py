"""Where the CRM checkpoints are and which one is the default, without loading any model library (the command line
and the page read this before they know whether they need torch at all).

A checkpoint is a folder `$USL_HOME/models/crm/<architecture>/<checkpoint_id>/` that is finished once its
`crm.json` exists (train.train_crm writes it last). `models/crm/default.json` records the default architecture and
checkpoint (asset crm_default_checkpoint); `models/crm/<architecture>/latest.json` the last materialized one.
"""

import json
from pathlib import Path

from usl_assets.crm.backbones import Backbone
from usl_assets.settings import UslConfigError

ARCHITECTURES = ("linear", "factorized", "cross")
DEFAULT_ARCHITECTURE = "linear"
CHECKPOINT_FILE = "crm.json"
DEFAULT_FILE = "default.json"  # $USL_HOME/models/crm/default.json: the configured default architecture
LATEST_FILE = "latest.json"  # $USL_HOME/models/crm/<architecture>/latest.json: the last materialized checkpoint


def is_finished(folder: Path) -> bool:
    return (Path(folder) / CHECKPOINT_FILE).exists()


def read_checkpoint_info(folder: Path) -> dict:
    return json.loads((Path(folder) / CHECKPOINT_FILE).read_text(encoding="utf-8"))


def checkpoint_backbone(info: dict) -> Backbone:
    """The backbone a checkpoint's info (read_checkpoint_info) names; its folder must still exist."""
    described = info["backbone"]
    path = Path(described["path"])
    if not (path / "config.json").exists():
        raise UslConfigError(f"the checkpoint's backbone folder {path} is missing (materialize its backbone)")
    return Backbone(described["name"], path, described["kind"], described["identity"])


def write_default_architecture(crm_root: Path, architecture: str, checkpoint_id: str | None = None) -> None:
    """Record the default (asset crm_default_checkpoint) for what runs outside Dagster: the CLI and the page."""
    crm_root.mkdir(parents=True, exist_ok=True)
    chosen = {"architecture": architecture, **({"checkpoint_id": checkpoint_id} if checkpoint_id else {})}
    (crm_root / DEFAULT_FILE).write_text(json.dumps(chosen), encoding="utf-8")


def mark_latest(crm_root: Path, architecture: str, checkpoint_id: str) -> None:
    """Record the checkpoint the last training materialization produced (or reused)."""
    (crm_root / architecture / LATEST_FILE).write_text(json.dumps({"checkpoint_id": checkpoint_id}),
                                                        encoding="utf-8")


def default_checkpoint(usl_home_root: Path | str, architecture: str | None = None) -> Path:
    """The last materialized checkpoint of `architecture`, else the newest finished one. Without an architecture:
    the default that crm_default_checkpoint recorded (its checkpoint while that is still there)."""
    crm_root = Path(usl_home_root) / "models" / "crm"
    if architecture is None:
        configured = crm_root / DEFAULT_FILE
        chosen = json.loads(configured.read_text(encoding="utf-8")) if configured.exists() else {}
        architecture = chosen.get("architecture", DEFAULT_ARCHITECTURE)
        recorded = crm_root / str(architecture) / chosen.get("checkpoint_id", "")
        if chosen.get("checkpoint_id") and is_finished(recorded):
            return recorded
    if architecture not in ARCHITECTURES:
        raise UslConfigError(f"unknown CRM architecture {architecture!r}: use one of {', '.join(ARCHITECTURES)}")
    latest = crm_root / architecture / LATEST_FILE
    if latest.exists():
        marked = crm_root / architecture / json.loads(latest.read_text(encoding="utf-8"))["checkpoint_id"]
        if is_finished(marked):
            return marked
    finished = [p.parent for p in (crm_root / architecture).glob(f"*/{CHECKPOINT_FILE}")]
    if not finished:
        raise UslConfigError(f"no trained {architecture} CRM under {crm_root}: materialize crm_{architecture} first")
    return max(finished, key=lambda p: read_checkpoint_info(p)["created_at"])


def load_scorer(checkpoint_dir: Path | str, length_only: bool = False):
    """A RewardScorer for a finished checkpoint folder (linear, factorized or cross); `length_only`: the linear
    CRM's length-only twin. The linear CRM loads without torch (crm/numpy_encoder.py); the neural ones import it."""
    folder = Path(checkpoint_dir)
    if not is_finished(folder):
        raise UslConfigError(f"{folder} is not a finished CRM checkpoint (no {CHECKPOINT_FILE})")
    info = read_checkpoint_info(folder)
    if info["architecture"] == "linear":
        from usl_assets.crm.linear_crm import load_linear_scorer

        return load_linear_scorer(folder, checkpoint_backbone(info), info["checkpoint_id"], length_only=length_only)
    from usl_assets.crm.scorer import load_neural_scorer

    return load_neural_scorer(folder, info)

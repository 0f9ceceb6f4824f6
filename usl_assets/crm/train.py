"""Bradley–Terry training of the CRM architectures with a budget in steps, and resume.

Budgets are steps (L-BFGS iterations for the linear CRM), never minutes, so the same inputs train the same
checkpoint on a quiet or a busy machine. `max_minutes` is only a safety net: a training that reaches it stops
with TrainingTimeLimit (the asset fails with that message; the intermediate state stays for a resume), it never
ships a half-trained checkpoint.

loss = -log σ(r_chosen − r_rejected). A checkpoint folder is `<root>/<architecture>/<checkpoint_id>/`; the id is a
hash of the backbone's identity, the training data and the hyperparameters, so a rerun of the same training
finds its folder: a finished one (crm.json present) is reused, an unfinished one resumes from its last
intermediate state (crm/train_state.py: adapter, head, optimizer, step, RNG states) and ends bit for bit where an
uninterrupted run ends. The linear CRM has no intermediate state: an interrupted fit is redone from zeros, which
is deterministic and gives the same checkpoint (crm/linear_crm.py). The LoRA loops are in crm/trainers.py.
On CUDA: bf16 autocast and gradient checkpointing; on CPU: float32.
"""

import hashlib
import json
import resource
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from usl_assets.crm.backbones import Backbone
from usl_assets.crm.features import FEATURE_NAMES
from usl_assets.crm.linear import TrainingTimeLimit
from usl_assets.crm.checkpoints import CHECKPOINT_FILE, is_finished, read_checkpoint_info
from usl_assets.crm.train_state import latest_state

__all__ = ["TrainConfig", "TrainResult", "bt_loss", "checkpoint_id", "device_and_dtype", "latest_state", "train_crm"]

Log = Callable[[str], None]


@dataclass(frozen=True)
class TrainConfig:
    architecture: str  # cross | factorized | linear
    max_length: int = 256
    max_steps: int = 400
    max_minutes: float = 30.0  # safety net only: reaching it fails the training (TrainingTimeLimit)
    batch_size: int = 8  # pairs per step
    lr: float = 2e-4
    lora_r: int = 8
    seed: int = 0
    warmup_steps: int = 10
    checkpoint_every: int = 25  # steps between intermediate checkpoints
    head_epochs: int = 40  # factorized: epochs of the head over frozen embeddings of every pair, before LoRA
    phase1_pairs: int = 1200  # factorized: pairs (seeded order) whose texts phase 1 embeds
    judge_weight: float = 0.25  # linear: weight of an AI-judge row (human rows weigh 1)
    harmless_weight: float = 0.5  # linear: weight of an hh-rlhf harmless row

    def budget_key(self) -> dict:
        """What the checkpoint id hashes: everything that changes the trained weights (not the safety net)."""
        return {k: v for k, v in asdict(self).items() if k != "max_minutes"}


@dataclass
class TrainResult:
    checkpoint_dir: Path
    checkpoint_id: str
    steps: int
    pairs_seen: int
    tokens_seen: int
    wall_seconds: float
    final_loss: float
    peak_memory_mb: float
    resumed_from_step: int = 0
    reused: bool = False
    losses: list[float] = field(default_factory=list)

    @property
    def pairs_per_second(self) -> float:
        return self.pairs_seen / max(self.wall_seconds, 1e-9)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_seen / max(self.wall_seconds, 1e-9)


def device_and_dtype() -> tuple[torch.device, torch.dtype | None]:
    """CUDA with bf16 autocast when there is one, else CPU in float32 (autocast dtype None)."""
    if torch.cuda.is_available():
        return torch.device("cuda"), torch.bfloat16
    return torch.device("cpu"), None


def pair_examples(pairs: pd.DataFrame) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(prompt, chosen, rejected, criteria) per row of a crm.training_pairs frame."""
    return [
        (str(p), str(c), str(r), tuple(str(x) for x in (crit if crit is not None else ())))
        for p, c, r, crit in zip(pairs["prompt"], pairs["chosen"], pairs["rejected"], pairs["criteria"])
    ]


def training_data_hash(pairs: pd.DataFrame, graded_answers: pd.DataFrame | None = None) -> str:
    digest = hashlib.sha256()
    for example in pair_examples(pairs):
        digest.update(json.dumps(example).encode())
    if graded_answers is not None and len(graded_answers):
        for row in graded_answers[["prompt", "model", "response", "strength"]].itertuples(index=False):
            digest.update(json.dumps([str(row[0]), str(row[1]), str(row[2]), float(row[3])]).encode())
    return digest.hexdigest()[:16]


def checkpoint_id(backbone: Backbone, data_hash: str, config: TrainConfig) -> str:
    parts = {"backbone": backbone.identity, "data": data_hash, "config": config.budget_key()}
    if config.architecture == "linear":  # the fit's own settings (penalties, style terms, graded answers' τ)
        from usl_assets.crm.linear_crm import linear_fit_key

        parts["linear"] = linear_fit_key(config)
    key = json.dumps(parts, sort_keys=True)
    return f"{backbone.name}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def batch_indices(step: int, batch_size: int, n: int, seed: int) -> np.ndarray:
    """The pairs of one step: consecutive slices of seeded per-epoch permutations (same on resume)."""
    positions = np.arange(step * batch_size, (step + 1) * batch_size)
    epochs = positions // n
    orders = {e: np.random.default_rng(seed + int(e)).permutation(n) for e in np.unique(epochs)}
    return np.array([orders[e][p % n] for e, p in zip(epochs, positions)])


def lr_factor(step: int, config: TrainConfig) -> float:
    """Linear warmup, then linear decay to 10% over the step budget."""
    progress = step / max(config.max_steps, 1)
    return min(1.0, (step + 1) / max(config.warmup_steps, 1)) * max(0.1, 1.0 - progress)


def check_time_limit(elapsed: float, config: TrainConfig, step: int) -> None:
    if elapsed > config.max_minutes * 60:
        raise TrainingTimeLimit(
            f"{config.architecture} CRM training reached its wall-clock safety net ({config.max_minutes:g} min) at "
            f"step {step} of {config.max_steps}: no checkpoint was shipped. Budgets are steps; raise "
            f"crm_settings.max_minutes (or lower max_steps) and rerun: it resumes from the last intermediate state")


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def bt_loss(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    return -torch.nn.functional.logsigmoid(chosen.float() - rejected.float()).mean()


# ----------------------------------------------------------------------------------------------------------------
# Entry point


def train_crm(pairs: pd.DataFrame, backbone: Backbone, config: TrainConfig, models_root: Path,
              log: Log = print, stop_after_steps: int | None = None,
              graded_answers: pd.DataFrame | None = None) -> TrainResult:
    """Train (or resume, or reuse) a CRM on `pairs`; returns where the checkpoint is and how training went.

    `stop_after_steps` ends the run early without finishing the checkpoint (what a crash leaves behind; tests).
    `graded_answers` (crm.graded_answers) feeds the linear CRM's graded-answers feature; the LoRA ones ignore it.
    """
    if pairs.empty:
        raise ValueError("no training pairs")
    graded_answers = graded_answers if config.architecture == "linear" else None
    data_hash = training_data_hash(pairs, graded_answers)
    ckpt_id = checkpoint_id(backbone, data_hash, config)
    folder = models_root / config.architecture / ckpt_id
    if is_finished(folder):
        info = read_checkpoint_info(folder)
        log(f"checkpoint {ckpt_id} already trained on this data and configuration: reusing it")
        return TrainResult(folder, ckpt_id, reused=True, **info["training"])
    folder.mkdir(parents=True, exist_ok=True)
    if config.architecture == "linear":
        from usl_assets.crm.linear_crm import train_linear

        figures = train_linear(pairs, backbone, config, folder, log, graded_answers)
        result = TrainResult(folder, ckpt_id, figures["steps"], figures["pairs_seen"], figures["tokens_seen"],
                             figures["wall_seconds"], figures["final_loss"], round(peak_memory_mb(torch.device("cpu")), 1))
    else:
        from usl_assets.crm.trainers import CrossTrainer, FactorizedTrainer

        trainer = CrossTrainer if config.architecture == "cross" else FactorizedTrainer
        result = trainer(pairs, backbone, config, folder, log).run(stop_after_steps)
    if stop_after_steps is None:
        info = {
            "architecture": config.architecture,
            "checkpoint_id": ckpt_id,
            "backbone": backbone.describe(),
            "training_data_hash": data_hash,
            "training_pairs": len(pairs),
            "hyperparameters": config.budget_key(),
            "feature_names": list(FEATURE_NAMES),
            "training": {k: v for k, v in asdict(result).items()
                         if k not in ("checkpoint_dir", "checkpoint_id", "reused", "resumed_from_step")},
            "created_at": time.time(),
            "metrics": {},
        }
        (folder / CHECKPOINT_FILE).write_text(json.dumps(info, indent=2), encoding="utf-8")
    return result

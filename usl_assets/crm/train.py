"""Bradley–Terry training of the CRM architectures with a budget in steps, and resume.

Budgets are steps (L-BFGS iterations for the linear CRM), never minutes, so the same inputs train the same
checkpoint on a quiet or a busy machine. `max_minutes` is only a safety net: a training that reaches it stops
with TrainingTimeLimit (the asset fails with that message; the intermediate state stays for a resume), it never
ships a half-trained checkpoint.

loss = -log σ(r_chosen − r_rejected). A checkpoint folder is `<root>/<architecture>/<checkpoint_id>/`; the id is a
hash of the backbone's identity, the training data and the hyperparameters, so a rerun of the same training
finds its folder: a finished one (crm.json present) is reused, an unfinished one resumes from its last
intermediate state (`intermediate/step-NNNNNN/state.pt`: adapter, head, optimizer, step, elapsed time).
On CUDA: bf16 autocast and gradient checkpointing; on CPU: float32.
"""

import hashlib
import json
import math
import resource
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from usl_assets.crm.backbones import Backbone
from usl_assets.crm.features import FEATURE_NAMES, feature_matrix
from usl_assets.crm.interface import ScoreItem
from usl_assets.crm.linear import TrainingTimeLimit
from usl_assets.crm.model import (FactorizedHead, collate, criteria_text, embed_texts, encode_cross,
                                  load_cross_model, load_encoder, lora_config)

Log = Callable[[str], None]
CHECKPOINT_FILE = "crm.json"


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


def training_data_hash(pairs: pd.DataFrame) -> str:
    digest = hashlib.sha256()
    for example in pair_examples(pairs):
        digest.update(json.dumps(example).encode())
    return digest.hexdigest()[:16]


def checkpoint_id(backbone: Backbone, data_hash: str, config: TrainConfig) -> str:
    key = json.dumps({"backbone": backbone.identity, "data": data_hash, "config": config.budget_key()},
                     sort_keys=True)
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
# Intermediate checkpoints


def latest_state(folder: Path) -> Path | None:
    states = sorted((folder / "intermediate").glob("step-*/state.pt"))
    return states[-1] if states else None


def save_state(folder: Path, step: int, state: dict, keep: int = 2) -> None:
    target = folder / "intermediate" / f"step-{step:06d}"
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    torch.save(state, partial / "state.pt")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    for old in sorted((folder / "intermediate").glob("step-*[0-9]"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def is_finished(folder: Path) -> bool:
    return (folder / CHECKPOINT_FILE).exists()


def read_checkpoint_info(folder: Path) -> dict:
    return json.loads((folder / CHECKPOINT_FILE).read_text(encoding="utf-8"))


# ----------------------------------------------------------------------------------------------------------------
# Entry point


def train_crm(pairs: pd.DataFrame, backbone: Backbone, config: TrainConfig, models_root: Path,
              log: Log = print, stop_after_steps: int | None = None) -> TrainResult:
    """Train (or resume, or reuse) a CRM on `pairs`; returns where the checkpoint is and how training went.

    `stop_after_steps` ends the run early without finishing the checkpoint (what a crash leaves behind; tests).
    """
    if pairs.empty:
        raise ValueError("no training pairs")
    data_hash = training_data_hash(pairs)
    ckpt_id = checkpoint_id(backbone, data_hash, config)
    folder = models_root / config.architecture / ckpt_id
    if is_finished(folder):
        info = read_checkpoint_info(folder)
        log(f"checkpoint {ckpt_id} already trained on this data and configuration: reusing it")
        return TrainResult(folder, ckpt_id, reused=True, **info["training"])
    folder.mkdir(parents=True, exist_ok=True)
    if config.architecture == "linear":
        from usl_assets.crm.linear_crm import train_linear

        figures = train_linear(pairs, backbone, config, folder, log)
        result = TrainResult(folder, ckpt_id, figures["steps"], figures["pairs_seen"], figures["tokens_seen"],
                             figures["wall_seconds"], figures["final_loss"], round(peak_memory_mb(torch.device("cpu")), 1))
    else:
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


class _Trainer:
    """The shared loop: budget, lr schedule, progress logs, intermediate checkpoints, resume."""

    def __init__(self, pairs: pd.DataFrame, backbone: Backbone, config: TrainConfig, folder: Path, log: Log):
        self.examples = pair_examples(pairs)
        self.backbone, self.config, self.folder, self.log = backbone, config, folder, log
        self.device, self.autocast_dtype = device_and_dtype()
        torch.manual_seed(config.seed)
        self.build()
        self.optimizer = torch.optim.AdamW(self.trainable_parameters(), lr=config.lr, weight_decay=0.0)
        self.step, self.elapsed, self.pairs_seen, self.tokens_seen, self.losses = 0, 0.0, 0, 0, []
        self.phase_done = False
        self.phase1_loss = math.nan  # the factorized head's held-out loss after phase 1

    # subclasses: build(), trainable_parameters(), train_step(indices) -> (loss, tokens), extra_state(),
    # load_extra_state(state), prepare() (work before the first step; may use the budget), save_final()

    def prepare(self) -> None:
        pass

    def run(self, stop_after_steps: int | None) -> TrainResult:
        resumed_from = self.resume()
        start = time.perf_counter() - self.elapsed
        if not self.phase_done:
            self.prepare()
            self.phase_done = True
            self.elapsed = time.perf_counter() - start
            self.checkpoint()
        config, window = self.config, time.perf_counter()
        while self.step < config.max_steps:
            check_time_limit(self.elapsed, config, self.step)
            for group in self.optimizer.param_groups:
                group["lr"] = group.get("base_lr", config.lr) * lr_factor(self.step, config)
            indices = batch_indices(self.step, config.batch_size, len(self.examples), config.seed)
            loss, tokens = self.train_step(indices)
            self.step += 1
            self.pairs_seen += len(indices)
            self.tokens_seen += tokens
            self.losses.append(loss)
            self.elapsed = time.perf_counter() - start
            if self.step % config.checkpoint_every == 0:
                self.checkpoint()
                rate = config.checkpoint_every * config.batch_size / max(time.perf_counter() - window, 1e-9)
                window = time.perf_counter()
                self.log(f"{config.architecture} step {self.step}/{config.max_steps} "
                         f"loss {np.mean(self.losses[-config.checkpoint_every:]):.4f} {rate:.1f} pairs/s "
                         f"elapsed {self.elapsed:.0f}s")
            if stop_after_steps is not None and self.step >= stop_after_steps:
                self.checkpoint()
                break
        if stop_after_steps is None:
            self.save_final()
        tail = self.losses[-max(1, min(len(self.losses), 20)):] or [self.phase1_loss]
        return TrainResult(
            checkpoint_dir=self.folder, checkpoint_id=self.folder.name, steps=self.step,
            pairs_seen=self.pairs_seen, tokens_seen=self.tokens_seen, wall_seconds=round(self.elapsed, 2),
            final_loss=float(np.mean(tail)), peak_memory_mb=round(peak_memory_mb(self.device), 1),
            resumed_from_step=resumed_from, losses=[round(x, 5) for x in self.losses],
        )

    def checkpoint(self) -> None:
        from peft import get_peft_model_state_dict

        state = {
            "adapter": get_peft_model_state_dict(self.peft_model),
            "optimizer": self.optimizer.state_dict(),
            "step": self.step, "elapsed": self.elapsed, "pairs_seen": self.pairs_seen,
            "tokens_seen": self.tokens_seen, "losses": self.losses, "phase_done": self.phase_done,
            **self.extra_state(),
        }
        save_state(self.folder, self.step, state)

    def resume(self) -> int:
        from peft import set_peft_model_state_dict

        found = latest_state(self.folder)
        if found is None:
            return 0
        state = torch.load(found, map_location=self.device, weights_only=False)
        set_peft_model_state_dict(self.peft_model, state["adapter"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step, self.elapsed = state["step"], state["elapsed"]
        self.pairs_seen, self.tokens_seen, self.losses = state["pairs_seen"], state["tokens_seen"], state["losses"]
        self.phase_done = state["phase_done"]
        self.load_extra_state(state)
        self.log(f"resuming {self.folder.name} from step {self.step} ({self.elapsed:.0f}s already spent)")
        return self.step

    def autocast(self):
        if self.autocast_dtype is None:
            return torch.autocast("cpu", enabled=False)
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def extra_state(self) -> dict:
        return {}

    def load_extra_state(self, state: dict) -> None:
        pass


class CrossTrainer(_Trainer):
    def build(self) -> None:
        from peft import get_peft_model

        model, self.tokenizer = load_cross_model(self.backbone, self.device, None, self.config.seed)
        if self.device.type == "cuda":
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.peft_model = get_peft_model(model, lora_config(self.backbone.kind, self.config.lora_r, "cross"))
        self.peft_model.train()

    def trainable_parameters(self):
        return [p for p in self.peft_model.parameters() if p.requires_grad]

    def train_step(self, indices: np.ndarray) -> tuple[float, int]:
        items = []
        for i in indices:
            prompt, chosen, rejected, criteria = self.examples[i]
            items += [ScoreItem(prompt, chosen, criteria), ScoreItem(prompt, rejected, criteria)]
        batch = collate(self.tokenizer, encode_cross(self.tokenizer, self.backbone.kind, items,
                                                     self.config.max_length), self.device)
        with self.autocast():
            rewards = self.peft_model(**batch).logits.squeeze(-1)
        loss = bt_loss(rewards[0::2], rewards[1::2])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.trainable_parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(loss.detach()), int(batch["attention_mask"].sum())

    def save_final(self) -> None:
        self.peft_model.save_pretrained(self.folder / "adapter")
        self.tokenizer.save_pretrained(self.folder / "tokenizer")


class FactorizedTrainer(_Trainer):
    """Phase 1: the head learns from frozen embeddings of every pair (cheap, many epochs). Phase 2: LoRA on the
    encoder and the head together, for the rest of the budget."""

    def build(self) -> None:
        from peft import get_peft_model

        encoder, self.tokenizer = load_encoder(self.backbone, self.device, None)
        if self.device.type == "cuda":
            encoder.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.peft_model = get_peft_model(encoder, lora_config(self.backbone.kind, self.config.lora_r, "factorized"))
        dim = encoder.config.hidden_size
        self.head = FactorizedHead(dim).to(self.device)
        self.features = torch.tensor(feature_matrix([e[1] for e in self.examples] + [e[2] for e in self.examples]),
                                     device=self.device)
        self.head.set_feature_scale(self.features)

    def trainable_parameters(self):
        return [p for p in self.peft_model.parameters() if p.requires_grad] + list(self.head.parameters())

    def prepare(self) -> None:
        """Phase 1: embed each distinct text once (no gradients) of the first `phase1_pairs` pairs in seeded
        order; then fit the head on every pair whose texts are embedded."""
        started = time.perf_counter()
        vectors = self._embed_pairs(started)
        covered = [i for i, e in enumerate(self.examples)
                   if all(t in vectors for t in (e[0], criteria_text(e[3]), e[1], e[2]))]
        self.log(f"factorized phase 1: embedded {len(vectors)} distinct texts covering {len(covered)} of "
                 f"{len(self.examples)} pairs in {time.perf_counter() - started:.0f}s")
        rows = torch.as_tensor(covered, device=self.device)
        query = torch.stack([vectors[self.examples[i][0]] for i in covered])
        crit = torch.stack([vectors[criteria_text(self.examples[i][3])] for i in covered])
        chosen = torch.stack([vectors[self.examples[i][1]] for i in covered])
        rejected = torch.stack([vectors[self.examples[i][2]] for i in covered])
        self._fit_head(rows, query, crit, chosen, rejected)
        self.peft_model.train()

    def _embed_pairs(self, started: float, pairs_per_chunk: int = 32) -> dict[str, torch.Tensor]:
        order = np.random.default_rng(self.config.seed).permutation(len(self.examples))
        half, vectors = self.config.max_length // 2, {}
        order = order[: self.config.phase1_pairs]
        self.peft_model.eval()
        for start in range(0, len(order), pairs_per_chunk):
            check_time_limit(time.perf_counter() - started, self.config, 0)
            chunk = [self.examples[i] for i in order[start:start + pairs_per_chunk]]
            short = {t for e in chunk for t in (e[0], criteria_text(e[3]))} - vectors.keys()
            long = {t for e in chunk for t in (e[1], e[2])} - vectors.keys()
            for texts, length in ((sorted(short), half), (sorted(long), self.config.max_length)):
                for batch_start in range(0, len(texts), 32):
                    batch = texts[batch_start:batch_start + 32]
                    with torch.inference_mode(), self.autocast():
                        vectors.update(zip(batch, embed_texts(self.peft_model, self.tokenizer, batch, length,
                                                              self.device).clone()))
            done = min(start + pairs_per_chunk, len(order))
            if done % (pairs_per_chunk * 10) == 0 or done == len(order):
                self.log(f"factorized phase 1: {done}/{len(order)} pairs embedded "
                         f"({done / max(time.perf_counter() - started, 1e-9):.1f} pairs/s)")
        return vectors

    def _fit_head(self, rows, query, crit, chosen, rejected) -> None:
        """Fit the head on 90% of the covered pairs; keep the epoch with the lowest loss on the other 10%
        (a head of this size memorizes a thousand pairs within a few epochs)."""
        n, total_pairs = len(rows), len(self.examples)
        self.pairs_seen += n
        if n < 10 or self.config.head_epochs == 0:
            return
        generator = torch.Generator().manual_seed(self.config.seed)
        shuffled = torch.randperm(n, generator=generator).to(self.device)
        held, fit = shuffled[: n // 10], shuffled[n // 10:]

        def loss_of(idx):
            return bt_loss(self.head(chosen[idx], query[idx], crit[idx], self.features[rows[idx]]),
                           self.head(rejected[idx], query[idx], crit[idx], self.features[total_pairs + rows[idx]]))

        head_optimizer = torch.optim.AdamW(self.head.parameters(), lr=1e-3, weight_decay=1e-2)
        best = (float("inf"), 0, {k: v.clone() for k, v in self.head.state_dict().items()})
        for epoch in range(self.config.head_epochs):
            self.head.train()
            order = fit[torch.randperm(len(fit), generator=generator).to(self.device)]
            for start in range(0, len(order), 64):
                loss = loss_of(order[start:start + 64])
                loss.backward()
                head_optimizer.step()
                head_optimizer.zero_grad(set_to_none=True)
            self.head.eval()
            with torch.no_grad():
                held_loss = float(loss_of(held))
            if held_loss < best[0]:
                best = (held_loss, epoch + 1, {k: v.clone() for k, v in self.head.state_dict().items()})
        self.head.load_state_dict(best[2])
        self.head.train()
        self.phase1_loss = best[0]
        self.log(f"factorized head: best held-out loss {best[0]:.4f} at epoch {best[1]}/{self.config.head_epochs} "
                 f"({len(fit)} pairs fitted, {len(held)} held out)")

    def train_step(self, indices: np.ndarray) -> tuple[float, int]:
        chunk = [self.examples[i] for i in indices]
        half, counts = self.config.max_length // 2, []
        with self.autocast():
            query = embed_texts(self.peft_model, self.tokenizer, [e[0] for e in chunk], half, self.device, counts)
            crit = embed_texts(self.peft_model, self.tokenizer, [criteria_text(e[3]) for e in chunk], half,
                               self.device, counts)
            responses = embed_texts(self.peft_model, self.tokenizer, [e[1] for e in chunk] + [e[2] for e in chunk],
                                    self.config.max_length, self.device, counts)
        k, n = len(chunk), len(self.examples)
        idx = torch.as_tensor(indices, device=self.device)
        loss = bt_loss(self.head(responses[:k], query, crit, self.features[idx]),
                       self.head(responses[k:], query, crit, self.features[n + idx]))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.trainable_parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(loss.detach()), sum(counts)

    def extra_state(self) -> dict:
        return {"head": self.head.state_dict(), "phase1_loss": self.phase1_loss}

    def load_extra_state(self, state: dict) -> None:
        self.head.load_state_dict(state["head"])
        self.phase1_loss = state["phase1_loss"]

    def save_final(self) -> None:
        from safetensors.torch import save_file

        self.peft_model.save_pretrained(self.folder / "adapter")
        self.tokenizer.save_pretrained(self.folder / "tokenizer")
        save_file({k: v.contiguous() for k, v in self.head.state_dict().items()}, self.folder / "head.safetensors")
        (self.folder / "head.json").write_text(json.dumps(
            {"dim": self.head.dim, "n_features": self.head.n_features, "hidden": self.head.mlp[0].out_features,
             "max_length": self.config.max_length, "feature_names": list(FEATURE_NAMES)}), encoding="utf-8")

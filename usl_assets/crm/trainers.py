"""The LoRA training loops (cross and factorized): budget, lr schedule, progress logs, intermediate states and
resume (crm/train_state.py). Entry point: crm/train.train_crm."""

import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from usl_assets.crm.backbones import Backbone
from usl_assets.crm.features import FEATURE_NAMES, feature_matrix
from usl_assets.crm.interface import ScoreItem
from usl_assets.crm.interface import criteria_text
from usl_assets.crm.model import (FactorizedHead, collate, embed_texts, encode_cross,
                                  load_cross_model, load_encoder, lora_config)
from usl_assets.crm.train import (Log, TrainConfig, TrainResult, batch_indices, bt_loss, check_time_limit,
                                  device_and_dtype, lr_factor, pair_examples, peak_memory_mb)
from usl_assets.crm.train_state import latest_state, restore_rng_state, rng_state, save_state


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

    def train_mode(self) -> None:
        """Dropout on for the steps, whether they follow prepare() or a resume (which skips it)."""
        self.peft_model.train()

    def run(self, stop_after_steps: int | None) -> TrainResult:
        resumed_from = self.resume()
        start = time.perf_counter() - self.elapsed
        if not self.phase_done:
            self.prepare()
            self.phase_done = True
            self.elapsed = time.perf_counter() - start
            self.checkpoint()
        config, window = self.config, time.perf_counter()
        self.train_mode()
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
            "rng": rng_state(), **self.extra_state(),
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
        restore_rng_state(state["rng"])
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

    def train_mode(self) -> None:
        self.peft_model.train()
        self.head.train()

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

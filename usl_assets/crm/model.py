"""The CRM's two architectures and how their inputs are built.

- cross (the paper's): one sequence per (criteria, conversation, response) through a sequence classifier with one
  output. Decoders get the criteria as a system message through the chat template; encoders get a text pair
  ([CLS] criteria + prompt [SEP] response). Both cut their parts by the same token budget (`input_budget`). LoRA adapters, the score head fully trained (peft modules_to_save).
- factorized: one LoRA-tuned encoder embeds the criteria, the query and the response separately (mean pooling);
  a small head scores a response from those embeddings and the response's measured features
  (crm/features.py), so response embeddings can be cached and a new criterion costs one short encoder pass.
"""

from dataclasses import dataclass

import torch
from torch import nn

from usl_assets.crm.backbones import Backbone
from usl_assets.crm.features import FEATURE_NAMES
from usl_assets.crm.interface import ScoreItem
from usl_assets.pooling import mean_pool

SYSTEM_PREAMBLE = "You are a helpful assistant."
CRITERIA_INTRO = ("Judge the assistant's response to the user by how well it meets the user's criteria. "
                  "The criteria are:")


def system_message(criteria: tuple[str, ...]) -> str:
    if not criteria:
        return SYSTEM_PREAMBLE
    return f"{SYSTEM_PREAMBLE} {CRITERIA_INTRO}\n" + "\n".join(f"* {line}" for line in criteria)


def clip_text(tokenizer, text: str, max_tokens: int) -> str:
    """The longest prefix of `text` that fits in `max_tokens` tokens (cut at a token boundary)."""
    if max_tokens <= 0:
        return ""
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, truncation=True,
                        max_length=max_tokens)
    offsets = encoded["offset_mapping"]
    return text[: offsets[-1][1]] if offsets else ""


# ----------------------------------------------------------------------------------------------------------------
# Cross-encoder inputs


def encode_cross(tokenizer, kind: str, items: list[ScoreItem], max_length: int) -> list[dict]:
    """Token ids per item, unpadded, both kinds cut by `budgeted_context`, so truncation never removes the prompt
    or the response (the decoder's score is read at its end)."""
    if kind == "decoder":
        return [_encode_decoder(tokenizer, item, max_length) for item in items]
    return [_encode_encoder(tokenizer, item, max_length) for item in items]


def input_budget(max_length: int) -> dict[str, int]:
    """Token budgets of a cross input: the system message (criteria, heaviest first) at most a third, the
    history and the prompt a sixth each; the response gets the rest."""
    return {"system": max_length // 3, "history": max_length // 6, "prompt": max_length // 6}


TRUNCATION_RULE = (
    "Counted in tokens of this tokenizer without special tokens; each part keeps its longest prefix that fits. "
    "system message <= max_length // 3; earlier turns share max_length // 6 (each gets half of what the turns "
    "before it left); prompt <= max_length // 6; the response gets the rest: decoder, max_length minus the "
    "templated [system, history, user] minus 8; encoder, the text pair truncated 'only_second' to max_length.")


def budgeted_context(tokenizer, item: ScoreItem, max_length: int) -> tuple[str, list[tuple[str, str]], str]:
    """(system message, history turns, prompt), each clipped to its share of `input_budget`."""
    budget = input_budget(max_length)
    system = clip_text(tokenizer, system_message(item.criteria), budget["system"])
    history, left = [], budget["history"]
    for role, content in item.history:
        history.append((role, clip_text(tokenizer, content, left // 2)))
        left -= left // 2
    return system, history, clip_text(tokenizer, item.prompt, budget["prompt"])


def _encode_decoder(tokenizer, item: ScoreItem, max_length: int) -> dict:
    system, history, prompt = budgeted_context(tokenizer, item, max_length)
    messages = [{"role": "system", "content": system}]
    messages += [{"role": role, "content": content} for role, content in history]
    messages.append({"role": "user", "content": prompt})
    prefix_tokens = len(tokenizer(tokenizer.apply_chat_template(messages, tokenize=False),
                                  add_special_tokens=False)["input_ids"])
    # 8 tokens leave room for the assistant turn's own markers.
    response = clip_text(tokenizer, item.response, max_length - prefix_tokens - 8)
    messages.append({"role": "assistant", "content": response})
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    encoded = tokenizer(text, add_special_tokens=False, truncation=True, max_length=max_length)
    return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}


def encoder_first_text(system: str, history: list[tuple[str, str]], prompt: str) -> str:
    """An encoder's first segment: system message, blank line, earlier turns (one a line), prompt."""
    context = "\n".join(content for _, content in history)
    return system + "\n\n" + (context + "\n" if context else "") + prompt


def _encode_encoder(tokenizer, item: ScoreItem, max_length: int) -> dict:
    first = encoder_first_text(*budgeted_context(tokenizer, item, max_length))
    encoded = tokenizer(first, item.response, truncation="only_second", max_length=max_length)
    return dict(encoded)


def collate(tokenizer, encoded: list[dict], device: torch.device) -> dict[str, torch.Tensor]:
    batch = tokenizer.pad(encoded, padding=True, return_tensors="pt")
    return {key: value.to(device) for key, value in batch.items()}


def load_cross_model(backbone: Backbone, device: torch.device, dtype: torch.dtype, seed: int):
    """Backbone + a fresh, seeded one-output score head (eval mode) and its tokenizer. The head is drawn from
    a forked CPU generator (weights are built on the CPU), so loading leaves the caller's torch RNG untouched."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(backbone.path)
    tokenizer.padding_side = "right"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForSequenceClassification.from_pretrained(backbone.path, num_labels=1, dtype=dtype)
    model.config.pad_token_id = tokenizer.pad_token_id
    return model.to(device).eval(), tokenizer


def lora_config(kind: str, r: int, task: str):
    from peft import LoraConfig, TaskType

    return LoraConfig(
        task_type=TaskType.SEQ_CLS if task == "cross" else TaskType.FEATURE_EXTRACTION,
        r=r,
        lora_alpha=2 * r,
        lora_dropout=0.05,
        target_modules="all-linear",
    )


# ----------------------------------------------------------------------------------------------------------------
# Factorized


def embed_texts(encoder, tokenizer, texts: list[str], max_length: int, device: torch.device,
                counts: list | None = None) -> torch.Tensor:
    """Mean-pooled, L2-normalized embeddings (float32) of one batch of texts; gradients flow if enabled.
    `counts`, when given, receives the number of real tokens encoded."""
    batch = tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt").to(device)
    hidden = encoder(**batch).last_hidden_state
    if counts is not None:
        counts.append(int(batch["attention_mask"].sum()))
    return nn.functional.normalize(mean_pool(hidden, batch["attention_mask"]).float(), dim=-1)


class FactorizedHead(nn.Module):
    """reward = MLP(r, c⊙r, q⊙r, f, (W c)⊙f) with f the standardized response features: the last term lets the
    criteria turn each measured property (length, lists, code…) up or down."""

    def __init__(self, dim: int, n_features: int = len(FEATURE_NAMES), hidden: int = 256):
        super().__init__()
        self.dim, self.n_features = dim, n_features
        self.register_buffer("feature_mean", torch.zeros(n_features))
        self.register_buffer("feature_std", torch.ones(n_features))
        self.criteria_to_features = nn.Linear(dim, n_features)
        self.mlp = nn.Sequential(
            nn.Linear(3 * dim + 2 * n_features, hidden), nn.GELU(), nn.Dropout(0.1), nn.Linear(hidden, 1)
        )

    def set_feature_scale(self, features: torch.Tensor) -> None:
        self.feature_mean.copy_(features.mean(0))
        self.feature_std.copy_(features.std(0).clamp(min=1e-3))

    def forward(self, response: torch.Tensor, query: torch.Tensor, criteria: torch.Tensor,
                features: torch.Tensor) -> torch.Tensor:
        scaled = (features - self.feature_mean) / self.feature_std
        gate = self.criteria_to_features(criteria)
        x = torch.cat([response, criteria * response, query * response, scaled, gate * scaled], dim=-1)
        return self.mlp(x).squeeze(-1)


@dataclass
class FactorizedModel:
    encoder: nn.Module  # peft-wrapped AutoModel
    tokenizer: object
    head: FactorizedHead
    max_length: int
    device: torch.device

    def embed(self, texts: list[str], max_length: int | None = None) -> torch.Tensor:
        return embed_texts(self.encoder, self.tokenizer, texts, max_length or self.max_length, self.device)


def load_encoder(backbone: Backbone, device: torch.device, dtype: torch.dtype):
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(backbone.path)
    encoder = AutoModel.from_pretrained(backbone.path, dtype=dtype, add_pooling_layer=False)
    return encoder.to(device), tokenizer

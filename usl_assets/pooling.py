"""Mean pooling over real tokens: the sentence encoder, the CRM encoders and the exported factorized loader (which
ships this file as usl_pooling.py) all pool with this one function. Needs torch only."""

import torch


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """batch × tokens × dim → batch × dim: the mean of the vectors whose mask is 1 (padding left out)."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)

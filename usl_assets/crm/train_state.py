"""A training's files on disk: the finished checkpoint's `crm.json` and the intermediate states a resume reads.

An intermediate state (`intermediate/step-NNNNNN/state.pt`) holds everything the next step depends on: adapter
(and the factorized head), optimizer moments, step, losses, and the random generators' states (torch CPU and
CUDA, numpy's and Python's global ones), so a resumed training takes bit for bit the steps an uninterrupted one
would. The data order and the learning rate are pure functions of the step (train.batch_indices, lr_factor),
so restoring the step restores the sampler position and the schedule. A state is written into
`step-NNNNNN.partial/` and renamed when complete: a process killed while saving leaves a `.partial` folder that
resumes ignore.
"""

import random
import shutil
from pathlib import Path

import numpy as np
import torch



def _complete_states(folder: Path) -> list[Path]:
    return sorted(p for p in (folder / "intermediate").glob("step-*") if p.name[len("step-"):].isdigit())


def latest_state(folder: Path) -> Path | None:
    states = [p / "state.pt" for p in _complete_states(folder) if (p / "state.pt").exists()]
    return states[-1] if states else None


def save_state(folder: Path, step: int, state: dict, keep: int = 2) -> None:
    target = folder / "intermediate" / f"step-{step:06d}"
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    torch.save(state, partial / "state.pt")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    for old in _complete_states(folder)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def rng_state() -> dict:
    """The global generators a training step may draw from (dropout draws from torch's)."""
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }


def restore_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"].cpu())
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])

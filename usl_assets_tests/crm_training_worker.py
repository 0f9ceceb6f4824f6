"""A CRM training in a process of its own, for the test that kills it with SIGKILL and reruns it.

python -m usl_assets_tests.crm_training_worker BACKBONE DATA_DIR MODELS_ROOT MAX_STEPS: trains the cross CRM of
test_crm_model.tiny_config on the Auto-J train pairs of test_crm_model.autoj_pairs, prints the result as JSON.
Each progress line (written after an intermediate state is saved) is followed by a short pause, so the killing
test has time to strike while the budget is far from spent; the pause changes no weight.
"""

import json
import sys
import time
from pathlib import Path

from usl_assets.crm.backbones import resolve_backbone
from usl_assets.crm.train import train_crm
from usl_assets_tests.test_crm_model import autoj_pairs, tiny_config


def config(max_steps: int):
    return tiny_config("cross", max_steps=max_steps)


def main(argv: list[str]) -> int:
    backbone_dir, data_dir, models_root, max_steps = argv
    pairs = autoj_pairs(Path(data_dir))
    backbone = resolve_backbone(backbone_dir, Path(models_root) / "backbones")

    def log(line: str) -> None:
        print(line, flush=True)
        time.sleep(0.3)

    result = train_crm(pairs[pairs["split"] == "train"], backbone, config(int(max_steps)),
                       Path(models_root) / "crm", log=log)
    print(json.dumps({"checkpoint_id": result.checkpoint_id, "resumed_from_step": result.resumed_from_step,
                      "steps": result.steps}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

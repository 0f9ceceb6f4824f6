"""New models arriving as files: validation, acceptance and quarantine (used by the inbox's intake run and
`usl add-model`).

The sensor only lists `$USL_HOME/inbox/<pool>/` (`pending_files`, `file_signature`: a stat, no read). The intake
run validates one file as a whole (`intake_file`): a good one is copied (atomically) to
`$USL_HOME/accepted/<pool>/<model>.<ext>` and removed from the inbox; a bad one is moved to
`$USL_HOME/inbox/quarantine/` next to a `<name>.reason.txt`. Nothing is half-loaded: rows are read into the
warehouse only by the `model_responses` partition, from the accepted file. Rows are judged by pools.py's own
rules (`pools.load_model_responses`), the ones that partition applies.
"""

import hashlib
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from usl_assets.responses import pools, user_pools
from usl_assets.responses.pools import ResponseFileError
from usl_assets.settings import UslConfigError, usl_home

QUARANTINE_FOLDER = "quarantine"
# Files still being written: write to one of these names, then rename (an atomic move).
IN_PROGRESS_SUFFIXES = (".tmp", ".partial", ".part", ".reason.txt")


@dataclass(frozen=True)
class ValidatedFile:
    pool: str
    model: str
    path: Path
    sha256: str
    records: int
    usable: int  # rows that answer one of the pool's prompts with text

    @property
    def partition_key(self) -> str:
        return pools.partition_key(self.pool, self.model)

    @property
    def suffix(self) -> str:
        return ".json.gz" if self.path.name.endswith(".gz") else self.path.suffix


def validate_model_file(pool: str, path: Path, data_root: Path, model: str | None = None,
                        usl_home_root: Path | None = None) -> ValidatedFile:
    """Checks a whole file before anything is stored; ResponseFileError says in one line what is wrong."""
    usl_home_root = usl_home() if usl_home_root is None else usl_home_root
    pools.check_pool(pool, usl_home_root)
    suffixes = pools.model_file_suffixes(pool)
    if not path.is_file():
        raise ResponseFileError(f"{path} is not a file")
    if not path.name.endswith(suffixes):
        raise ResponseFileError(f"{path.name}: a {pool} file ends with {' or '.join(suffixes)}")
    records = pools.read_model_records(pool, path)
    if not records:
        raise ResponseFileError(f"{path.name}: holds no records")
    name = pools.check_model_name(model or _model_name(pool, path, records))
    usable = _usable_rows(pool, name, path, data_root, usl_home_root)
    if usable == 0:
        raise ResponseFileError(f"{path.name}: no record answers one of the {pool} prompts with text")
    return ValidatedFile(pool, name, path, file_sha256(path), len(records), usable)


def _model_name(pool: str, path: Path, records: list) -> str:
    stem = pools.model_name_of_file(path)
    if stem not in pools.GENERIC_STEMS:
        return stem
    field_name = "model_id" if pool == "mt_bench" else "generator"
    names = {r.get(field_name) for r in records if isinstance(r, dict)}
    if len(names) != 1 or not isinstance(next(iter(names)), str):
        raise ResponseFileError(
            f"{path.name}: the file name does not name the model and its {field_name} fields hold "
            f"{len(names)} different values; rename the file <model>{path.suffix} or pass --model"
        )
    return next(iter(names))


def _usable_rows(pool: str, model: str, path: Path, data_root: Path, usl_home_root: Path) -> int:
    """Rows `model_responses` would load: pools.py's rules, not a copy of them."""
    prompts = pools.prompts_of_pool(data_root, usl_home_root, pool)
    # The scenario tags (from the warehouse) do not change which rows are usable; the raw prompts suffice.
    untagged = prompts.assign(scenario="", scenario_group="")
    return len(pools.load_model_responses(pool, model, path, untagged).responses)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def store_accepted(validated: ValidatedFile, usl_home_root: Path, keep_source: bool = False) -> Path:
    """Copies the file to accepted/<pool>/<model><ext>, atomically; an earlier accepted file of that model (in
    either format) is moved to archive/<pool>/ first. Removes the inbox file unless keep_source."""
    folder = pools.accepted_dir(usl_home_root, validated.pool)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{validated.model}{validated.suffix}"
    partial = folder / f".{target.name}.partial"
    shutil.copyfile(validated.path, partial)
    older = pools.accepted_model_files(usl_home_root, validated.pool).get(validated.model)
    if older is not None:
        archive_file(older, validated.model, usl_home_root, validated.pool)
    sidecar, target_sidecar = pools.generation_sidecar(validated.path), pools.generation_sidecar(target)
    if target_sidecar.is_file():  # an older model's generation settings (archived with it, or stale)
        archive_file(target_sidecar, validated.model + ".generation", usl_home_root, validated.pool)
    if sidecar.is_file():
        shutil.copyfile(sidecar, target_sidecar)
    partial.replace(target)
    if not keep_source:
        validated.path.unlink()
    if validated.pool not in pools.POOLS:
        record = user_pools.read_record(usl_home_root, validated.pool)
        if record.reference_model is None:  # a user pool's first model is its reference until changed
            user_pools.set_reference_model(usl_home_root, validated.pool, validated.model)
    return target


def archive_file(path: Path, model: str, usl_home_root: Path, pool: str) -> Path:
    """Moves a replaced accepted file to archive/<pool>/<model>.<utc time>.<sha8><ext>: re-adding it with
    `usl add-model --replace` restores that version."""
    folder = usl_home_root / "archive" / pool
    folder.mkdir(parents=True, exist_ok=True)
    suffix = ".json.gz" if path.name.endswith(".gz") else path.suffix
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = folder / f"{model}.{stamp}.{file_sha256(path)[:8]}{suffix}"
    shutil.move(path, target)
    return target


def current_source(pool: str, model: str, data_root: Path, usl_home_root: Path) -> Path | None:
    """The file the model's rows come from now (accepted, else public), or None for a new model."""
    try:
        return pools.model_file(data_root, usl_home_root, pool, model)
    except UslConfigError:
        return None


def check_replacement(validated: ValidatedFile, data_root: Path, usl_home_root: Path, replace: bool,
                      reference_models: dict[str, str]) -> Path | None:
    """Refuses to replace an existing model unless `replace`, and refuses to shrink a pool's reference model
    (every USL score is a comparison with it) even then; returns the file being replaced, if any."""
    existing = current_source(validated.pool, validated.model, data_root, usl_home_root)
    if existing is None or file_sha256(existing) == validated.sha256:
        return None  # new, or the same file again (e.g. rerun after a killed run): nothing is replaced
    key = validated.partition_key
    if not replace:
        raise ResponseFileError(f"model {key} exists already (from {existing}): pass --replace to replace it (the "
                                "current version is archived)")
    if reference_models.get(validated.pool) == validated.model:
        before = _usable_rows(validated.pool, validated.model, existing, data_root, usl_home_root)
        if validated.usable < before:
            raise ResponseFileError(
                f"{validated.model} is the reference model of pool {validated.pool} (every USL score compares with "
                f"it): replacing it would shrink it from {before} to {validated.usable} usable answers; refused")
    return existing


def quarantine_file(path: Path, usl_home_root: Path, reason: str) -> Path:
    folder = usl_home_root / "inbox" / QUARANTINE_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / path.name
    if target.exists():
        target = folder / f"{int(time.time())}-{path.name}"
    shutil.move(path, target)
    target.with_name(target.name + ".reason.txt").write_text(reason + "\n", encoding="utf-8")
    return target


def pending_files(usl_home_root: Path) -> list[tuple[str, Path]]:
    """(pool folder name, file) for every finished file in the inbox, oldest first. Lists and stats only."""
    inbox = usl_home_root / "inbox"
    if not inbox.is_dir():
        return []
    found = []
    for folder in sorted(p for p in inbox.iterdir() if p.is_dir() and p.name != QUARANTINE_FOLDER):
        for path in folder.iterdir():
            if path.is_file() and not path.name.startswith(".") and not path.name.endswith(IN_PROGRESS_SUFFIXES):
                found.append((folder.name, path))
    return sorted(found, key=lambda item: (item[1].stat().st_mtime, str(item[1])))


def file_signature(pool: str, path: Path) -> str:
    """`<pool>/<name>:<size>:<mtime_ns>`: the same file seen on two ticks has one signature (one run key); a file
    written again gets a new one."""
    stat = path.stat()
    return f"{pool}/{path.name}:{stat.st_size}:{stat.st_mtime_ns}"


@dataclass(frozen=True)
class Intake:
    """What the intake run did with one inbox file."""

    status: str  # "accepted" (new model, stored), "same_file" (that model's current file again), "quarantined"
    detail: str  # where the file is now, or the quarantine reason
    key: str | None = None  # the model's partition key (accepted, same_file)
    sha256: str | None = None


def intake_file(pool: str, path: Path, usl_home_root: Path, data_root: Path) -> Intake:
    """Validates one inbox file: a new model is stored under accepted/, the same file again is removed, anything
    else (bad, or a different file for an existing model: the inbox never replaces) is quarantined with its
    reason."""
    try:
        validated = validate_model_file(pool, path, data_root, usl_home_root=usl_home_root)
    except (ResponseFileError, UslConfigError) as error:
        return Intake("quarantined", f"{quarantine_file(path, usl_home_root, str(error))}: {error}")
    existing = current_source(validated.pool, validated.model, data_root, usl_home_root)
    if existing is not None and file_sha256(existing) == validated.sha256:
        path.unlink()
        return Intake("same_file", f"the same file as {existing}", validated.partition_key, validated.sha256)
    if existing is not None:
        reason = (f"model {validated.partition_key} exists already (from {existing}): the inbox never replaces "
                  "a model; use `usl add-model --replace`")
        return Intake("quarantined", f"{quarantine_file(path, usl_home_root, reason)}: {reason}")
    stored = store_accepted(validated, usl_home_root)
    return Intake("accepted", f"{validated.usable} usable rows, stored as {stored}", validated.partition_key,
                  validated.sha256)

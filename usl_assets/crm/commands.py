"""`usl evaluate-crm` (a user's preference file against a CRM) and `usl export-crm` (a CRM without this project)."""

import argparse
from pathlib import Path

from usl_assets.settings import UslConfigError, usl_home


def add_arguments(command: str, parser: argparse.ArgumentParser) -> None:
    """The arguments of `command` (cli.COMMANDS): evaluate-crm or export-crm."""
    if command == "export-crm":
        parser.add_argument("out_dir", type=Path)
        parser.add_argument("--architecture", choices=["cross", "factorized"], default="cross")
        parser.add_argument("--checkpoint", type=Path, help="a checkpoint folder (default: the latest of "
                                                            "--architecture)")
        parser.set_defaults(handler=export_crm)
        return
    evaluate = parser
    evaluate.add_argument("--preferences", required=True, type=Path,
                          help="JSONL in docs/user_preferences.md's format (also the test splits export-crm writes)")
    evaluate.add_argument("--checkpoint", type=Path, help="a CRM checkpoint folder (default: the default CRM)")
    evaluate.add_argument("--out", type=Path, help="per-pair rewards, .csv or .jsonl (default: beside the file)")
    evaluate.set_defaults(handler=evaluate_crm)


def _checkpoint(given: Path | None, architecture: str | None) -> Path:
    from usl_assets.crm.checkpoints import default_checkpoint, is_finished

    if given is None:
        return default_checkpoint(usl_home(), architecture)
    if not is_finished(given):
        raise UslConfigError(f"--checkpoint {given} is not a finished CRM checkpoint folder (no crm.json)")
    return given


def evaluate_crm(args: argparse.Namespace) -> int:
    from usl_assets.crm.evaluate import read_preference_file, score_preference_pairs
    from usl_assets.crm.checkpoints import load_scorer
    from usl_assets.preferences.canonical import CriteriaBook
    from usl_assets.settings import data_dir

    if not args.preferences.is_file():
        raise UslConfigError(f"--preferences {args.preferences} is not a file")
    out = args.out or args.preferences.with_name(args.preferences.stem + ".rewards.csv")
    if out.suffix not in (".csv", ".jsonl"):
        raise UslConfigError(f"--out must end in .csv or .jsonl, not {out.name}")
    if out.resolve() == args.preferences.resolve():
        raise UslConfigError(f"--out {out} is the preference file itself: choose another file for the rewards")
    checkpoint = _checkpoint(args.checkpoint, None)
    pairs, quarantined = read_preference_file(args.preferences, CriteriaBook(data_dir()))
    for bad in quarantined:
        print(f"skipped line {bad['line']}: {bad['reason']}")
    if not pairs:
        raise UslConfigError(f"{args.preferences} has no usable preference pair ({len(quarantined)} skipped)")
    rewards = score_preference_pairs(pairs, load_scorer(checkpoint))
    decided = rewards[rewards["human_winner"] != "tie"]
    if out.suffix == ".csv":
        rewards.to_csv(out, index=False)
    else:
        rewards.to_json(out, orient="records", lines=True)
    accuracy = decided["correct"].mean() if len(decided) else float("nan")
    print(f"checkpoint: {checkpoint}")
    print(f"pairs: {len(rewards)} scored ({len(decided)} with a winner, {len(rewards) - len(decided)} ties), "
          f"{len(quarantined)} skipped")
    print(f"accuracy: {accuracy:.4f}")
    print(f"rewards: {out}")
    return 0


def export_crm(args: argparse.Namespace) -> int:
    from usl_assets.crm.export import export_cross, export_factorized, export_test_splits
    from usl_assets.crm.checkpoints import read_checkpoint_info
    from usl_assets.resources import Warehouse

    if args.out_dir.exists() and any(args.out_dir.iterdir()):
        raise UslConfigError(f"{args.out_dir} is not empty: export into a new or empty folder")
    checkpoint = _checkpoint(args.checkpoint, args.architecture)
    architecture = read_checkpoint_info(checkpoint)["architecture"]
    exporter = export_cross if architecture == "cross" else export_factorized
    exporter(checkpoint, args.out_dir)
    print(f"exported {architecture} CRM {checkpoint.name} to {args.out_dir}")
    warehouse = Warehouse()
    if warehouse.table_exists("crm.training_pairs"):
        pairs = warehouse.query("SELECT * FROM crm.training_pairs WHERE split <> ? ORDER BY pair_id", ["train"])
        for split, rows in export_test_splits(pairs, args.out_dir).items():
            print(f"  test_splits/{split}.jsonl: {rows} pairs")
    else:
        print("  no crm.training_pairs in the warehouse: test splits not exported (materialize crm_training_pairs)")
    return 0

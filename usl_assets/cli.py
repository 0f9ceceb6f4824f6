"""The `usl` command: what users run outside the Dagster UI.

COMMANDS names each subcommand, its line in `usl --help` and the stage's `commands.py` that declares its arguments
(`add_arguments(command, parser)`) and runs it. Only the chosen subcommand's module is imported: `usl --help` and a
misspelt command answer without loading Dagster, pandas or a model. Errors are one line on stderr and a non-zero
exit."""

import argparse
import gc
import importlib
import os
import shutil
import sys
import warnings
from pathlib import Path

import duckdb

from usl_assets.interrupts import stop_on_signals
from usl_assets.settings import SlotWaitTimeout, UslConfigError, usl_home

# A step waited longer than --wait-timeout for a pool slot another run holds: sysexits' EX_TEMPFAIL, try later.
EXIT_SLOT_WAIT_TIMEOUT = 75

# subcommand -> (the module that declares and runs it, its line in `usl --help`)
COMMANDS = {
    "status": ("usl_assets.commands", "what is materialized and the warehouse's row counts"),
    "run": ("usl_assets.commands", "materialize the whole asset graph on the instance in DAGSTER_HOME"),
    "add-model": ("usl_assets.responses.commands",
                  "add a model's answers (AlpacaEval, MT-Bench or the generic JSONL of a user pool) to a pool"),
    "add-pool": ("usl_assets.responses.pool_commands",
                 "register a pool of your own prompts (JSONL: id, prompt, optional topic and history)"),
    "generate": ("usl_assets.responses.generate_commands",
                 "answer a pool's prompts with a model behind an OpenAI-compatible endpoint, then add it"),
    "set-reference": ("usl_assets.responses.pool_commands",
                      "change a user pool's reference model (the one every other is compared with)"),
    "remove-pool": ("usl_assets.responses.pool_commands",
                    "archive a user pool: its prompts, model files and warehouse rows"),
    "leaderboard": ("usl_assets.leaderboards.commands",
                    "rank a pool's models overall and per topic, under default or your own criteria"),
    "serve": ("usl_assets.page.commands",
              "the leaderboard web page (default, customizable, compare tabs) on the published warehouse"),
    "evaluate-crm": ("usl_assets.crm.commands", "score a preference file (JSONL) with a CRM, print accuracy"),
    "export-crm": ("usl_assets.crm.commands", "export a CRM and the test splits for use without USL"),
}


class OneLineErrorParser(argparse.ArgumentParser):
    """A bad argument is one line on stderr (`usl: error: …`) and exit code 2, without the usage block."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The `usl` parser; only the subcommand named in argv (its first word that is one) gets its arguments, the
    others are listed by name and help line."""
    # Dagster marks single-run backfill policies as beta; a terminal user cannot act on that warning.
    warnings.filterwarnings("ignore", message=".*is currently in beta.*")
    warnings.filterwarnings("ignore", message=".*is currently in preview.*")  # partitioned asset checks
    parser = OneLineErrorParser(prog="usl", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show Dagster's own log (INFO) and the libraries' (model load reports) besides the "
                             "progress lines")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                       parser_class=OneLineErrorParser)
    chosen = next((word for word in (sys.argv[1:] if argv is None else argv) if word in COMMANDS), None)
    for command, (module_name, line) in COMMANDS.items():
        subparser = subparsers.add_parser(command, help=line)
        if command == chosen:
            importlib.import_module(module_name).add_arguments(command, subparser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "verbose", False):
        quiet_libraries()
    stop_on_signals()
    try:
        return int(args.handler(args) or 0)
    except UslConfigError as error:
        print(f"usl: error: {error}", file=sys.stderr)
        return 2
    except SlotWaitTimeout as error:
        print(f"usl: error: {error}", file=sys.stderr)
        return EXIT_SLOT_WAIT_TIMEOUT
    except duckdb.IOException as error:
        # Writes are short transactions and readers wait for them; what is left is a file held open by another
        # process for longer (a DuckDB shell, a notebook) or a file that cannot be read.
        print(f"usl: error: the warehouse cannot be opened ({str(error).splitlines()[0]}); close what holds it or "
              "read the published copy", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        removed = remove_partial_files(usl_home())
        print("usl: interrupted; the interrupted run is marked failed and can be rerun"
              + (f" (removed {removed} partial file(s))" if removed else ""), file=sys.stderr)
        # The interpreter's last garbage collection walks every object the code location made (seconds on a busy
        # machine): an interrupted command ends at once instead. Nothing left needs a finalizer to run.
        gc.freeze()
        return 130


def quiet_libraries() -> None:
    """transformers' load reports and weight-loading bars are library chatter: `--verbose` keeps them. Set in the
    environment for what imports transformers later (and Dagster's subprocesses), and on it if already imported."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.set_verbosity_error()
        transformers_logging.disable_progress_bar()


def remove_partial_files(home: Path) -> int:
    """What an interrupted write left: USL's writers name their work in progress `*.partial*` and rename it at the
    end (checkpoints, merged encoders, embedding caches under models/, the published copy). The inbox is not
    touched: a `.partial` there is a user's file still being written."""
    found = [path for folder in ("models", "published") for path in (home / folder).rglob("*.partial*")]
    removed = 0
    for path in sorted(found, reverse=True):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed += 1
    return removed


if __name__ == "__main__":
    sys.exit(main())

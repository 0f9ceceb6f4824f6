"""The `usl` command: what users run outside the Dagster UI. Each stage adds its subcommands in its
`commands.py` (a function `add_parsers(subparsers)`); errors are one line on stderr and a non-zero exit."""

import argparse
import importlib
import sys
import warnings

import duckdb

from usl_assets.settings import UslConfigError

COMMAND_MODULES = [
    "usl_assets.commands",
    "usl_assets.crm.commands",
    "usl_assets.leaderboards.commands",
    "usl_assets.page.commands",
    "usl_assets.responses.commands",
]


class OneLineErrorParser(argparse.ArgumentParser):
    """A bad argument is one line on stderr (`usl: error: …`) and exit code 2, without the usage block."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    # Dagster marks single-run backfill policies as beta; a terminal user cannot act on that warning.
    warnings.filterwarnings("ignore", message=".*is currently in beta.*")
    parser = OneLineErrorParser(prog="usl", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                       parser_class=OneLineErrorParser)
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).add_parsers(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except UslConfigError as error:
        print(f"usl: error: {error}", file=sys.stderr)
        return 2
    except duckdb.IOException as error:
        print(f"usl: error: the warehouse is busy or unreadable ({str(error).splitlines()[0]}); "
              "read the published copy, or retry when the running materialization ends", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("usl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

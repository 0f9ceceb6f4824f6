"""`usl serve`: the leaderboard web page on the published warehouse (docs/page.md)."""

import argparse
from pathlib import Path

from usl_assets.resources import Warehouse
from usl_assets.settings import UslConfigError, usl_home

CONCURRENCY = 8  # requests a page handles at once (scoring itself takes them one at a time)


def add_arguments(command: str, parser: argparse.ArgumentParser) -> None:
    """The arguments of `usl serve`."""
    parser.add_argument("--port", type=int, default=7860, help="port to listen on (default 7860)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--published", default="", metavar="PATH",
                        help="the published warehouse (default $USL_HOME/published/warehouse.duckdb)")
    parser.add_argument("--checkpoint", default="", metavar="DIR", help="a CRM checkpoint folder (default: the "
                                                                        "current default checkpoint)")
    parser.set_defaults(handler=serve)


def launch(published: Path, usl_home_root: Path, host: str = "127.0.0.1", port: int = 7860, checkpoint: str = "",
           block: bool = True):
    """Load the CRM and the published data once, then serve; returns the Gradio app (running) when not blocking."""
    from usl_assets.crm import feature_workers
    from usl_assets.page.app import build_app
    from usl_assets.page.data import PageData

    feature_workers.start()  # before the server opens its socket, which the workers would otherwise hold
    data = PageData(published, usl_home_root, checkpoint)
    app = build_app(data)
    app.queue(default_concurrency_limit=CONCURRENCY)
    app.launch(server_name=host, server_port=port, prevent_thread_lock=not block, quiet=not block,
               show_error=False, inbrowser=False, share=False, footer_links=[])
    return app


def serve(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        raise UslConfigError(f"--port must be between 1 and 65535, got {args.port}")
    published = Path(args.published).expanduser().resolve() if args.published else Warehouse().published_path()
    print(f"usl serve: reading {published} (the published copy, never the file Dagster writes)")
    launch(published, usl_home(), args.host, args.port, args.checkpoint)
    return 0

"""Project-wide subcommands: `usl status` (what is materialized, row counts) and `usl run` (the whole graph)."""

import argparse
import sys

import dagster as dg

from usl_assets.instance import open_instance
from usl_assets.launch import add_verbose_flag
from usl_assets.leaderboards.ranking import DEFAULT_METHOD
from usl_assets.pipeline import OPTIONAL_TAG, cpu_share
from usl_assets.recovery import recover_and_report
from usl_assets.resources import Warehouse
from usl_assets.settings import data_dir, usl_home
from usl_assets.slot_wait import add_wait_timeout_flag


def add_arguments(command: str, parser: argparse.ArgumentParser) -> None:
    """The arguments of `usl status` and `usl run`."""
    if command == "status":
        parser.set_defaults(handler=show_status)
        return
    run = parser
    run.add_argument("--neural-crm", action="store_true",
                     help="also train the LoRA CRMs (factorized, cross) and convert SmolLM2: slow on CPU")
    add_wait_timeout_flag(run)
    add_verbose_flag(run)
    run.set_defaults(handler=run_everything)


def warehouse_tables(warehouse: Warehouse) -> list[tuple[str, str, int]]:
    """(schema, table, rows) for every table in the warehouse, in schema order."""
    if not warehouse.database_path().exists():
        return []
    with warehouse.connect(read_only=True) as conn:
        names = conn.execute(
            "SELECT schema_name, table_name, estimated_size FROM duckdb_tables() ORDER BY schema_name, table_name"
        ).fetchall()
        return [(s, t, conn.execute(f'SELECT count(*) FROM "{s}"."{t}"').fetchone()[0]) for s, t, _ in names]


def materialization_status(instance: dg.DagsterInstance) -> list[tuple[str, str]]:
    """(asset key, last materialization time or 'never') for every asset of the code location."""
    from usl_assets.definitions import defs

    graph = defs.resolve_asset_graph()
    rows = []
    for key in sorted(graph.materializable_asset_keys, key=lambda k: k.to_user_string()):
        event = instance.get_latest_materialization_event(key)
        when = "never" if event is None else _format_time(event.timestamp)
        if event is None and OPTIONAL_TAG in (graph.get(key).tags or {}):
            when = "optional, not materialized (usl run --neural-crm)"
        partitions_def = graph.get(key).partitions_def
        if partitions_def is not None and event is not None:
            done = len(instance.get_materialized_partitions(key))
            total = len(partitions_def.get_partition_keys(dynamic_partitions_store=instance))
            when += f" ({done}/{total} model partitions)"
        rows.append((key.to_user_string(), when))
    return rows


def _format_time(timestamp: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(timestamp, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def show_status(args: argparse.Namespace) -> int:
    home = usl_home()
    # The published copy: the file Dagster writes is locked while a materialization runs.
    warehouse = Warehouse(path=str(Warehouse().published_path()))
    print(f"USL_HOME: {home}")
    print(f"warehouse (published copy): {warehouse.database_path()}"
          + ("" if warehouse.database_path().exists() else " (not yet)"))
    for line in table_lines(warehouse_tables(warehouse)):
        print(line)
    for line in pool_lines(warehouse):
        print(line)
    with open_instance() as instance:
        print(f"assets (Dagster instance {instance.root_directory}):")
        for key, when in materialization_status(instance):
            print(f"  {key:<42} {when}")
    return 0


def pool_lines(warehouse: Warehouse) -> list[str]:
    """The pools of the published copy (responses.pools) with their models; user pools registered since are listed
    as not yet published."""
    from usl_assets.responses.user_pools import registered_pools

    rows = []
    if warehouse.table_exists("responses.pools") and warehouse.table_exists("leaderboard.reference_models"):
        rows = warehouse.query(
            "SELECT p.pool, p.kind, p.prompts, any_value(m.reference_model), count(DISTINCT r.model) AS models "
            "FROM responses.pools p LEFT JOIN responses.responses r USING (pool) "
            "LEFT JOIN leaderboard.reference_models m USING (pool) GROUP BY ALL ORDER BY p.pool"
        ).itertuples(index=False)
    lines = [f"  {pool:<16} {kind:<6} {prompts:>6,} prompts {models:>4} models"
             + (f", reference {reference}" if reference else "") for pool, kind, prompts, reference, models in rows]
    published = {line.split()[0] for line in lines}
    lines += [f"  {name:<16} user   {record.prompts:>6,} prompts (not in the published copy yet)"
              for name, record in registered_pools(usl_home()).items() if name not in published]
    return ["pools:", *lines] if lines else []


def table_lines(tables: list[tuple[str, str, int]]) -> list[str]:
    """One aligned line per table: its qualified name padded to the longest, its row count right-aligned."""
    names = [f"{schema}.{table}" for schema, table, _ in tables]
    width = max(map(len, names), default=0)
    return [f"  {name:<{width}}  {rows:>11,} {'row' if rows == 1 else 'rows'}"
            for name, (_, _, rows) in zip(names, tables)]


SUMMARY_QUERIES = {
    "preferences (raw → valid + quarantined)": (
        "quality.quarantine",
        "SELECT v.source, v.valid, coalesce(q.quarantined, 0) AS quarantined FROM "
        "(SELECT source, count(*) AS valid FROM validated.preferences GROUP BY source) v LEFT JOIN "
        "(SELECT source, count(*) AS quarantined FROM quality.quarantine GROUP BY source) q USING (source) "
        "ORDER BY source",
    ),
    "CRM evaluation (accuracy)": (
        "crm.evaluation",
        "PIVOT (SELECT split, variant, round(accuracy, 3) AS accuracy FROM crm.evaluation) "
        "ON split USING first(accuracy) ORDER BY variant",
    ),
    f"default leaderboard, AlpacaEval (top 10, method {DEFAULT_METHOD})": (
        "leaderboard.rankings",
        "SELECT rank, model, round(score, 1) AS score, round(ci_low, 1) AS ci_low, round(ci_high, 1) AS ci_high, "
        "n_prompts FROM leaderboard.rankings WHERE pool = 'alpaca_eval' AND scenario = 'all' "
        f"AND profile = 'default' AND method = '{DEFAULT_METHOD}' ORDER BY score DESC LIMIT 10",
    ),
    "external validity (Spearman; mean_length is the baseline to beat)": (
        "leaderboard.external_validity",
        "PIVOT (SELECT pool, external_ranking, n_models, method, round(spearman, 3) AS spearman "
        "FROM leaderboard.external_validity WHERE n_models >= 3) ON method USING first(spearman) ORDER BY ALL",
    ),
    "gaming audit (probe models built from each pool's answers; leaderboard.gaming_audit)": (
        "leaderboard.gaming_audit",
        "SELECT pool, probe, derives_from, rank, n_ranked, round(score, 1) AS score, expectation, passed "
        "FROM leaderboard.gaming_audit ORDER BY pool, rank",
    ),
    "criteria fidelity (Spearman over models, held-out phrasings; leaderboard.criteria_fidelity)": (
        "leaderboard.criteria_fidelity",
        "SELECT pool, trained, family, count(*) AS phrasings, round(median(spearman), 3) AS median, "
        "round(min(spearman), 3) AS min, count(*) FILTER (WHERE spearman < 0.5) AS below_0_5, "
        "round(median(length_spearman), 3) AS length_alone_median, "
        "round(median(property_spearman), 3) AS perfect_reader_median, "
        "round(median(decisive_spearman), 3) AS decisive_reading_median, "
        "count(*) FILTER (WHERE decisive_spearman < 0.5) AS decisive_below_0_5 "
        "FROM leaderboard.criteria_fidelity GROUP BY ALL ORDER BY ALL",
    ),
}


def print_summary(warehouse: Warehouse) -> None:
    for title, (table, sql) in SUMMARY_QUERIES.items():
        if not warehouse.table_exists(table):
            continue
        print(f"\n{title}")
        print(warehouse.query(sql).to_string(index=False))


def run_everything(args: argparse.Namespace) -> int:
    from usl_assets.pipeline import run_graph

    warehouse = Warehouse()
    data_dir()  # a missing data folder is one line here, not a failed run
    with open_instance() as instance:
        recover_and_report(instance)
        try:
            phases = run_graph(instance, include_optional=args.neural_crm, verbose=getattr(args, "verbose", False),
                               wait_timeout_s=args.wait_timeout)
        except RuntimeError as failure:
            print(f"usl: error: {failure}", file=sys.stderr)
            return 1
    wall, cpu = sum(p.seconds for p in phases), sum(p.cpu_seconds for p in phases)
    print(f"\ndone in {wall:,.0f} s ({cpu_share(cpu, wall)}); Dagster home: {instance.root_directory}")
    print(f"warehouse (Dagster writes it): {warehouse.database_path()}")
    print(f"published copy for analysts:   {warehouse.published_path()}")
    print_summary(warehouse)
    print("\nmore: `usl status`, `make ui` (Dagster UI: the runs are under the location usl_assets), "
          "docs/leaderboards.md (queries)")
    return 0

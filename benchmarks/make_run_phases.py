"""Where `make run`'s time goes: each phase (Dagster run) of the last `usl run` and its slowest steps, with their
share of the wall time, read from the run history of the Dagster instance in DAGSTER_HOME.

    make run && DAGSTER_HOME=$PWD/.usl/dagster .venv/bin/python benchmarks/make_run_phases.py [--runs 3] [--top 12]

The figures are wall-clock seconds on this machine as it was during the run: quote them with the load.
"""

import argparse

import dagster as dg


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="how many of the latest runs make up the last usl run")
    parser.add_argument("--top", type=int, default=12, help="steps to list")
    args = parser.parse_args()
    with dg.DagsterInstance.get() as instance:
        records = instance.get_run_records(limit=args.runs)[::-1]  # oldest first
        if not records:
            raise SystemExit("no runs in this instance: run `make run` first")
        spans = [(r.dagster_run.run_id, r.start_time or 0.0, r.end_time or 0.0) for r in records]
        wall = max(end for _, _, end in spans) - min(start for _, start, _ in spans)
        print(f"{'phase (run)':<40} {'seconds':>8} {'share':>6}")
        for record, (run_id, start, end) in zip(records, spans):
            name = record.dagster_run.tags.get("usl/phase", record.dagster_run.job_name)
            print(f"{name[:30] + ' ' + run_id[:8]:<40} {end - start:>8.0f} {(end - start) / wall:>6.1%}")
        print(f"{'all phases (first start to last end)':<40} {wall:>8.0f} {1:>6.0%}\n")
        steps = []
        for run_id, _, _ in spans:
            for stat in instance.get_run_step_stats(run_id):
                if stat.start_time and stat.end_time:
                    steps.append((stat.end_time - stat.start_time, stat.step_key))
        print(f"{'slowest steps':<60} {'seconds':>8} {'share':>6}")
        for seconds, key in sorted(steps, reverse=True)[: args.top]:
            print(f"{key[:60]:<60} {seconds:>8.0f} {seconds / wall:>6.1%}")


if __name__ == "__main__":
    main()

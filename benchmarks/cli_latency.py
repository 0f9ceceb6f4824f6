"""How long `usl` takes as a person types it: wall time of real `usl` processes on a `make run` warehouse.

- `usl --help` and an argument error (`usl leaderboard --pool alpaca_eval --method nope`);
- `usl leaderboard --pool alpaca_eval --topic Code --criteria C --explain gpt-4o-2024-05-13`, each C a criterion
  never asked before (a request number keeps them apart), so its rewards are scored: the response rows come from
  the ad hoc cache, the criterion is embedded (NumPy MiniLM for the linear CRM) and multiplied in;
- the same with the criteria's cached rewards (the second ask), and a new criterion with no topic or --explain.
Prints the median and the worst of each, the `scoring` seconds the command reports, and the load average, which
the figures depend on: quote them with it.

    USL_HOME=.usl .venv/bin/python benchmarks/cli_latency.py [--repeats 5]
"""

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

USL = str(Path(sys.executable).with_name("usl"))
EXPLAINED_MODEL = "gpt-4o-2024-05-13"


def timed(argv: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run([USL, *argv], capture_output=True, text=True, timeout=600)
    return time.perf_counter() - started, done.stdout + done.stderr


def leaderboard(criterion: str) -> list[str]:
    return ["leaderboard", "--pool", "alpaca_eval", "--topic", "Code", "--criteria", criterion,
            "--explain", EXPLAINED_MODEL]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    stamp = int(time.time())
    rows = {"usl --help": [], "argument error": [], "new criterion (table only)": [],
            "new criterion (+ --topic Code --explain MODEL)": [], "the same criterion again": []}
    scoring = []
    timed(leaderboard(f"Warm-up criterion {stamp}."))  # the ad hoc cache copies the published responses once
    for i in range(args.repeats):
        rows["usl --help"].append(timed(["--help"])[0])
        rows["argument error"].append(timed(["leaderboard", "--pool", "alpaca_eval", "--method", "nope"])[0])
        rows["new criterion (table only)"].append(timed(["leaderboard", "--pool", "alpaca_eval", "--criteria",
                                                        f"Answers of at most {i + 2} sentences ({stamp})."])[0])
        criterion = f"Keep every answer under {40 + i} words ({stamp})."
        seconds, out = timed(leaderboard(criterion))
        rows["new criterion (+ --topic Code --explain MODEL)"].append(seconds)
        found = re.search(r"scoring ([0-9.]+) s", out)
        scoring.append(float(found.group(1)) if found else float("nan"))
        rows["the same criterion again"].append(timed(leaderboard(criterion))[0])
    print(f"load average before/after: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores")
    print(f"{'command':<50} {'median s':>9} {'worst s':>8}")
    for name, values in rows.items():
        values = sorted(values)
        print(f"{name:<50} {values[len(values) // 2]:>9.2f} {values[-1]:>8.2f}")
    scoring.sort()
    print(f"{'  of which scoring (as the command reports it)':<50} {scoring[len(scoring) // 2]:>9.2f} "
          f"{scoring[-1]:>8.2f}")


if __name__ == "__main__":
    main()

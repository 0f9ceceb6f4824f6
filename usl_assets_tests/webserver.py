"""`dagster dev -w workspace.yaml` as `make ui` starts it (webserver and daemon: a re-executed run is queued,
and the daemon launches it), on a free port, for the workspace and UI tests."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from usl_assets_tests.conftest import REPO_ROOT

LOCATION_QUERY = """{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus
    locationOrLoadError { __typename ... on PythonError { message } } } } } }"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def graphql(url: str, query: str) -> dict:
    request = urllib.request.Request(f"{url}/graphql", data=json.dumps({"query": query}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        body = json.loads(response.read())
    assert "errors" not in body, body["errors"]
    return body["data"]


def location_entry(url: str) -> dict | None:
    entries = graphql(url, LOCATION_QUERY)["workspaceOrError"]["locationEntries"]
    return next((entry for entry in entries if entry["name"] == "usl_assets"), None)


def stop_session(process: subprocess.Popen, timeout_s: float) -> None:
    """SIGTERM to a process started with start_new_session=True and its children; SIGKILL after timeout_s."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextmanager
def running_webserver(dagster_home: Path, env: dict, log_path: Path, timeout_s: float = 240):
    """Yields the base URL once the location has finished loading (LOADED or failed: the test looks)."""
    port = free_port()
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [str(Path(sys.executable).with_name("dagster")), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1",
             "-p", str(port)],
            cwd=REPO_ROOT, env={**os.environ, **env, "DAGSTER_HOME": str(dagster_home)}, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                assert process.poll() is None, f"the webserver exited: {log_path.read_text()[-2000:]}"
                assert time.monotonic() < deadline, f"no loaded location after {timeout_s} s"
                try:
                    entry = location_entry(url)
                    if entry and entry["loadStatus"] == "LOADED":
                        break
                except OSError:
                    pass
                time.sleep(1)
            yield url
        finally:
            # Its own session: dagster dev, its webserver, daemon and code servers stop together.
            stop_session(process, timeout_s=60)

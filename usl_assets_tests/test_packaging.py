"""The wheel is the product: built from a copy of the checkout (`pip wheel --no-deps .`), installed into a fresh
venv outside the checkout, it holds every module and data file and no tests, and from a folder outside the
checkout it finds every SQL model and criteria profile, loads its Definitions and runs `usl status`.

To stay offline and fast, the fresh venv reuses the dependencies of the venv running the tests: a .pth line adds
its site-packages (a folder added that way is not a site folder, so its own .pth files, e.g. the editable
install's finder, are not run) and the wheel is installed with --no-deps. docs/operations.md describes the full
check (`pip wheel .`, a venv with the dependencies, `usl run`)."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import yaml

from usl_assets_tests.conftest import REPO_ROOT

# Never copied into the build: caches, local state and earlier build outputs.
NOT_SOURCES = shutil.ignore_patterns(".git", ".venv", ".usl", "build", "dist", "*.egg-info", "__pycache__",
                                     ".pytest_cache", "*.pyc")

# Run by the fresh venv's interpreter: what it imported and found, as JSON on the last line of stdout.
PROBE = """
import json, sys
import dagster as dg
import usl_assets
from usl_assets.definitions import defs
from usl_assets.instance import EMBEDDED_INSTANCE_YAML
from usl_assets.leaderboards import sql_files
from usl_assets.scoring import profiles
from usl_assets import cli, warehouse_docs

named, rejected = profiles.named_profiles(profiles.read_profiles_file(profiles.DEFAULT_PROFILES_FILE))
dg.Definitions.validate_loadable(defs)
status = cli.main(["status"])
print(json.dumps({
    "usl_assets": usl_assets.__file__,
    "sql_dir": str(sql_files.sql_dir()),
    "sql_models": sorted(model.name for model in sql_files.load_models()),
    "assets": sorted(key.to_user_string() for key in defs.resolve_asset_graph().get_all_asset_keys()),
    "profiles_file": str(profiles.DEFAULT_PROFILES_FILE),
    "named_profiles": sorted(named["profile"]), "rejected_profiles": len(rejected),
    "described_tables": len(warehouse_docs.tables()),
    "instance_yaml": str(EMBEDDED_INSTANCE_YAML),
    "usl_modules": {name: m.__file__ for name, m in list(sys.modules.items())
                    if name.split(".")[0] in ("usl_assets", "usl_assets_tests") and getattr(m, "__file__", None)},
    "sys_path": sys.path,
    "status": status,
}))
"""


def run(command: list, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, command))} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def checkout_files(folder: str) -> set[str]:
    root = REPO_ROOT / folder
    return {path.relative_to(root).as_posix() for path in root.rglob("*")
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("source") / "usl"
    shutil.copytree(REPO_ROOT, source, ignore=NOT_SOURCES)
    out = tmp_path_factory.mktemp("wheel")
    # --no-build-isolation: the build backend (setuptools) of the running venv, no index needed.
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", ".", "-w", out],
        cwd=source, env={**os.environ, "PIP_CONSTRAINT": ""})
    (built,) = out.glob("usl-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> dict:
    """The probe's findings, run from a folder outside the checkout by a fresh venv holding only the wheel."""
    root = tmp_path_factory.mktemp("fresh")
    venv, elsewhere, home = root / "venv", root / "elsewhere", root / "usl_home"
    elsewhere.mkdir()
    run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    # Installed before the dependencies are visible, so pip sees no other `usl` distribution to replace.
    run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", wheel],
        env={**os.environ, "PIP_CONSTRAINT": ""})
    site = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    dependencies = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "usl_test_dependencies.pth").write_text("\n".join(sorted(dependencies)) + "\n")
    env = {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "DAGSTER_HOME")}
    done = run([python, "-c", PROBE], cwd=elsewhere, env={**env, "USL_HOME": str(home)}, timeout=900)
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "stdout": done.stdout, "site": site,
            "venv": venv, "home": home}


def test_the_wheel_ships_every_module_and_data_file_and_no_tests(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"usl_assets/{name}" for name in checkout_files("usl_assets")}
    expected |= {f"usl_assets/dbt_like_sql/{name}" for name in checkout_files("dbt_like_sql")}
    assert {name for name in expected if name.endswith(".sql")}, "the checkout has no SQL model"
    assert expected - names == set()
    assert not [name for name in names if name.startswith("usl_assets_tests")]
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    runtime = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert runtime and not [line for line in runtime if "pytest" in line or "playwright" in line]


def test_the_installed_package_runs_from_its_own_files(installed):
    venv = installed["venv"].resolve()
    assert Path(installed["usl_assets"]).resolve().is_relative_to(venv)
    assert "usl_assets.leaderboards.sql_models" in installed["usl_modules"]
    outside = {name: path for name, path in installed["usl_modules"].items()
               if not Path(path).resolve().is_relative_to(venv)}
    assert outside == {}  # nothing of USL imported from the checkout or an editable install
    assert str(REPO_ROOT) not in installed["sys_path"]
    assert Path(installed["sql_dir"]).resolve().is_relative_to(venv)
    assert Path(installed["profiles_file"]).resolve().is_relative_to(venv)
    assert Path(installed["instance_yaml"]).resolve().is_relative_to(venv)


def test_the_installed_package_finds_every_sql_model_and_profile(installed):
    checkout_models = sorted(path.stem for path in (REPO_ROOT / "dbt_like_sql").glob("*.sql"))
    assert installed["sql_models"] == checkout_models
    assert set(checkout_models) <= set(installed["assets"])
    profiles_yaml = yaml.safe_load((REPO_ROOT / "usl_assets" / "scoring" / "criteria_profiles.yaml").read_text())
    assert installed["named_profiles"] == sorted(entry["name"] for entry in profiles_yaml["profiles"])
    assert installed["rejected_profiles"] == 0
    assert installed["described_tables"] > 0


def test_usl_status_runs_from_the_wheel_on_the_embedded_instance(installed):
    assert installed["status"] == 0
    for model in installed["sql_models"]:
        assert f"  {model} " in installed["stdout"]  # listed among the assets, not yet materialized
    written = (installed["home"] / "dagster" / "dagster.yaml").read_text()
    assert written == (REPO_ROOT / "usl_assets" / "dagster.yaml").read_text()
    script = installed["venv"] / "bin" / "usl"
    assert script.read_text().splitlines()[0].startswith(f"#!{installed['venv']}")

"""The `usl` command's own behaviour: one clear line and a non-zero exit for what a user got wrong."""

import pytest
import yaml

from usl_assets.cli import COMMANDS, main


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("usl"), err
    return err[0]


def test_run_without_a_data_folder_says_what_to_set(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("USL_DATA_DIR", raising=False)
    monkeypatch.setenv("USL_HOME", str(tmp_path))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    assert main(["run"]) == 2
    assert "USL_DATA_DIR is not set" in _one_error_line(capsys)


def test_only_the_data_folder_set_gives_an_embedded_instance_under_usl_home(tmp_path, monkeypatch, capsys,
                                                                           shared_data_dir):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("USL_DATA_DIR", str(shared_data_dir))
    monkeypatch.delenv("USL_HOME", raising=False)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    assert main(["status"]) == 0
    home = tmp_path / ".usl" / "dagster"
    assert f"Dagster instance {home}" in capsys.readouterr().out
    written = yaml.safe_load((home / "dagster.yaml").read_text())
    assert written["nux"] == {"enabled": False} and written["concurrency"]["pools"]["default_limit"] == 1
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")  # a user's own file is kept
    assert main(["status"]) == 0
    assert (home / "dagster.yaml").read_text() == "telemetry:\n  enabled: false\n"


def test_a_dagster_home_that_is_a_file_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("USL_HOME", str(tmp_path))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "not-a-folder"))
    (tmp_path / "not-a-folder").write_text("")
    assert main(["status"]) == 2
    assert "is not a folder" in _one_error_line(capsys)


def test_unknown_subcommand_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["no-such-command"])
    assert exit_info.value.code == 2
    assert "invalid choice" in _one_error_line(capsys)


def test_status_on_an_empty_home(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("USL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert "(not yet)" in out and "validated_preferences" in out and "never" in out


def test_help_says_what_usl_is_in_whole_sentences(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    description = capsys.readouterr().out.split("\n\n")[1]
    assert description.startswith("The `usl` command") and description.rstrip().endswith(".")


def test_status_aligns_its_row_counts_and_says_row_for_one():
    from usl_assets.commands import table_lines

    lines = table_lines([("crm", "calibration", 1), ("leaderboard", "pairwise_comparisons", 2251242), ("raw", "x", 0)])
    assert lines[0].endswith(" 1 row") and lines[1].endswith(" 2,251,242 rows") and lines[2].endswith(" 0 rows")
    assert len({line.index(" row") for line in lines}) == 1  # the counts end in one column


def test_help_and_a_misspelt_command_load_no_heavy_library():
    """`usl --help` and an unknown command answer from cli.COMMANDS alone: no Dagster, pandas or torch import
    (they took seconds before the chosen command's module was imported lazily)."""
    import subprocess
    import sys

    probe = ("import sys\nfrom usl_assets.cli import main\n"
             "for argv in (['--help'], ['bogus']):\n"
             "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
             "print(sorted(m for m in ('dagster', 'pandas', 'torch', 'transformers', 'numpy') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_declares_its_arguments_and_a_handler(command, capsys):
    from usl_assets.cli import build_parser

    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.startswith(f"usage: usl {command}")
    subparsers = next(a for a in build_parser([command])._actions if a.dest == "command")
    assert callable(subparsers.choices[command].get_default("handler"))

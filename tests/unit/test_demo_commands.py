"""The demo's "look closer" commands work when pasted into a shell without the venv active (issue 15 item 9)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tidegate.demo.commands import tidegate_command


def venv(tmp_path: Path) -> Path:
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("tidegate", "activate", "python"):
        (bin_dir / name).write_text("")
    return bin_dir


def test_outside_an_active_venv_the_command_is_the_venv_s_script_with_an_activate_hint(tmp_path) -> None:
    bin_dir = venv(tmp_path)
    command, hint = tidegate_command(str(bin_dir / "python"), on_path=None, cwd=tmp_path)
    assert command == ".venv/bin/tidegate"
    assert hint == "or run 'source .venv/bin/activate' once to type plain 'tidegate'"


def test_plain_tidegate_when_it_is_this_installation_on_path(tmp_path) -> None:
    bin_dir = venv(tmp_path)
    assert tidegate_command(str(bin_dir / "python"), on_path=str(bin_dir / "tidegate"), cwd=tmp_path) == (
        "tidegate",
        None,
    )


def test_python_dash_m_without_a_console_script(tmp_path) -> None:
    assert tidegate_command(str(tmp_path / "python3"), on_path=None, cwd=tmp_path) == (
        f"{tmp_path}/python3 -m tidegate",
        None,
    )


def test_the_printed_command_runs_in_a_shell_whose_path_lacks_the_venv(tmp_path) -> None:
    command, _ = tidegate_command(sys.executable, on_path=None, cwd=tmp_path)
    done = subprocess.run(
        f"{command} runs --help",
        shell=True,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr

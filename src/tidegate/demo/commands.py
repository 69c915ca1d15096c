"""How to call `tidegate` so that a printed command works when pasted (issue 15 item 9).

The demo runs from `.venv/bin/tidegate` or `python -m tidegate` without the
virtual environment being active, so a bare `tidegate ...` would fail with
"command not found". The commands it prints start with what works from the
user's shell: `tidegate` when that is this installation on PATH, else the
console script beside this interpreter (relative to the working directory
when under it, as `.venv/bin/tidegate`), else `python -m tidegate`.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path


def tidegate_command(
    executable: str = sys.executable, on_path: str | None = None, cwd: Path | None = None
) -> tuple[str, str | None]:
    """(the command to start a pasted line with, a hint to activate the environment or None)."""
    script = Path(executable).parent / "tidegate"
    found = on_path if on_path is not None else shutil.which("tidegate")
    if found is not None and script.exists() and Path(found).resolve() == script.resolve():
        return "tidegate", None
    if not script.exists():
        return f"{shlex.quote(executable)} -m tidegate", None
    here = (cwd or Path.cwd()).resolve()
    try:
        shown = str(script.absolute().relative_to(here))
    except ValueError:
        shown = str(script.absolute())
    activate = script.parent / "activate"
    hint = None
    if activate.exists():
        relative = shown.rsplit("/", 1)[0] + "/activate" if "/" in shown else "activate"
        hint = f"or run 'source {shlex.quote(relative)}' once to type plain 'tidegate'"
    return shlex.quote(shown), hint

"""The HTTP service is an optional extra: `import tidegate` (and the CLI) never import FastAPI."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO_ROOT

SERVICE_MODULES = {"fastapi", "uvicorn", "starlette"}


def test_importing_tidegate_and_its_cli_leaves_fastapi_unimported() -> None:
    probe = "import sys, tidegate, tidegate.cli.main; print(' '.join(sys.modules))"
    finished = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert finished.returncode == 0, finished.stderr
    loaded = set(finished.stdout.split())
    assert "tidegate.cli.main" in loaded
    assert not loaded & SERVICE_MODULES

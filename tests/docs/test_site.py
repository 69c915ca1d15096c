"""The docs site builds with warnings as errors (a broken link, anchor or docstring fails), offline.

`mkdocs build --strict` from mkdocs.yml into a temporary folder; the reference pages are generated
by docs/hooks/reference.py during the build, so a new command or route must render too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.examples import REPO_ROOT

pytest.importorskip("mkdocs")
pytest.importorskip("mkdocstrings")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(target)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-6000:]}"
    return target


def test_the_site_builds_strict_with_every_reference_page(site: Path) -> None:
    for page in ("reference/cli", "reference/http", "reference/python", "settings", "reference/events"):
        assert (site / page / "index.html").is_file(), page
    assert (site / "reference" / "openapi.json").is_file()


def test_the_generated_references_name_every_command_and_route(site: Path) -> None:
    cli = (site / "reference" / "cli" / "index.html").read_text()
    for command in ("worker", "submit", "serve", "queue why", "limits set", "pools set", "db prune", "doctor"):
        assert f"<code>{command}</code>" in cli, command
    http = (site / "reference" / "http" / "index.html").read_text()
    for route in ("POST /api/v1/runs", "GET /api/v1/runs/{run_id}/why", "PUT /api/v1/pools/{name}"):
        assert f"<code>{route}</code>" in http, route
    python = (site / "reference" / "python" / "index.html").read_text()
    assert 'id="tidegate.App.task"' in python and 'id="tidegate.Context"' in python


def test_the_site_loads_nothing_from_the_web(site: Path) -> None:
    """No web font, script, stylesheet or image from another host: the site reads offline."""
    remote = re.compile(r"""<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=["']https?://[^"']*""")
    css_remote = re.compile(r"""url\(["']?https?://[^)]*|@import\s+["']https?://[^"']*""")
    loads = []
    for page in site.rglob("*.html"):
        loads += [f"{page.relative_to(site)}: {m.group()}" for m in remote.finditer(page.read_text())]
    for sheet in site.rglob("*.css"):
        loads += [f"{sheet.relative_to(site)}: {m.group()}" for m in css_remote.finditer(sheet.read_text())]
    assert not loads, "\n".join(loads[:20])

"""Every code example in README.md and docs/ runs, so none can rot (issue 28 item 1).

Each page's ```python blocks run in order in a fresh folder and process of their own, on
the embedded SQLite database there (tests/docs/examples.py: the marks for files, fragments
and blocks shown but not run).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.examples import PRELUDES, REPO_ROOT, pages, python_blocks

PAGES = [page for page in pages() if python_blocks(page)]
RUNNER = Path(__file__).with_name("run_page.py")


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(REPO_ROOT)) for page in PAGES])
def test_page_examples_run(page: Path, tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TIDEGATE_")}
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(page.relative_to(REPO_ROOT))],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"an example failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"


def test_every_python_block_is_a_script_or_marked() -> None:
    """A `>>>` session cannot run as a script; a fragment names a prelude; a skip gives its reason."""
    problems = []
    for page in pages():
        for block in python_blocks(page):
            if block.mark != "not-run" and ">>> " in block.code:
                problems.append(f"{block.where}: a >>> session: write it as a script or mark it not-run")
            if block.mark == "fragment" and block.value not in PRELUDES:
                problems.append(f"{block.where}: no prelude named {block.value!r}")
            if block.mark == "not-run" and not block.value:
                problems.append(f"{block.where}: not-run without a reason")
            if block.mark == "file" and not block.value.endswith(".py"):
                problems.append(f"{block.where}: file {block.value!r} is not a .py file")
    assert not problems, "\n".join(problems)


def test_the_readme_and_the_docs_have_examples() -> None:
    """The harness finds blocks at all (a broken fence pattern would pass every page vacuously)."""
    assert python_blocks(REPO_ROOT / "README.md")
    assert len(PAGES) >= 10

"""Run one page's ```python blocks in order, in the current folder (tests/docs/examples.py says how).

`python tests/docs/run_page.py PAGE`: exits non-zero at the first block that raises, naming
it as `PAGE:LINE` in the traceback. A subprocess per page, so pages share no modules or apps.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, os.getcwd())  # a page's files (tasks.py) import as top-level modules
from examples import PRELUDES, REPO_ROOT, Block, python_blocks


def run(block: Block) -> None:
    if block.mark == "not-run":
        return
    if block.mark == "file":
        Path(block.value).write_text(block.code)
        importlib.invalidate_caches()
        if Path(block.value).name.startswith("test_"):
            run_tests(block)
        else:
            importlib.import_module(Path(block.value).stem)
        return
    prelude = PRELUDES[block.value] if block.mark == "fragment" else ""
    namespace = {"__name__": "__main__"}
    exec(compile(prelude, f"<prelude {block.value}>", "exec"), namespace)
    exec(compile(block.code, block.where, "exec"), namespace)


def run_tests(block: Block) -> None:
    """A page's test file is run as its reader would run it: by pytest, with tidegate's plugin."""
    # kmock (a test dependency of tidegate's own, not a user's) brings a plugin that needs pytest-asyncio.
    plugins = ["-p", "no:cacheprovider", "-p", "no:kmock"]
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", *plugins, block.value])
    if done.returncode != 0:
        raise SystemExit(f"{block.where}: pytest {block.value} failed")


if __name__ == "__main__":
    for each in python_blocks(REPO_ROOT / sys.argv[1]):
        print(f"-- {each.where} ({each.mark or 'script'})", flush=True)
        run(each)

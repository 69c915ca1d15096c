"""The code blocks of README.md and docs/**/*.md, and how each is run by tests/docs/test_examples.py.

A ```python block runs as written, as a script (`__name__ == "__main__"`), in a folder of its
own page: a page's blocks run in order, so a later block may import what an earlier one wrote.
An HTML comment on the line just before a block says otherwise:

- `<!-- file: tasks.py -->`: the block is that file; it is written into the page's folder and
  imported (so it must import cleanly, and later blocks can `from tasks import ...`); a
  `test_*.py` file is run with pytest instead, as its reader would.
- `<!-- fragment: NAME -->`: the block is part of a program; PRELUDES[NAME] (below) runs before it.
- `<!-- not-run: REASON -->`: shown, not run (the reason is required: a console session, a
  cluster the tests cannot reach, ...).

Every other fenced block (console, text, yaml) is not Python and is not run here; a ```python
block with `>>>` prompts is refused: write the session as a script, or mark it not-run with a
reason. Two console sessions are replayed by their own tests: the HTTP walk-through
(test_http_walkthrough.py) and the first task's CLI session (test_cli_session.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
MARK = re.compile(r"<!--\s*(file|fragment|not-run):\s*(.*?)\s*-->")
FENCE = re.compile(r"^(\s*)(`{3,})(\w*)")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository
    line: int  # the fence's line, 1-based
    code: str
    mark: str | None  # "file", "fragment", "not-run" or None
    value: str  # the mark's argument

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]


def python_blocks(page: Path) -> list[Block]:
    """Every ```python block of `page` with the mark on the line before its fence (if any)."""
    lines = page.read_text().splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        opened = FENCE.match(lines[index])
        if not opened:
            index += 1
            continue
        indent, fence, language = opened.groups()
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        if language == "python":
            mark = MARK.search(lines[index - 1]) if index else None
            body = [line[len(indent) :] for line in lines[index + 1 : end]]
            blocks.append(
                Block(
                    page=str(page.relative_to(REPO_ROOT)),
                    line=index + 1,
                    code="\n".join(body) + "\n",
                    mark=mark.group(1) if mark else None,
                    value=mark.group(2) if mark else "",
                )
            )
        index = end + 1
    return blocks


# The hidden beginnings of fragments: what a reader of the page already has from the text around it.
PRELUDES = {
    # A page's tasks.py is in place: a block that uses `app` and the tasks without importing them.
    "tasks": "from tasks import *  # noqa: F403\nimport tidegate\n",
    # A bare app of the reader's own, for a block that declares limits, pools or tasks on it.
    "app": "import tidegate\nfrom tidegate import *  # noqa: F403\napp = tidegate.App()\n",
}

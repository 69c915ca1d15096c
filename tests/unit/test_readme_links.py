"""The README links only what a clone has (issue 15 item 10: it linked ../shared/DESIGN.md)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_relative_link_of_the_readme_is_a_file_of_the_repository() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "../" not in text, "the README points outside the repository"
    targets = [target for target in re.findall(r"\]\(([^)#\s]+)", text) if "://" not in target]
    assert targets, "no relative link found: the pattern is wrong"
    missing = [target for target in targets if not (ROOT / target).exists()]
    assert missing == []

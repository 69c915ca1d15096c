"""docs/settings.md, written from the one settings table (`domain.tunables.settings_table`).

Run `python -m tidegate.cli.settings_doc > docs/settings.md` after changing a setting; a test
fails while the file and the table differ, so the docs cannot drift from the code.
"""

from __future__ import annotations

from tidegate.domain.tunables import settings_table

HEADER = """# Settings

Every `TIDEGATE_*` environment variable tidegate reads. Durations are human strings (`250ms`, `30s`,
`5m`, `1h30m`, `2d`); sizes too (`512KiB`, `4MiB`). A worker (and `serve`) reads them all when it
starts and refuses a value out of its range with one line naming the variable and the range.

This file is generated from `tidegate.domain.tunables` by `python -m tidegate.cli.settings_doc`:
edit the table there, not here.

| variable | default | range | meaning |
| --- | --- | --- | --- |
"""


def settings_markdown() -> str:
    rows = [f"| `{row.name}` | {_cell(row.default)} | {row.range} | {row.meaning} |" for row in settings_table()]
    return HEADER + "\n".join(rows) + "\n"


def _cell(default: str) -> str:
    """A value is shown as code; a description of one (`unset`, `derived`) as words."""
    return default if default in {"unset", "derived", "set by tidegate"} else f"`{default}`"


if __name__ == "__main__":
    print(settings_markdown(), end="")

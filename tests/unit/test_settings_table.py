"""One settings table: every `TIDEGATE_*` variable in `domain.tunables`, docs/settings.md generated from it,
and every value checked when a worker starts (one line naming the variable and its range)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tidegate
from tidegate.app import settings
from tidegate.cli.settings_doc import settings_markdown
from tidegate.domain.errors import ConfigurationError
from tidegate.domain.tunables import settings_table

ROOT = Path(__file__).resolve().parents[2]
VARIABLE = re.compile(r"\bTIDEGATE_[A-Z0-9_]*[A-Z0-9]\b")


def test_docs_settings_is_generated_from_the_table() -> None:
    written = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert written == settings_markdown(), "run: python -m tidegate.cli.settings_doc > docs/settings.md"


def test_every_variable_the_code_names_is_in_the_table() -> None:
    named = {
        match.group(0)
        for path in (ROOT / "src" / "tidegate").rglob("*.py")
        for match in VARIABLE.finditer(path.read_text(encoding="utf-8"))
    }
    table = {row.name for row in settings_table()}
    assert named - table == set(), "add these to domain/tunables.py (with default, range and meaning)"
    assert all(row.meaning and row.range and row.default for row in settings_table())


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("TIDEGATE_STREAMS_MAX", "0", "TIDEGATE_STREAMS_MAX: '0' is not a whole number from 1 to 100000"),
        ("TIDEGATE_HEADER_TIMEOUT", "1h", "TIDEGATE_HEADER_TIMEOUT: '1h' is out of range: use 1s to 10m"),
        ("TIDEGATE_CLAIM_TIMEOUT", "soon", "TIDEGATE_CLAIM_TIMEOUT: cannot read 'soon' as a duration"),
        ("TIDEGATE_MAX_PAYLOAD", "1", "TIDEGATE_MAX_PAYLOAD: '1' is out of range: use 1 KiB to 128 MiB"),
        ("TIDEGATE_LOG_FORMAT", "xml", "TIDEGATE_LOG_FORMAT: 'xml' is not a log format: use text or json"),
    ],
)
def test_a_worker_refuses_a_bad_setting_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str, says: str
) -> None:
    """Even a setting only `serve` or a step reads stops a worker from starting, in one line."""
    app = tidegate.App(f"sqlite:///{tmp_path / 'settings.db'}")
    app.task(name="noop")(lambda: None)
    monkeypatch.setenv(name, value)
    try:
        with pytest.raises(ConfigurationError) as refused:
            app.worker()
    finally:
        app.close()
    message = str(refused.value)
    assert message.startswith(says), message
    assert "\n" not in message


def test_a_good_environment_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "TIDEGATE_STREAMS_MAX": "50",
        "TIDEGATE_HEADER_TIMEOUT": "5s",
        "TIDEGATE_MAX_PAYLOAD": "8MiB",
        "TIDEGATE_LOG_FORMAT": "JSON",
        "TIDEGATE_SWEEP_INTERVAL": "",
    }.items():
        monkeypatch.setenv(name, value)
    settings.check_environment()
    assert settings.log_format() == "json"

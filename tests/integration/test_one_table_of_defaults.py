"""A worker built directly and one built by `App.worker` get the same defaults (one table: `domain.tunables`)."""

from __future__ import annotations

import dataclasses
import os

import pytest

from tidegate import App, ClaimPolicy, WorkerSettings
from tidegate.app import settings


@pytest.fixture
def no_tunables_set(monkeypatch):
    for name in list(os.environ):
        if name.startswith("TIDEGATE_") and name != "TIDEGATE_DATABASE":
            monkeypatch.delenv(name)


def test_app_worker_defaults_equal_the_worker_settings_defaults(no_tunables_set, sqlite_url):
    with App(sqlite_url) as app:

        @app.task(name="defaults.noop", queue="defaults")
        def noop() -> None:
            return None

        built = app.worker().settings
    direct = WorkerSettings(queues=("defaults",))
    assert dataclasses.asdict(built) == dataclasses.asdict(direct)


def test_the_claim_policy_read_from_the_environment_defaults_to_the_guard_default(no_tunables_set):
    assert settings.claim_policy() == ClaimPolicy()

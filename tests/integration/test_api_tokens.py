"""What a token must be, and how many wrong ones a client may try.

A token no client can send (blank, spaces, beyond printable ASCII) is refused
wherever tokens are set; one that listens beyond loopback must have at least
24 characters. Past 10 wrong tokens within a minute from one address, that
address is answered 429 with Retry-After, its token not even checked, until
the oldest failure is a minute old; other addresses, and requests presenting
no token, are never slowed. The throttle reads the app's clock, which the
test moves: the window passes without waiting.
"""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from tidegate import App, ConfigurationError
from tidegate.api import Tokens, check_bind, create_api
from tidegate.api.throttle import MAX_ADDRESSES, MAX_FAILURES, WINDOW, FailureThrottle
from tidegate.domain.clock import ShiftedClock

FULL, READ = "f" * 24, "r" * 24
MAKE_ONE = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


@pytest.mark.parametrize("token", ["", " ", "a b", "\ttoken", "token\n", "tökén-with-accents"])
def test_a_token_no_client_can_send_is_refused(token: str, app: App, monkeypatch) -> None:
    with pytest.raises(ConfigurationError, match="TIDEGATE_API_READ_TOKEN is empty or has a character no client"):
        Tokens(full=FULL, read=token)
    if token:  # an empty variable is no token at all
        monkeypatch.setenv("TIDEGATE_API_TOKEN", token)
        with pytest.raises(ConfigurationError, match=re.escape(MAKE_ONE)):
            app.asgi()


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20"])
def test_a_wider_bind_needs_tokens_of_24_characters(host: str) -> None:
    with pytest.raises(ConfigurationError, match=r"1-character TIDEGATE_API_TOKEN: .* at least 24 \(make one with"):
        check_bind(host, Tokens(full="a"))
    with pytest.raises(ConfigurationError, match="23-character TIDEGATE_API_READ_TOKEN"):
        check_bind(host, Tokens(full=FULL, read="r" * 23))  # a weak read token reads everything
    check_bind(host, Tokens(full=FULL, read=READ))
    check_bind("127.0.0.1", Tokens(full="a"))  # on loopback the token guards only this machine's users


@pytest.fixture
def clients(app: App) -> tuple[TestClient, TestClient]:
    """Two clients of one API at two addresses (its throttle reads the app's clock)."""
    api = create_api(app, tokens=Tokens(full=FULL, read=READ))
    return (
        TestClient(api, base_url="http://127.0.0.1", client=("192.0.2.7", 50000)),
        TestClient(api, base_url="http://127.0.0.1", client=("192.0.2.8", 50000)),
    )


def _runs(client: TestClient, token: str | None) -> int:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return client.get("/api/v1/runs", headers=headers).status_code


def test_past_ten_wrong_tokens_an_address_waits_even_with_the_right_one(clients, clock: ShiftedClock) -> None:
    guesser, other = clients
    spacing = 5  # seconds between failures on the clock: far more than the real time a request takes
    for attempt in range(MAX_FAILURES):
        assert _runs(guesser, f"guess-{attempt}") == 401
        clock.advance(spacing)
    refused = guesser.get("/api/v1/runs", headers={"Authorization": f"Bearer {FULL}"})
    assert refused.status_code == 429 and refused.json()["error"] == "too_many_failures"
    rest = WINDOW - MAX_FAILURES * spacing  # when the oldest failure leaves the window
    assert 1 <= int(refused.headers["Retry-After"]) <= rest
    assert guesser.post("/api/v1/sweep", headers={"Authorization": f"Bearer {READ}"}).status_code == 429
    assert _runs(other, FULL) == 200 and _runs(other, READ) == 200  # another address is never slowed
    clock.advance(rest)
    assert _runs(guesser, FULL) == 200  # the oldest failure left the window: one more try is let through
    assert _runs(guesser, "guess-again") == 401
    assert _runs(guesser, FULL) == 429


def test_a_request_without_a_token_is_no_failure(clients) -> None:
    browser, _ = clients
    for _ in range(3 * MAX_FAILURES):
        assert _runs(browser, None) == 401
    assert _runs(browser, FULL) == 200


def test_wrong_sign_ins_are_throttled_and_the_page_says_when_to_retry(clients) -> None:
    browser, other = clients
    for attempt in range(MAX_FAILURES):
        assert browser.post("/login", data={"token": f"guess-{attempt}"}).status_code == 401
    refused = browser.post("/login", data={"token": FULL, "next": "/pools"}, follow_redirects=False)
    assert refused.status_code == 429 and "retry after" in refused.text and refused.headers["Retry-After"]
    assert "tidegate_token" not in refused.cookies
    assert other.post("/login", data={"token": FULL}, follow_redirects=False).status_code == 303


def test_the_throttle_remembers_a_bounded_number_of_addresses(clock: ShiftedClock) -> None:
    throttle = FailureThrottle(clock.monotonic)
    for _ in range(MAX_FAILURES):
        throttle.failed("first")
    assert throttle.wait("first") > 0
    for address in range(MAX_ADDRESSES):
        throttle.wait(f"asked-{address}")  # asking takes no memory
        throttle.failed(f"failed-{address}")
    assert throttle.wait("first") == 0  # forgotten: the least recent of more than MAX_ADDRESSES

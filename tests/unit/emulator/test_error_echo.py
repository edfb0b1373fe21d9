"""The emulator's ``echo_request_in_errors``: error bodies that repeat the request."""

from __future__ import annotations

import orjson
import pytest

from pipeline.emulator import error_bodies
from pipeline.emulator.config import ConfigError, EmulatorConfig, config_from_mapping

URL = "http://127.0.0.1:1/v1beta/models/m:generateContent"


def test_the_key_sent_in_a_header_is_echoed_in_the_url() -> None:
    body = error_bodies.internal().body()
    echoed = orjson.loads(error_bodies.echo_request(body, "POST", URL, "k-1", ""))
    assert echoed["error"]["message"] == (
        f"Internal error encountered. Request: POST {URL}?key=k-1"
    )
    assert echoed["error"]["code"] == 500 and echoed["error"]["status"] == "INTERNAL"


def test_a_key_already_in_the_query_and_a_token_are_echoed_as_sent() -> None:
    body = error_bodies.unavailable().body()
    echoed = error_bodies.echo_request(body, "POST", f"{URL}?key=k-2", "", "Bearer t-1")
    message = orjson.loads(echoed)["error"]["message"]
    assert message.endswith(f"Request: POST {URL}?key=k-2 Authorization: Bearer t-1")


def test_a_body_that_is_not_a_google_error_is_left_alone() -> None:
    assert error_bodies.echo_request(b"<html>", "GET", URL, "k", "") == b"<html>"


@pytest.mark.parametrize(("text", "value"), [("true", True), ("0", False), ("False", False)])
def test_the_switch_is_set_from_text(text: str, value: bool) -> None:
    config = config_from_mapping({"echo_request_in_errors": text}, source="--set")
    assert config.echo_request_in_errors is value
    assert EmulatorConfig().echo_request_in_errors is False


def test_a_switch_that_is_not_a_boolean_is_refused() -> None:
    with pytest.raises(ConfigError, match="echo_request_in_errors must be true or false"):
        config_from_mapping({"echo_request_in_errors": "maybe"}, source="--set")

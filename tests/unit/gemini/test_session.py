"""The shared pieces of every API client: a paged list followed to its end."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import orjson
import pytest

from pipeline.gemini.api_errors import ProtocolError
from pipeline.gemini.session import Exchange, listed

pytestmark = pytest.mark.anyio


def _page(document: object) -> Exchange:
    return Exchange(200, orjson.dumps(document), {})


async def test_a_list_is_followed_page_by_page_with_the_token_quoted() -> None:
    pages = {
        "": {"items": [1, 2], "nextPageToken": "a/b=+c"},
        "a/b=+c": {"items": [3], "nextPageToken": "last"},
        "last": {},  # a page may be empty and end the list
    }
    asked: list[str] = []

    async def get(url: str) -> Exchange:
        asked.append(url)
        query = parse_qs(urlsplit(url).query)
        assert query["pageSize"] == ["2"]
        return _page(pages[query.get("pageToken", [""])[0]])

    items = [item async for item in listed(get, "https://x.example/v1/things?pageSize=2", "items")]
    assert items == [1, 2, 3]
    assert asked[1].endswith("&pageToken=a%2Fb%3D%2Bc")
    assert len(asked) == 3


async def test_a_page_that_is_not_json_is_a_protocol_error() -> None:
    async def get(url: str) -> Exchange:
        return Exchange(200, b"<html>", {})

    with pytest.raises(ProtocolError):
        [item async for item in listed(get, "https://x.example/v1/things?pageSize=2", "items")]

"""A stand-in for the Hub API: huggingface_hub's HTTP client with a transport that answers from
tests/fixtures/hub/ (see the README there). Nothing leaves the process.

    with fake_hub.serving() as hub:
        manifest_from_hub(tiny_repo.REPO, tiny_repo.REVISION)
        hub.requests  # what huggingface_hub sent
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx2
import tiny_repo
from huggingface_hub import set_client_factory
from huggingface_hub.utils._http import default_client_factory

MODEL_PATH = f"/api/models/{tiny_repo.REPO}/revision/"


@dataclass
class FakeHub:
    """Serves the recorded answers; `model_info` (the JSON body) can be edited per test."""

    model_info: dict[str, Any] = field(
        default_factory=lambda: json.loads(tiny_repo.MODEL_INFO.read_text())
    )
    gated: bool = False
    fail_with: Exception | None = None
    requests: list[httpx2.Request] = field(default_factory=list)

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        if self.fail_with is not None:
            raise self.fail_with
        path = request.url.path
        if not path.startswith(MODEL_PATH):
            return _recorded("repo_not_found.json")
        if self.gated:
            return _recorded("gated_repo.json", repo=tiny_repo.REPO)
        revision = path.removeprefix(MODEL_PATH)
        if revision not in (tiny_repo.REVISION, "main"):
            return _recorded("revision_not_found.json", revision=revision)
        return httpx2.Response(200, json=self.model_info)


@contextmanager
def serving() -> Iterator[FakeHub]:
    hub = FakeHub()
    set_client_factory(lambda: httpx2.Client(transport=httpx2.MockTransport(hub.handle)))
    try:
        yield hub
    finally:
        set_client_factory(default_client_factory)


def _recorded(name: str, **fill: str) -> httpx2.Response:
    text = (tiny_repo.FIXTURES / name).read_text()
    for key, value in fill.items():
        text = text.replace("{" + key + "}", value)
    answer = json.loads(text)
    return httpx2.Response(answer["status"], headers=answer["headers"], json=answer["body"])

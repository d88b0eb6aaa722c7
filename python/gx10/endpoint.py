"""The endpoint of an OpenAI-compatible server, as the user gives it: one normalisation for every
command (`gx10 smoke`, `gx10 bench`), so `http://host:8000`, `http://host:8000/`, and
`http://host:8000/v1/` all name the same server."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from gx10.errors import Gx10Error

EXPECTED = "http://HOST:PORT or http://HOST:PORT/v1 (https too)"


class EndpointError(Gx10Error):
    """The endpoint URL is not of the form the commands expect."""


@dataclass(frozen=True, slots=True)
class EndpointUrl:
    root: str  # scheme://host[:port], the server's own routes (/tokenize, /metrics, /health)

    @property
    def v1(self) -> str:
        """The OpenAI API base (what the openai client takes as base_url)."""
        return f"{self.root}/v1"


def parse_endpoint(url: str, option: str = "--endpoint") -> EndpointUrl:
    """Normalise `url` (with or without /v1, with or without a trailing slash)."""
    text = url.strip()
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        raise EndpointError(f"{option} {url!r}: {exc}; expected {EXPECTED}") from exc
    path = parts.path.rstrip("/")
    path = path.removesuffix("/v1")
    problems = []
    if parts.scheme not in ("http", "https"):
        problems.append("the scheme must be http or https")
    if not parts.hostname:
        problems.append("no host")
    if path or parts.query or parts.fragment:
        problems.append(f"unexpected path {parts.path!r}" if path else "unexpected query")
    if problems:
        raise EndpointError(f"{option} {url!r}: {', '.join(problems)}; expected {EXPECTED}")
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return EndpointUrl(f"{parts.scheme}://{netloc}")

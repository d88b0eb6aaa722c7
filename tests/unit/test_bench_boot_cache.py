"""bench/boot_cache.py reads a head's boot from its log: how long, and what it did with the
compile caches (the GPU build and the simulator load them; the lab's CPU engine cannot)."""

from __future__ import annotations

from typing import Any

import pytest
from bench_scripts import load_bench

boot_cache = load_bench("boot_cache")

START = "2026-12-07T05:00:30.000000000Z (APIServer pid=1) INFO non-default args: {}"
READY = "2026-12-07T05:01:42.500000000Z INFO:     Application startup complete."


@pytest.mark.parametrize(
    ("line", "cache"),
    [
        (
            "2026-12-07T05:00:50.0Z (Worker) INFO Directly load the compiled graph(s) for "
            "compile range (1, 8192) from the cache",
            "loaded",
        ),
        (
            "2026-12-07T05:01:01.0Z (Worker_TP0) WARNING [backbone] Compiling model again due "
            "to a load failure from /gx10-cache/vllm/torch_compile_cache/x, reason: 'function' "
            "object has no attribute 'finalize_loading'",
            "load failed",
        ),
        ("2026-12-07T05:01:12.0Z (Worker_TP0) INFO saved AOT compiled function to /x", "compiled"),
    ],
)
def test_a_boot_is_timed_from_its_log_and_its_cache_use_named(
    monkeypatch: pytest.MonkeyPatch, line: str, cache: str
) -> None:
    def ad_hoc(*args: Any) -> dict[str, dict[str, object]]:
        return {"gx10-a": {"stdout": "\n".join([START, line, READY])}}

    monkeypatch.setattr(boot_cache, "ad_hoc", ad_hoc)
    seconds, found = boot_cache.head_boot_seconds("inventories/lab-vllm", "gx10-vllm")
    assert seconds == pytest.approx(72.5)
    assert found == cache


def test_the_ready_line_is_found_on_either_stream_in_time_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM's uvicorn writes `Application startup complete.` to stderr (docker logs keeps the
    streams apart); the simulator writes everything to stdout."""

    def ad_hoc(*args: Any) -> dict[str, dict[str, object]]:
        progress = "Loading safetensors checkpoint shards: 100% Completed | 1/1"
        return {"gx10-a": {"stdout": START, "stderr": f"{READY}\r{progress}"}}

    monkeypatch.setattr(boot_cache, "ad_hoc", ad_hoc)
    seconds, found = boot_cache.head_boot_seconds("inventories/lab-vllm", "gx10-vllm")
    assert (seconds, found) == (pytest.approx(72.5), "compiled")


def test_a_log_without_the_ready_line_stops_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(boot_cache, "ad_hoc", lambda *a: {"gx10-a": {"stdout": START}})
    with pytest.raises(SystemExit, match="no ready line"):
        boot_cache.head_boot_seconds("inventories/lab", "gx10-vllm")

"""The serving stages on the lab: ordered launch, restart semantics, failures, the smoke test.

site.yml's model stage puts the lab's synthetic checkpoint, verified, on both nodes; the serve
stage refuses a node whose copy does not verify.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from labtools import LAB_INVENTORY, node_sh

from gx10 import ProvisionResult, provision
from gx10.lab import images

CONTAINER = "gx10-vllm"
# The engine's own /metrics, from the head itself: behind the gateway it listens on loopback at
# gx10_gateway_engine_port (8001); the gateway's port wants a key for /metrics.
ENGINE_METRICS = "http://127.0.0.1:8001/metrics"
MODEL_DIR = "/srv/models/DeepSeek-V4-Flash-0731"


def _container_id(node: str) -> str:
    return node_sh(node, f"docker ps -q --no-trunc --filter name=^{CONTAINER}$").strip()


def _serve(**extravars: object) -> ProvisionResult:
    return provision(LAB_INVENTORY, "serve.yml", extravars=extravars or None)


@pytest.fixture(scope="module")
def served(serving_lab: ProvisionResult) -> ProvisionResult:
    """The session's shared converge: site.yml's serve stage launched the pair."""
    return serving_lab


def test_both_ranks_run_and_the_head_serves(served: ProvisionResult) -> None:
    head = node_sh("gx10-a", f"docker inspect -f '{{{{json .Config.Labels}}}}' {CONTAINER}")
    assert '"gx10.rank":"0"' in head
    assert '"gx10.role":"head"' in head
    worker = node_sh("gx10-b", f"docker inspect -f '{{{{json .Config.Labels}}}}' {CONTAINER}")
    assert '"gx10.rank":"1"' in worker
    args = node_sh("gx10-b", f"docker inspect -f '{{{{json .Args}}}}' {CONTAINER}")
    assert '"--headless"' in args
    assert '"--master-addr","192.168.100.10"' in args
    # The JSON flag arrived as one argument, unmangled.
    assert '{\\"draft_sample_method\\":\\"probabilistic\\"' in args


CACHE_ROOT = "/var/cache/gx10/vllm"


def test_a_dead_rank_restarts_both_ranks_and_they_boot_warm(served: ProvisionResult) -> None:
    """Each rank compiled into its node's cache for this image's digest; after the worker's
    crash both ranks restart (a headless worker cannot rejoin the old head, nor a new one the old
    worker), and load the graphs instead of compiling again. The restart shows each rank's log
    lines while it waits (the lab reports progress every 2 s and the simulator boots in 3 s), in
    ansible-playbook's own output, the head's naming its boot phase."""
    image = node_sh("gx10-a", f"docker inspect -f '{{{{.Config.Image}}}}' {CONTAINER}").strip()
    key = "sha256-" + image.rsplit("@sha256:", 1)[1][:16]
    for node, rank in (("gx10-a", 0), ("gx10-b", 1)):
        listing = node_sh(node, f"ls {CACHE_ROOT}; ls {CACHE_ROOT}/{key}")
        assert key in listing.split(), listing
        assert {"vllm", "triton", "flashinfer", "tilelang", "deepgemm"} <= set(listing.split())
        graphs = node_sh(node, f"find {CACHE_ROOT}/{key}/vllm -name computation_graph.py")
        assert f"/rank_{rank}_0/backbone/computation_graph.py" in graphs, graphs
        env = node_sh(node, f"docker exec {CONTAINER} printenv VLLM_CACHE_ROOT TRITON_CACHE_DIR")
        assert env.split() == ["/gx10-cache/vllm", "/gx10-cache/triton"]
    head_before = _container_id("gx10-a")
    worker_before = _container_id("gx10-b")
    node_sh("gx10-b", f"docker kill {CONTAINER} >/dev/null")
    result = _serve()
    assert result.ok, result.failed_tasks
    assert _container_id("gx10-a") not in ("", head_before)
    assert _container_id("gx10-b") not in ("", worker_before)
    for node in ("gx10-a", "gx10-b"):
        log = node_sh(node, f"docker logs {CONTAINER} 2>&1")
        assert "Directly load the compiled graph(s)" in log, log[-2000:]
        assert "Compiling a graph" not in log
    stdout = (result.artifact_dir / "stdout").read_text()
    assert "last log lines:" in stdout
    # The head's progress names its boot phase (read from its log).
    assert re.search(rf"\[gx10-a\] {CONTAINER}: not ready after \d+ of \d+ s \(phase \w+", stdout)


def _messages(result: ProvisionResult) -> str:
    return " ".join(t.message for t in result.failed_tasks)


# The lab's simulator settings (GX10_SIM_*), which a test extends: a test's vllm_serve_extra_env
# replaces the inventory's whole dict.
LAB_ENV: dict[str, str] = yaml.safe_load(
    (LAB_INVENTORY / "group_vars" / "all.yml").read_text(encoding="utf-8")
)["vllm_serve_extra_env"]
PHASES = {"start": 900, "weights": 1800, "compile": 3600, "graph_capture": 1800, "api": 600}


def test_every_missing_input_is_named_before_any_restart(served: ProvisionResult) -> None:
    """One serve run with two missing inputs, each on its own node: the worker's NCCL
    environment file gone, a shard of the head's copy changed. The serve inputs check names each,
    with its node and its fix, and no rank restarts; the model stage then refetches the shard
    under the running pair and restarts nothing. (Bad values in the inventory, such as the boot
    phases' timeouts, stop the run in the validate stage: tests/unit/test_validate_refusals.py.)"""
    before = {n: _container_id(n) for n in ("gx10-a", "gx10-b")}
    shard = f"{MODEL_DIR}/model-00003-of-00048.safetensors"
    node_sh("gx10-a", f"printf 'X' | dd of={shard} bs=1 seek=10 conv=notrunc 2>/dev/null")
    node_sh("gx10-b", "mv /etc/gx10/nccl.env /etc/gx10/nccl.env.moved")
    try:
        result = _serve()
    finally:
        node_sh("gx10-b", "mv /etc/gx10/nccl.env.moved /etc/gx10/nccl.env")
    try:
        assert not result.ok
        failed = {t.host: t.message for t in result.failed_tasks}
        assert set(failed) == {"gx10-a", "gx10-b"}, failed
        assert "/etc/gx10/nccl.env missing" in failed["gx10-b"]
        assert "run the nccl stage first" in failed["gx10-b"]
        assert "nccl.env" not in failed["gx10-a"]
        assert "model-00003-of-00048.safetensors" in failed["gx10-a"]
        assert "run the model stage" in failed["gx10-a"]
        assert "model-00003-of-00048.safetensors" not in failed["gx10-b"]
        assert {n: _container_id(n) for n in ("gx10-a", "gx10-b")} == before
    finally:
        repaired = provision(LAB_INVENTORY, "site.yml", tags=["model"])
        assert repaired.ok, repaired.failed_tasks
    # The model stage refetched the shard under the running pair and restarted nothing (the
    # file's lab check verifies every copy, and what each rank sees, at its end).
    assert repaired.changed_total > 0
    assert {n: _container_id(n) for n in ("gx10-a", "gx10-b")} == before


def test_a_pinned_digest_the_registry_lacks_changes_nothing(served: ProvisionResult) -> None:
    before = {n: _container_id(n) for n in ("gx10-a", "gx10-b")}
    wrong = "sha256:" + "0" * 64
    result = _serve(vllm_image_digest=wrong)
    assert not result.ok
    assert wrong in _messages(result)
    assert {n: _container_id(n) for n in ("gx10-a", "gx10-b")} == before


# Runtime fixes (vllm_serve_overlay): the simulator's chat encoding stands in for the image's
# vllm/tokenizers/deepseek_v4_encoding.py; the image carries the repository's file as it is.
ENCODING = f"{images.SIM_LIB}/vllm_sim/deepseek_v4_encoding.py"
ENCODING_BASE = hashlib.sha256(
    (images.VLLM_SIM_PACKAGE / "deepseek_v4_encoding.py").read_bytes()
).hexdigest()
OVERLAY_DIR = "/var/lib/gx10/vllm-overlay"


def _overlay(tmp_path: Path, base: str) -> tuple[list[dict[str, str]], str]:
    """The lab's encoding plus one line, as a reviewed replacement of the image's file."""
    fix = tmp_path / "deepseek_v4_encoding.py"
    fix.write_bytes(
        (images.VLLM_SIM_PACKAGE / "deepseek_v4_encoding.py").read_bytes()
        + b"# gx10 e2e: a runtime fix\n"
    )
    fixed = hashlib.sha256(fix.read_bytes()).hexdigest()
    entry = {"path": ENCODING, "source": str(fix), "base_sha256": base, "sha256": fixed,
             "why": "test equipment (tests/e2e/test_serve.py)"}  # fmt: skip
    return [entry], fixed


def test_an_overlay_for_another_image_is_refused_before_any_rank_changes(
    served: ProvisionResult, tmp_path: Path
) -> None:
    before = {n: _container_id(n) for n in ("gx10-a", "gx10-b")}
    image = node_sh("gx10-a", f"docker inspect -f '{{{{.Config.Image}}}}' {CONTAINER}").strip()
    overlay, _ = _overlay(tmp_path, base="0" * 64)
    result = _serve(vllm_serve_overlay=overlay)
    assert not result.ok
    failed = {t.host: t.message for t in result.failed_tasks}
    assert set(failed) == {"gx10-a", "gx10-b"}, failed  # refused on every node
    for node, message in failed.items():
        assert f"{node}: the image {image} has {ENCODING} with sha256 {ENCODING_BASE}" in message
        assert f"reviewed against base_sha256 {'0' * 64}" in message
        assert "review the overlay for this image" in message
    assert {n: _container_id(n) for n in ("gx10-a", "gx10-b")} == before
    for node in ("gx10-a", "gx10-b"):
        assert not node_sh(node, f"ls {OVERLAY_DIR} 2>/dev/null || true").strip()


# The overlay, the stop and the failing launches, back to back, last in the file: each leaves the
# pair changed or down, the next needs no serving pair of the lab's own settings, and `left_down`
# launches the pair once after the last of them, with the lab's own settings (and checks what the
# overlay left behind is gone).
@pytest.fixture(scope="module")
def left_down(served: ProvisionResult) -> Iterator[None]:
    yield
    again = _serve()
    assert again.ok, again.failed_tasks
    assert _container_id("gx10-a")
    assert _container_id("gx10-b")
    # The pair runs the image's own encoding again. The overlay's replacement files went with the
    # first launch after the overlaid pair was stopped (a rank mounting none of them).
    assert f'encoding_sha256="{ENCODING_BASE}"' in node_sh("gx10-a", f"curl -sf {ENGINE_METRICS}")
    for node in ("gx10-a", "gx10-b"):
        assert not node_sh(node, f"ls {OVERLAY_DIR}").strip(), node


def test_an_overlay_is_applied_and_verified_in_every_rank(left_down: None, tmp_path: Path) -> None:
    """The first of the batch: the pair restarts with the replacement file mounted in every rank,
    and a re-apply with the same overlay changes nothing. The stop after it leaves no rank
    mounting the file; `left_down` checks that the launches after it removed it."""
    overlay, fixed = _overlay(tmp_path, base=ENCODING_BASE)
    result = _serve(vllm_serve_overlay=overlay)
    assert result.ok, result.failed_tasks
    for node in ("gx10-a", "gx10-b"):
        seen = node_sh(node, f"docker exec {CONTAINER} sha256sum {ENCODING}").split()[0]
        assert seen == fixed
        log = node_sh(node, f"docker logs {CONTAINER} 2>&1")
        assert f"DeepSeek V4 encoding {ENCODING} (sha256 {fixed})" in log, log[-2000:]
    metrics = node_sh("gx10-a", f"curl -sf {ENGINE_METRICS}")
    assert f'encoding_sha256="{fixed}"' in metrics
    again = _serve(vllm_serve_overlay=overlay)
    assert again.ok, again.failed_tasks
    assert again.changed_total == 0
    assert node_sh("gx10-a", f"ls {OVERLAY_DIR}").strip()


def test_stop_takes_the_head_then_the_workers_down_by_name(left_down: None) -> None:
    """The overlaid pair serves; stop.yml takes it down for the failing launches after it."""
    assert _container_id("gx10-a")
    assert _container_id("gx10-b")
    # An unrelated container on the head must survive: stop.yml never matches by pattern.
    node_sh(
        "gx10-a",
        "docker run -d --name gx10-vllm-scratch --entrypoint sleep "
        "$(docker inspect -f '{{.Config.Image}}' gx10-vllm) 300 >/dev/null",
    )
    try:
        stopped = provision(LAB_INVENTORY, "stop.yml")
        assert stopped.ok, stopped.failed_tasks
        # The head: its gateway first (clients get a refused connection), then its rank.
        assert stopped.hosts["gx10-a"].changed == 2
        assert stopped.hosts["gx10-b"].changed == 1
        assert node_sh("gx10-a", "systemctl is-active gx10-gateway || true").strip() != "active"
        assert not _container_id("gx10-a")
        assert not _container_id("gx10-b")
        assert node_sh("gx10-a", "docker ps -q --filter name=^gx10-vllm-scratch$").strip()
        again = provision(LAB_INVENTORY, "stop.yml")
        assert again.ok
        assert again.changed_total == 0
    finally:
        node_sh("gx10-a", "docker rm -f gx10-vllm-scratch >/dev/null", check=False)


def test_a_hung_boot_phase_fails_at_its_own_limit_naming_it(left_down: None) -> None:
    """The head's compile never ends: the launch fails when that phase passes its limit (6 s),
    long before the whole wait's bound, names the phase and its variable, and stops the workers."""
    result = _serve(
        vllm_serve_extra_env={**LAB_ENV, "GX10_SIM_HANG_PHASE": "compile"},
        vllm_serve_phase_timeouts={**PHASES, "compile": 6},
    )
    assert not result.ok
    message = _messages(result)
    assert re.search(
        r"stuck in phase compile for \d+ s \(its limit is 6 s\): "
        r"vllm_serve_phase_timeouts\.compile",
        message,
    ), message
    assert "the workers were stopped too" in message
    assert not _container_id("gx10-b")


def test_a_context_the_nodes_cannot_hold_fails_with_vllms_message(left_down: None) -> None:
    """Nodes modelled with 16 GiB (the simulator's GX10_SIM_MEM_TOTAL_GIB, which the product's own
    checks do not see: they plan the inventory's 24 GiB and judge the host's MemTotal, and both
    hold the profile): vLLM's share, 0.835 x 16 GiB, less the weights and the runtime leaves
    10.52 GiB of KV cache, and one request of the role's 1,048,576 tokens needs 16.8 GiB (the lab
    checkpoint's 43 layers x 400 B at nvfp4_ds_mla). The head's engine refuses after its profile
    run as vLLM does; the wait fails with vLLM's message from the head's log, the workers are
    stopped, and the lab's own settings bring the pair back."""
    result = _serve(vllm_serve_extra_env={**LAB_ENV, "GX10_SIM_MEM_TOTAL_GIB": "16"})
    assert not result.ok
    message = _messages(result)
    # The estimate moves a block with the sampler's share (656384 at 12 sequences, 656640 at 6).
    assert re.search(
        re.escape(
            "ValueError: To serve at least one request with the models's max seq len (1048576), "
            "(16.8 GiB KV cache is needed, which is larger than the available KV cache memory "
            "(10.52 GiB). Based on the available memory, the estimated maximum model length is "
        )
        + r"65\d{4}\. "
        + re.escape("Try increasing `gpu_memory_utilization` or decreasing `max_model_len`"),
        message,
    ), message
    assert "Engine core initialization failed. See root cause above." in message
    assert "the workers were stopped too" in message
    assert not _container_id("gx10-b")


def test_master_port_in_use_fails_clearly_and_stops_the_workers(left_down: None) -> None:
    """Something else holds the head's master port: the head fails as torch does, the workers
    are stopped (a headless worker cannot rejoin a later head), and freeing it recovers."""
    node_sh("gx10-a", f"docker rm -f {CONTAINER} >/dev/null")
    squatter = node_sh(
        "gx10-a",
        "nohup python3 -c 'import socket, time; s = socket.socket(); "
        's.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 29500)); '
        "s.listen(); time.sleep(300)' >/dev/null 2>&1 & echo $!",
    ).strip()
    try:
        result = _serve()
        assert not result.ok
        message = _messages(result)
        assert "port: 29500" in message, message
        assert "EADDRINUSE" in message
        assert "the workers were stopped too" in message
        assert not _container_id("gx10-a")
        assert not _container_id("gx10-b")
    finally:
        node_sh("gx10-a", f"kill {squatter}", check=False)


def test_a_head_without_its_worker_times_out_clearly(left_down: None) -> None:
    """Only the head is launched (the worker is left out with --limit): it must give up after
    the rendezvous timeout with torch's message naming the missing rank, not hang."""
    short = {
        "GX10_SIM_SYSFS_ROOT": "/run/gx10-sim/sys",
        "GX10_SIM_BOOT_SECONDS": "3",
        "GX10_SIM_RENDEZVOUS_TIMEOUT": "8",
    }
    node_sh("gx10-b", f"docker rm -f {CONTAINER} >/dev/null")
    node_sh("gx10-a", f"docker rm -f {CONTAINER} >/dev/null")
    # provision() adds localhost, where the validate play runs.
    result = provision(
        LAB_INVENTORY,
        "serve.yml",
        limit="gx10-a",
        extravars={"vllm_serve_extra_env": short},
    )
    assert not result.ok
    message = _messages(result)
    assert "Timed out after 9 seconds waiting for clients" in message, message
    assert "Missing node rank(s): 1" in message
    assert not _container_id("gx10-a")

"""The metrics exporter after converge: Debian's node exporter with the role's flags, the GPU
writer's service, what node exporter serves (the simulated GB10's gx10_gpu_* and the node's
memory), reachable from the peer over the management network, and no stale file once the writer
stops."""

from __future__ import annotations

import re
import time

PROM_FILE = "/var/lib/prometheus/node-exporter/gx10_gpu.prom"


def served(node, host: str = "127.0.0.1") -> str:
    return node.check_output(f"curl -fsS --max-time 10 http://{host}:9100/metrics")


def test_flags_and_services(nodes) -> None:
    for node in nodes:
        flags = node.file("/etc/default/prometheus-node-exporter")
        assert (flags.user, flags.mode) == ("root", 0o644)
        assert (
            'ARGS="--web.listen-address=:9100 '
            '--collector.textfile.directory=/var/lib/prometheus/node-exporter"'
        ) in flags.content_string
        tool = node.file("/usr/local/sbin/gx10-gpu-metrics")
        assert (tool.user, tool.mode) == ("root", 0o755)
        for service in ("prometheus-node-exporter", "gx10-gpu-metrics"):
            assert node.service(service).is_enabled, service
            assert node.service(service).is_running, service
        assert node.file(PROM_FILE).mode == 0o644


def test_node_exporter_serves_the_gpu_and_the_memory(nodes) -> None:
    for node in nodes:
        text = served(node)
        assert re.search(r"(?m)^gx10_gpu_query_success 1$", text)
        assert re.search(r'(?m)^gx10_gpu_sm_clock_max_hertz\{gpu="0"\} 3\.003e\+09$', text), text
        assert re.search(r'(?m)^gx10_gpu_info\{.*name="NVIDIA GB10"', text)
        assert re.search(r"(?m)^node_memory_MemAvailable_bytes \d", text)
        assert re.search(r"(?m)^node_textfile_scrape_error 0$", text)


def test_the_peer_reaches_it_over_the_management_network(head, workers) -> None:
    for worker in workers:
        assert "gx10_gpu_query_success 1" in served(worker, "gx10-a")
        assert "gx10_gpu_query_success 1" in served(head, worker.backend.host)


def test_a_stopped_writer_leaves_no_file_and_comes_back(nodes) -> None:
    node = nodes[-1]
    node.check_output("systemctl stop gx10-gpu-metrics.service")
    try:
        assert not node.file(PROM_FILE).exists
        assert "gx10_gpu_" not in served(node)
    finally:
        node.check_output("systemctl start gx10-gpu-metrics.service")
    deadline = time.monotonic() + 30
    while not node.file(PROM_FILE).exists:
        assert time.monotonic() < deadline, "the writer did not write within 30 s"
        time.sleep(0.5)

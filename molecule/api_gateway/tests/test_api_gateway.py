"""testinfra: the gateway in front of the head's engine, as the nodes show it after converge."""

from __future__ import annotations

import time
from pathlib import Path

import testinfra

UNIT = "gx10-gateway.service"
# The lab inventory's service key (`gx10 keys init`, which `gx10 lab up` runs): on the
# controller, read where the inventory reads it.
KEY = (
    (Path(__file__).resolve().parents[3] / "inventories" / "lab" / ".secrets" / "service.key")
    .read_text(encoding="utf-8")
    .strip()
)
API, ENGINE = 8000, 8001


def _status(host: testinfra.host.Host, url: str, *headers: str) -> str:
    flags = " ".join(f"-H '{header}'" for header in headers)
    return host.check_output(
        f"curl -s -o /dev/null -w '%{{http_code}}' --max-time 5 {flags} {url} || true"
    )


def _head_address(head: testinfra.host.Host) -> str:
    return str(head.ansible.get_variables()["gx10_api_host"])


def test_the_gateway_runs_on_the_head_only(
    head: testinfra.host.Host, workers: list[testinfra.host.Host]
) -> None:
    assert head.service(UNIT).is_enabled
    assert head.service(UNIT).is_running
    for worker in workers:
        assert not worker.file(f"/etc/systemd/system/{UNIT}").exists


def test_the_engine_listens_on_loopback_and_the_gateway_on_the_api_port(
    head: testinfra.host.Host,
) -> None:
    assert head.socket(f"tcp://127.0.0.1:{ENGINE}").is_listening
    assert not head.socket(f"tcp://0.0.0.0:{ENGINE}").is_listening
    assert head.socket(f"tcp://0.0.0.0:{API}").is_listening
    args = head.check_output("docker inspect -f '{{json .Args}}' gx10-vllm")
    assert f'"--host","127.0.0.1","--port","{ENGINE}"' in args


def test_the_engine_is_unreachable_from_the_worker_and_the_gateway_asks_for_a_key(
    head: testinfra.host.Host, workers: list[testinfra.host.Host]
) -> None:
    address = _head_address(head)
    for worker in workers:
        assert _status(worker, f"http://{address}:{ENGINE}/health") == "000"
        assert _status(worker, f"http://{address}:{API}/v1/models") == "401"
        assert _status(worker, f"http://{address}:{API}/health") == "200"
        authorized = _status(
            worker, f"http://{address}:{API}/v1/models", f"Authorization: Bearer {KEY}"
        )
        assert authorized == "200"


def test_the_files_are_roots_and_haproxys_only(head: testinfra.host.Host) -> None:
    for name in ("gx10-keys.map", "gx10-engine.map", "gx10-gateway.cfg"):
        file = head.file(f"/etc/haproxy/{name}")
        assert (file.user, file.group, file.mode) == ("root", "haproxy", 0o640), name
    assert KEY not in head.file("/etc/haproxy/gx10-keys.map").content_string
    assert "service" in head.file("/etc/haproxy/gx10-keys.map").content_string
    assert not head.file("/etc/haproxy/gx10-gateway.pem").exists  # no TLS asked
    check = head.run("haproxy -c -q -f /etc/haproxy/gx10-gateway.cfg")
    assert check.rc == 0, check.stderr


def test_the_access_log_names_the_key_and_never_shows_it(head: testinfra.host.Host) -> None:
    _status(head, f"http://127.0.0.1:{API}/v1/models", f"Authorization: Bearer {KEY}")
    deadline = time.monotonic() + 30
    log = ""
    while time.monotonic() < deadline:
        log = head.check_output(f"journalctl -u {UNIT} --no-pager -o cat")
        if "key=service" in log:
            break
        time.sleep(1)
    assert 'key=service in=- out=- "GET /v1/models HTTP/1.1"' in log
    assert KEY not in log

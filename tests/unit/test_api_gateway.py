"""The API gateway for real: the api_gateway role's haproxy configuration, rendered from its
template with the role's own defaults, run by the haproxy binary (`make proxy-deps`) on loopback
ports in front of a tiny loopback HTTP backend that stands in for the engine.

Keys are added and revoked by `gx10 keys` itself (playbooks/keys.yml on a localhost "head",
the gateway_keys module talking to this HAProxy's runtime API): a valid key passes and the
access log names it, a missing or wrong key gets a 401 in the route's API's format, a revoked key
is refused from the next request with neither the backend nor HAProxy restarted (not even
reloaded), and no key is ever in the log or the runner's artifacts. A reload (what the role's
handler does) reads the map file the runtime API changes were also written to.

Every process here is started by the test, on 127.0.0.1, and ended by its pid; every wait is
bounded.
"""

from __future__ import annotations

import grp
import hashlib
import http.server
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
import yaml
from cli_helpers import invoke

from gx10._collection import load

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "api_gateway"
HAPROXY = shutil.which("haproxy")
SERVICE_KEY = "service-" + secrets.token_urlsafe(16)
WAIT_S = 15.0
gateway_keys = load("gateway_keys")


pytestmark = pytest.mark.heavy  # long tests: make unit hands this file out first


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _until(what: str, test: Any, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if test():
            return
        time.sleep(0.05)
    raise AssertionError(f"not {what} within {timeout:.0f} s")


# --- the engine's stand-in ---------------------------------------------------------------------


class Backend:
    """A loopback HTTP server that answers 200 with a JSON body and records every request's
    path and headers. Started once; its identity shows it was never restarted.

    As the engine does, a completion's answer reports its tokens: /v1/chat/completions in a JSON
    body's "usage", or, asked to stream, in the last of its server-sent events, split across two
    chunks; /v1/messages streams Anthropic's events (input tokens in message_start, the output's
    running total in message_delta). A request to /v1/hold is answered only once `release` is
    set (bounded): a request in flight."""

    USAGE: ClassVar[dict[str, int]] = {
        "prompt_tokens": 17,
        "completion_tokens": 5,
        "total_tokens": 22,
    }
    HOLD_S = 20.0

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.started = time.monotonic_ns()
        self.release = threading.Event()
        backend = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                request = json.loads(self.rfile.read(length) or b"{}") if length else {}
                backend.seen.append({"path": self.path, "headers": dict(self.headers.items())})
                if self.path == "/v1/hold":
                    backend.release.wait(Backend.HOLD_S)
                if request.get("stream"):
                    self._stream(self.path == "/v1/messages")
                    return
                answer: dict[str, Any] = {"object": "list", "data": [], "started": backend.started}
                if self.path == "/v1/chat/completions":
                    # A completion whose text holds a look-alike count: escaped, never read.
                    text = 'say \\"prompt_tokens\\": 999'
                    answer["choices"] = [{"message": {"content": text}}]
                    answer["usage"] = Backend.USAGE
                body = json.dumps(answer)
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            def _stream(self, anthropic: bool) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                if anthropic:
                    events = [
                        'event: message_start\ndata: {"type":"message_start","message":'
                        '{"usage":{"input_tokens":11,"cache_read_input_tokens":0,'
                        '"output_tokens":1}}}\n\n',
                        'event: message_delta\ndata: {"type":"message_delta","usage":'
                        '{"output_tokens":7}}\n\n',
                    ]
                else:
                    last = 'data: {"choices":[],"usage":{"prompt_tokens":17,"completion_tokens":5}}'
                    cut = last.index("completion_tokens") + 5  # the count split across chunks
                    events = [
                        *('data: {"choices":[{"delta":{"content":"x"}}]}\n\n' for _ in range(20)),
                        last[:cut],
                        last[cut:] + "\n\ndata: [DONE]\n\n",
                    ]
                for event in events:
                    data = event.encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                    time.sleep(0.01)
                self.wfile.write(b"0\r\n\r\n")

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


# --- the gateway -------------------------------------------------------------------------------


def _trusted(value: Any) -> Any:
    """Values as Ansible trusts a role's own files (templates in them are rendered)."""
    from ansible.template import trust_as_template  # noqa: PLC0415 - ansible imports slowly

    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, Mapping):
        return {key: _trusted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_trusted(item) for item in value]
    return value


def render(template: str, overrides: Mapping[str, Any]) -> str:
    """One of the role's templates, with its defaults and vars beneath `overrides`."""
    from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415
    from ansible.template import Templar  # noqa: PLC0415

    variables: dict[str, Any] = {"ansible_managed": "Ansible managed"}
    for part in ("defaults", "vars"):
        variables.update(yaml.safe_load((ROLE / part / "main.yml").read_text()))
    variables.update(overrides)
    templar = Templar(loader=DataLoader(), variables=_trusted(variables))
    text: str = templar.template(_trusted((ROLE / "templates" / template).read_text()))
    return text


def gateway_vars(
    base: Path, backend_port: int, port: int, *, address: str = "127.0.0.1", tls: bool = False
) -> dict[str, Any]:
    """The role's inputs for a gateway under `base` (config and runtime directories), run by this
    user (no chroot, no user switch), in front of the backend."""
    return {
        "gx10_plan": {
            "gateway": {
                "address": address,
                "port": port,
                "tls_cert": str(base / "gw.crt") if tls else "",
                "tls_key": str(base / "gw.key") if tls else "",
                "engine_host": "127.0.0.1",
                "engine_port": backend_port,
            }
        },
        "vllm_serve_api_key": SERVICE_KEY,
        "api_gateway_config_dir": str(base / "etc"),
        "api_gateway_runtime_dir": str(base / "run"),
        "api_gateway_chroot": "",
        "api_gateway_user": "",
        "api_gateway_group": grp.getgrgid(os.getgid()).gr_name,
    }


def configure(base: Path, variables: Mapping[str, Any]) -> Path:
    """What configure.yml writes: the key map with the `service` key (no limit), the usage
    filter, the engine's key, the certificate when asked, the configuration. Returns the
    configuration's path."""
    etc = base / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    (base / "run").mkdir(exist_ok=True)
    service = gateway_keys.KeyEntry(
        "service", hashlib.sha256(SERVICE_KEY.encode()).hexdigest(), max_concurrent=0
    )
    (etc / "gx10-keys.map").write_text(gateway_keys.render_map([service]))
    shutil.copy(ROLE / "files" / "gx10-usage.lua", etc / "gx10-usage.lua")
    (etc / "gx10-engine.map").write_text(f"authorization Bearer {SERVICE_KEY}\n")
    if variables["gx10_plan"]["gateway"]["tls_cert"]:
        (etc / "gx10-gateway.pem").write_text(
            (base / "gw.crt").read_text() + (base / "gw.key").read_text()
        )
    config = etc / "gx10-gateway.cfg"
    config.write_text(render("gx10-gateway.cfg.j2", variables))
    return config


def haproxy_check(config: Path) -> subprocess.CompletedProcess[str]:
    assert HAPROXY, "haproxy is not installed (make proxy-deps)"
    return subprocess.run(
        [HAPROXY, "-c", "-q", "-f", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


class Gateway:
    """haproxy -W (master-worker, as the unit runs it, without systemd) on the configuration;
    its log (stdout) in a file. Ended by its pid."""

    def __init__(self, config: Path, port: int, base: Path) -> None:
        assert HAPROXY, "haproxy is not installed (make proxy-deps)"
        self.port = port
        self.log = base / "haproxy.log"
        self.socket = base / "run" / "admin.sock"
        # The master's own CLI (test equipment: the unit does not open one). It answers from
        # the master's event loop, so only once its signal handlers are set.
        self.master = base / "run" / "master.sock"
        self._out = self.log.open("w")
        self.proc = subprocess.Popen(
            [HAPROXY, "-W", "-S", str(self.master), "-f", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        _until("listening", self._listening)
        _until("answering on its runtime API", self.socket.exists)
        # The master logs its first "Loading success." after the worker forked, and so after
        # the port answers: a reload counted before it would count the start as the reload, and
        # a SIGUSR2 before the master's handlers are set would end it (the signal's default).
        _until("started", lambda: self.log.read_text().count("Loading success") >= 1)

    def _listening(self) -> bool:
        assert self.proc.poll() is None, self.log.read_text()
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def workers(self) -> str:
        return self.log.read_text().count("New worker")

    def _master_answers(self) -> bool:
        """The master answers `show proc` on its CLI: it runs its event loop (after a start or a
        reload's re-exec, whose "Loading success" it logs before its handlers are set again)."""
        assert self.proc.poll() is None, self.log.read_text()
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            try:
                s.connect(str(self.master))
                s.sendall(b"show proc\n")
                return b"master" in s.recv(4096)
            except OSError:
                return False

    def reload(self) -> None:
        """What `systemctl reload` does to the unit: SIGUSR2 to the master, once the master can
        take it (under load, a second reload could reach a master still re-executing itself)."""
        _until("the master ready for a reload", self._master_answers)
        loaded = self.log.read_text().count("Loading success")
        os.kill(self.proc.pid, signal.SIGUSR2)
        _until("reloaded", lambda: self.log.read_text().count("Loading success") > loaded)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._out.close()

    def logged(self, fragment: str) -> str:
        """The first log line with `fragment` (the log is written as requests end)."""
        found: list[str] = []

        def seen() -> bool:
            found[:] = [line for line in self.log.read_text().splitlines() if fragment in line]
            return bool(found)

        _until(f"logged {fragment!r}", seen)
        return found[0]


@pytest.fixture(scope="module")
def backend() -> Iterator[Backend]:
    server = Backend()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A short path: a unix socket's path is limited to 107 bytes.
    path = Path(tempfile.mkdtemp(prefix="gx10-gw-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def gateway(backend: Backend, base: Path) -> Iterator[Gateway]:
    port = _free_port()
    config = configure(base, gateway_vars(base, backend.port, port))
    check = haproxy_check(config)
    assert check.returncode == 0, check.stdout + check.stderr
    running = Gateway(config, port, base)
    yield running
    running.stop()


def _get(gateway: Gateway, path: str = "/v1/models", **headers: str) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{gateway.port}{path}", headers=headers, timeout=10)


# --- requests ----------------------------------------------------------------------------------


def test_the_rendered_configuration_logs_no_header(gateway: Gateway, base: Path) -> None:
    text = (base / "etc" / "gx10-gateway.cfg").read_text()
    log_format = next(line for line in text.splitlines() if "log-format" in line)
    # The path without its query, and the key's name: no header, no request line (%r), no
    # capture of any header anywhere.
    assert "%HP" in log_format
    assert "%[var(txn.gx10_key)]" in log_format
    for leak in ("%r", "%HU", "%HQ", "%hr", "%hrl", "%[req.hdr", "%[req.fhdr"):
        assert leak not in log_format
    assert "capture request header" not in text
    assert "option httplog" not in text


def test_no_key_or_a_wrong_key_gets_a_401_in_openais_format(
    gateway: Gateway, backend: Backend
) -> None:
    before = len(backend.seen)
    for headers in ({}, {"Authorization": "Bearer gx10-wrong"}, {"Authorization": "Basic eA=="}):
        answer = _get(gateway, **headers)
        assert answer.status_code == 401
        assert answer.headers["content-type"] == "application/json"
        assert answer.json()["error"]["code"] == "invalid_api_key"
    assert len(backend.seen) == before  # nothing reached the engine
    assert "key=-" in gateway.logged('"GET /v1/models HTTP/1.1"')


def test_the_messages_route_answers_in_anthropics_format(gateway: Gateway) -> None:
    answer = httpx.post(
        f"http://127.0.0.1:{gateway.port}/v1/messages", headers={"x-api-key": "wrong"}, timeout=10
    )
    assert answer.status_code == 401
    assert answer.json()["type"] == "error"
    assert answer.json()["error"]["type"] == "authentication_error"


def test_the_service_key_passes_and_the_engine_gets_its_own_key(
    gateway: Gateway, backend: Backend
) -> None:
    answer = _get(gateway, "/v1/models?api_key=in-the-query", Authorization=f"bearer {SERVICE_KEY}")
    assert answer.status_code == 200
    seen = backend.seen[-1]
    assert seen["headers"]["authorization"] == f"Bearer {SERVICE_KEY}"
    assert "x-api-key" not in {name.lower() for name in seen["headers"]}
    line = gateway.logged("key=service")
    assert '"GET /v1/models HTTP/1.1"' in line  # the path, never the query string
    assert "in-the-query" not in gateway.log.read_text()


def test_public_paths_pass_without_a_key(gateway: Gateway, backend: Backend) -> None:
    assert _get(gateway, "/health").status_code == 200
    assert backend.seen[-1]["path"] == "/health"
    assert _get(gateway, "/healthz").status_code == 401  # exact paths only


def test_metrics_and_load_need_a_key_though_vllm_serves_them_to_anyone(
    gateway: Gateway, backend: Backend
) -> None:
    """The role's default public paths are the probes only (issue 26): what the engine counts,
    and its load, are for key holders (Prometheus sends one from a file)."""
    for path in ("/metrics", "/load"):
        seen = len(backend.seen)
        assert _get(gateway, path).status_code == 401, path
        assert len(backend.seen) == seen, f"{path} reached the engine without a key"
        keyed = _get(gateway, path, authorization=f"Bearer {SERVICE_KEY}")
        assert keyed.status_code == 200, path
        assert backend.seen[-1]["path"] == path


# vLLM's routes (tests/fixtures/vllm-routes.json, its sources there): the engine answers each,
# /v1/* alone checking --api-key. The gateway refuses anything but its exact public paths, so
# this is a sample of what must be refused, not the rule.
VLLM_ROUTES = tuple(
    (route["method"], route["path"])
    for route in json.loads((ROOT / "tests" / "fixtures" / "vllm-routes.json").read_text())[
        "routes"
    ]
)
# Paths that are not exactly a public one, however close: refused, never normalised into one.
PATH_TRICKS = (
    "//v1/models",
    "/health/../v1/models",
    "/health/..%2Fv1/models",
    "/health%2F..%2Fv1%2Fmodels",
    "/HEALTH",
    "/health/",
    "/health;/v1/models",
    "/./health",
    "/ping/../tokenize",
    "/version/../invocations",
)


def _raw_status(port: int, path: str) -> int:
    """The status of `GET path` sent as written (HTTP clients resolve `.` and `..` first)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: gx10\r\nConnection: close\r\n\r\n".encode())
        status_line = sock.makefile("rb").readline().decode()
    return int(status_line.split()[1])


def test_every_vllm_route_and_path_trick_is_refused_without_a_key(
    gateway: Gateway, backend: Backend
) -> None:
    seen = len(backend.seen)
    refused = {}
    with httpx.Client(base_url=f"http://127.0.0.1:{gateway.port}", timeout=10) as client:
        for method, path in VLLM_ROUTES:
            refused[path] = client.request(method, path, json={}).status_code
    for path in PATH_TRICKS:
        refused[path] = _raw_status(gateway.port, path)
    assert {path: code for path, code in refused.items() if code != 401} == {}
    assert len(backend.seen) == seen  # none reached the engine
    for path in ("/health", "/ping", "/version"):
        assert _get(gateway, path).status_code == 200, path


# --- keys: gx10 keys itself, against this gateway ---------------------------------------------


@pytest.fixture(scope="module")
def inventory(base: Path, gateway: Gateway) -> Path:
    """A localhost "head" (and worker) whose gateway files are this gateway's."""
    variables = {
        key: value
        for key, value in gateway_vars(base, 0, gateway.port).items()
        if key.startswith(("api_gateway_", "vllm_serve_"))
    }
    path = base / "inventory.yml"
    path.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "gx10": {
                            "children": {
                                "head": {"hosts": {"gx10-a": {}}},
                                "workers": {"hosts": {"gx10-b": {}}},
                            },
                            "vars": {"gx10_gateway_enabled": True, **variables},
                        }
                    },
                    "vars": {
                        "ansible_connection": "local",
                        "ansible_python_interpreter": sys.executable,
                    },
                }
            }
        )
    )
    return path


@pytest.fixture
def artifacts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """provision()'s runner directories go here (they are kept), so the test can read them."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _running_pids(gateway: Gateway) -> set[int]:
    out = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(gateway.proc.pid)],
        capture_output=True,
        text=True,
        check=False,
        timeout=10,
    ).stdout
    return {gateway.proc.pid, *(int(pid) for pid in out.split())}


def test_a_key_added_counts_at_once_is_named_in_the_log_and_revoked_at_once(
    gateway: Gateway, backend: Backend, inventory: Path, artifacts: Path
) -> None:
    processes = _running_pids(gateway)
    workers = gateway.workers()

    added = invoke(["keys", "add", "alice", "-i", str(inventory)])
    assert added.code == 0, added.stderr
    key = added.stdout.strip()
    assert "running gateway accepts it" in added.stderr

    assert _get(gateway, Authorization=f"Bearer {key}").status_code == 200
    assert backend.seen[-1]["headers"]["authorization"] == f"Bearer {SERVICE_KEY}"
    # x-api-key (Anthropic's clients) on the Messages route.
    answer = httpx.post(
        f"http://127.0.0.1:{gateway.port}/v1/messages", headers={"x-api-key": key}, timeout=10
    )
    assert answer.status_code == 200
    assert "x-api-key" not in {name.lower() for name in backend.seen[-1]["headers"]}
    assert "key=alice" in gateway.logged('key=alice in=- out=- "POST /v1/messages')

    listed = invoke(["keys", "list", "-i", str(inventory), "--json"])
    assert listed.code == 0, listed.stderr
    assert json.loads(listed.stdout)["running"] is True  # read from the runtime API, unchanged
    assert "alice" in {k["name"] for k in json.loads(listed.stdout)["keys"]}

    duplicate = invoke(["keys", "add", "alice", "-i", str(inventory)])
    assert duplicate.code == 2
    assert "already exists" in duplicate.stderr
    assert duplicate.stdout == ""
    assert _get(gateway, Authorization=f"Bearer {key}").status_code == 200  # still alice's

    revoked = invoke(["keys", "revoke", "alice", "-i", str(inventory)])
    assert revoked.code == 0, revoked.stderr
    assert "running gateway refuses it" in revoked.stdout
    assert _get(gateway, Authorization=f"Bearer {key}").status_code == 401

    unknown = invoke(["keys", "revoke", "alice", "-i", str(inventory)])
    assert unknown.code == 2
    assert "no key named 'alice'" in unknown.stderr

    # Nothing restarted or reloaded: the same backend, the same HAProxy processes.
    assert _get(gateway, Authorization=f"Bearer {SERVICE_KEY}").json()["started"] == backend.started
    assert _running_pids(gateway) == processes
    assert gateway.workers() == workers
    # The key is nowhere: not in HAProxy's log, not in the runner's artifacts, not in the map.
    assert key not in gateway.log.read_text()
    assert SERVICE_KEY not in gateway.log.read_text()
    for path in artifacts.rglob("*"):
        if path.is_file():
            assert key not in path.read_text(errors="replace"), path
    assert key not in (gateway.socket.parent.parent / "etc" / "gx10-keys.map").read_text()


def test_a_reload_reads_the_map_file(gateway: Gateway, base: Path) -> None:
    """The role's handler reloads; a key written to the file only (the runtime API not told)
    counts after a reload, and one removed from the file is refused after the next."""
    path = base / "etc" / "gx10-keys.map"
    key = "gx10-" + secrets.token_urlsafe(32)
    bob = gateway_keys.KeyEntry("bob", hashlib.sha256(key.encode()).hexdigest(), "now")
    entries = gateway_keys.parse_map(path.read_text())
    path.write_text(gateway_keys.render_map([*entries, bob]))
    assert _get(gateway, Authorization=f"Bearer {key}").status_code == 401
    gateway.reload()
    _until("bob accepted", lambda: _get(gateway, Authorization=f"Bearer {key}").status_code == 200)
    path.write_text(gateway_keys.render_map(entries))
    gateway.reload()
    _until("bob refused", lambda: _get(gateway, Authorization=f"Bearer {key}").status_code == 401)
    assert "key=bob" in gateway.logged("key=bob")


def test_the_runtime_api_matches_the_file(gateway: Gateway, base: Path) -> None:
    api = gateway_keys.RuntimeApi(str(gateway.socket))
    path = str(base / "etc" / "gx10-keys.map")
    entries = gateway_keys.parse_map(Path(path).read_text())
    assert gateway_keys.sync_runtime(api, path, entries) == []
    running = api.show_map(path)
    assert {name for values in running.values() for name in values} == {"service 0"}


# --- a fair share per key, and the tokens each used ------------------------------------------


def _held(gateway: Gateway, key: str, count: int) -> list[threading.Thread]:
    """`count` requests with `key` held in flight at the backend (until it is released)."""
    threads = [
        threading.Thread(
            target=_get, args=(gateway, "/v1/hold"), kwargs={"Authorization": f"Bearer {key}"}
        )
        for _ in range(count)
    ]
    for thread in threads:
        thread.start()
    return threads


def _released(backend: Backend, threads: list[threading.Thread]) -> None:
    backend.release.set()
    for thread in threads:
        thread.join(timeout=WAIT_S)
    backend.release.clear()


def _holding(backend: Backend, count: int) -> None:
    _until(f"{count} held", lambda: sum(s["path"] == "/v1/hold" for s in backend.seen) >= count)


def test_a_key_over_its_limit_gets_429_while_another_key_is_served(
    gateway: Gateway, backend: Backend, inventory: Path, artifacts: Path
) -> None:
    swarm = invoke(["keys", "add", "swarm", "--max-concurrent", "1", "-i", str(inventory)])
    alice = invoke(["keys", "add", "alice2", "-i", str(inventory)])  # the default: 4
    assert swarm.code == 0, swarm.stderr
    assert alice.code == 0, alice.stderr
    swarm_key, alice_key = swarm.stdout.strip(), alice.stdout.strip()
    backend.seen.clear()
    threads = _held(gateway, swarm_key, 1)
    try:
        _holding(backend, 1)
        refused = _get(gateway, Authorization=f"Bearer {swarm_key}")
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "2"
        assert refused.json()["error"]["code"] == "rate_limit_exceeded"
        anthropic = httpx.post(
            f"http://127.0.0.1:{gateway.port}/v1/messages",
            headers={"x-api-key": swarm_key},
            timeout=10,
        )
        assert anthropic.status_code == 429
        assert anthropic.json()["error"]["type"] == "rate_limit_error"
        assert [s["path"] for s in backend.seen] == ["/v1/hold"]  # neither reached the engine
        assert _get(gateway, Authorization=f"Bearer {alice_key}").status_code == 200
        assert _get(gateway, Authorization=f"Bearer {SERVICE_KEY}").status_code == 200
    finally:
        _released(backend, threads)
    assert _get(gateway, Authorization=f"Bearer {swarm_key}").status_code == 200  # slot free
    assert re.search(r" 429 \d+ \S+ key=swarm ", gateway.log.read_text())

    # The default (4) for alice2: a fifth request at once is refused; the service key has none.
    backend.seen.clear()
    threads = _held(gateway, alice_key, 4) + _held(gateway, SERVICE_KEY, 5)
    try:
        _holding(backend, 9)
        assert _get(gateway, Authorization=f"Bearer {alice_key}").status_code == 429
        assert _get(gateway, Authorization=f"Bearer {SERVICE_KEY}").status_code == 200
    finally:
        _released(backend, threads)

    # A new limit counts from the next request; nothing restarts.
    assert invoke(["keys", "limit", "swarm", "0", "-i", str(inventory)]).code == 0
    backend.seen.clear()
    threads = _held(gateway, swarm_key, 3)
    try:
        _holding(backend, 3)
        assert _get(gateway, Authorization=f"Bearer {swarm_key}").status_code == 200
    finally:
        _released(backend, threads)
    for name in ("swarm", "alice2"):
        assert invoke(["keys", "revoke", name, "-i", str(inventory)]).code == 0
    assert swarm_key not in gateway.log.read_text()


def test_the_access_log_names_the_tokens_each_response_reported(
    gateway: Gateway, backend: Backend
) -> None:
    url = f"http://127.0.0.1:{gateway.port}"
    auth = {"authorization": f"Bearer {SERVICE_KEY}"}
    before = gateway.log.read_text().count("key=service")
    for done, (path, body) in enumerate(
        [
            ("/v1/chat/completions", {"model": "m"}),
            ("/v1/chat/completions", {"model": "m", "stream": True}),
            ("/v1/messages", {"model": "m", "stream": True}),
            ("/v1/models", None),
        ],
        start=1,
    ):
        answer = httpx.request(
            "POST" if body else "GET", f"{url}{path}", json=body, headers=auth, timeout=10
        )
        assert answer.status_code == 200
        if body and body.get("stream"):
            assert answer.text.count("\n\n") >= 2  # the stream passed through whole
        # One request at a time: each one's line is the last.
        _until(
            "logged",
            lambda n=before + done: gateway.log.read_text().count("key=service") >= n,
        )
    usage = load("gateway_usage")
    requests = [
        r for r in map(usage.parse_line, gateway.log.read_text().splitlines()) if r is not None
    ][-4:]
    assert [(r.path, r.tokens_in, r.tokens_out) for r in requests] == [
        ("/v1/chat/completions", 17, 5),  # the JSON body's usage (not the text's look-alike)
        ("/v1/chat/completions", 17, 5),  # the stream's last event, split across two chunks
        ("/v1/messages", 11, 7),  # message_start's input, message_delta's running total
        ("/v1/models", None, None),
    ]
    summary = usage.summarize(gateway.log.read_text().splitlines()).as_dict()
    service = next(k for k in summary["keys"] if k["name"] == "service")
    assert service["tokens_in"] >= 45
    assert service["tokens_out"] >= 17


# --- configurations haproxy must accept ------------------------------------------------------


def _self_signed(base: Path) -> Path:
    from cryptography import x509  # noqa: PLC0415
    from cryptography.hazmat.primitives import hashes, serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415
    from cryptography.x509.oid import NameOID  # noqa: PLC0415

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    (base / "gw.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (base / "gw.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return base / "gw.crt"


def test_tls_with_the_users_certificate(backend: Backend) -> None:
    base = Path(tempfile.mkdtemp(prefix="gx10-gwtls-"))
    try:
        ca = _self_signed(base)
        port = _free_port()
        variables = gateway_vars(base, backend.port, port, tls=True)
        config = configure(base, variables)
        assert f"ssl crt {base}/etc/gx10-gateway.pem" in config.read_text()
        running = Gateway(config, port, base)
        try:
            context = ssl.create_default_context(cafile=str(ca))
            url = f"https://127.0.0.1:{port}/v1/models"
            ok = httpx.get(url, headers={"Authorization": f"Bearer {SERVICE_KEY}"}, verify=context)
            assert ok.status_code == 200
            assert httpx.get(url, verify=context).status_code == 401
            with pytest.raises(httpx.HTTPError):
                httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).raise_for_status()
        finally:
            running.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize(
    ("address", "paths", "bind"),
    [
        ("0.0.0.0", None, "bind 0.0.0.0:"),
        ("::1", None, "bind ipv6@::1:"),
        ("127.0.0.1", [], "bind 127.0.0.1:"),
    ],
)
def test_configurations_haproxy_accepts(
    tmp_path: Path, address: str, paths: list[str] | None, bind: str
) -> None:
    variables = gateway_vars(tmp_path, 8001, 8000, address=address)
    if paths is not None:
        variables["api_gateway_public_paths"] = paths
    config = configure(tmp_path, variables)
    assert bind in config.read_text()
    check = haproxy_check(config)
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_unit_runs_haproxy_master_worker_and_reloads_by_signal() -> None:
    unit = render(
        "gx10-gateway.service.j2",
        {"api_gateway_runtime_dir": "/run/gx10-gateway", "gx10_plan": {"gateway": {}}},
    )
    lines = [line for line in unit.splitlines() if "=" in line and not line.startswith("#")]
    settings: dict[str, list[str]] = {}
    for line in lines:
        key, _, value = line.partition("=")
        settings.setdefault(key, []).append(value)
    assert settings["ExecStart"] == ["/usr/sbin/haproxy -Ws -f $CONFIG"]
    assert settings["ExecReload"] == [
        "/usr/sbin/haproxy -Ws -f $CONFIG -c -q",
        "/bin/kill -USR2 $MAINPID",
    ]
    assert settings["Type"] == ["notify"]
    assert settings["RuntimeDirectory"] == ["gx10-gateway"]
    assert re.search(r'CONFIG=/etc/haproxy/gx10-gateway\.cfg"', unit)

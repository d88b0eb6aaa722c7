"""`gx10 metrics config`: the Prometheus scrape config for a cluster, from its inventory.

Two jobs, each target labelled with its `node`, `role` (head or worker) and `rank`:

- `vllm`: the head's `/metrics`, at the API the inventory deploys (`gx10_api_host` or
  `ansible_host`, `gx10_serve_port`; as `gx10 clients` and playbooks/smoke.yml compute it), or
  `--endpoint`. Only the head: a headless worker (`vllm serve --headless`, the multi-node
  executor's workers) starts no API server, so it has no `/metrics`; its engine's statistics
  reach the head's front end and are in the head's. With an API key (the inventory's
  `vllm_serve_api_key`, or `--key-file`), Prometheus sends it from a file
  (`authorization.credentials_file`), never written into the config. vLLM itself does not guard
  `/metrics` with `--api-key` (only `/v1` routes); the gx10 gateway does (its public paths are
  the probes only).
- `node`: each node's exporter (the metrics_exporter role: node exporter, whose textfile
  collector carries gx10-gpu-metrics' `gx10_gpu_*`), at `metrics_exporter_listen_host` if the
  role binds to one address, else `ansible_host`, else the inventory name; port
  `metrics_exporter_port`. Left out when the inventory sets `metrics_exporter_enabled: false`.

Written beside it: the dashboard (gx10.metrics.dashboard) and a README saying how to run both.
"""

from __future__ import annotations

import ipaddress
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from gx10.bench.nodes import Cluster
from gx10.endpoint import EndpointError, parse_endpoint
from gx10.errors import Gx10Error
from gx10.metrics import dashboard

CONFIG_FILE = Path("prometheus.yml")
DASHBOARD_FILE = Path("gx10-dashboard.json")
README_FILE = Path("README.md")
KEY_FILE = Path("vllm-api-key")  # credentials_file's default, beside prometheus.yml
DEFAULT_INTERVAL = 5
DEFAULT_EXPORTER_PORT = 9100
ROLE = "metrics_exporter"
NODE_VARS = (
    "ansible_host",
    "metrics_exporter_enabled",
    "metrics_exporter_port",
    "metrics_exporter_listen_host",
)
_ANY_ADDRESS = ("", "0.0.0.0", "::", "[::]")


class MetricsError(Gx10Error):
    """`gx10 metrics config` cannot write the config asked for (bad option or inventory value)."""


@dataclass(frozen=True, slots=True)
class Target:
    address: str  # host:port, as Prometheus scrapes it
    labels: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Job:
    name: str
    targets: tuple[Target, ...]
    scheme: str = "http"
    credentials_file: str = ""  # the API key's file, as Prometheus reads it ("" : no key)


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """What `gx10 metrics config` writes."""

    sources: tuple[str, ...]
    jobs: tuple[Job, ...]
    interval: int
    notes: tuple[str, ...] = ()
    # The key itself, only when asked to write it (--write-key): kept out of repr.
    key: str = field(default="", repr=False)

    def job(self, name: str) -> Job | None:
        return next((job for job in self.jobs if job.name == name), None)


@dataclass(frozen=True, slots=True)
class OutFile:
    path: Path  # relative to the output directory
    text: str = field(repr=False)
    mode: int = 0o644


def host_port(host: str, port: int) -> str:
    """`host:port`, an IPv6 literal in brackets."""
    bare = host.strip().strip("[]")
    try:
        if ipaddress.ip_address(bare).version == 6:
            return f"[{bare}]:{port}"
    except ValueError:
        pass
    return f"{bare}:{port}"


def _port(value: Any, where: str) -> int:
    try:
        port = int(str(value).strip())
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise MetricsError(
            f"{where}: metrics_exporter_port is {value!r}; it must be a TCP port (1-65535), "
            f"e.g. metrics_exporter_port: {DEFAULT_EXPORTER_PORT}"
        )
    return port


def _enabled(value: Any, where: str) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    raise MetricsError(
        f"{where}: metrics_exporter_enabled is {value!r} ({type(value).__name__}); it must be "
        "true or false, e.g. metrics_exporter_enabled: true"
    )


def build(
    cluster: Cluster,
    *,
    endpoint: str | None = None,
    key_file: str | None = None,
    write_key: bool = False,
    interval: int = DEFAULT_INTERVAL,
) -> MetricsConfig:
    """The scrape config for `cluster` (read with `node_extra=NODE_VARS`, role defaults of
    metrics_exporter beneath)."""
    if not 1 <= interval <= 300:
        raise MetricsError(
            f"--scrape-interval {interval}: give seconds between 1 and 300 (default "
            f"{DEFAULT_INTERVAL}; the node tool writes every 5 s by default)"
        )
    if write_key and key_file is not None:
        raise MetricsError(
            f"--write-key and --key-file {key_file}: --write-key writes the inventory's key "
            f"beside the config as {KEY_FILE}; --key-file names a file you keep yourself. Give "
            "one of them"
        )
    head = cluster.head
    where = f"host {head.name}'s API (gx10_api_host, gx10_serve_port)"
    try:
        url = parse_endpoint(endpoint) if endpoint else parse_endpoint(cluster.endpoint, where)
    except EndpointError as exc:
        raise MetricsError(str(exc)) from exc
    parts = urlsplit(url.root)
    assert parts.hostname is not None  # parse_endpoint refuses a URL without a host
    port = parts.port or (443 if parts.scheme == "https" else 80)
    notes: list[str] = []
    key = cluster.api_key.strip()
    credentials = ""
    if key_file is not None:
        credentials = key_file
        notes.append(f"Prometheus reads the API key from {key_file} (--key-file).")
    elif key:
        credentials = str(KEY_FILE)
        if write_key:
            notes.append(f"The inventory's API key is in {KEY_FILE} (mode 0600, --write-key).")
        else:
            notes.append(
                f"The inventory sets vllm_serve_api_key: put the key in {KEY_FILE} beside "
                "prometheus.yml (mode 0600, readable by Prometheus), or rerun with --write-key "
                "to have it written there, or with --key-file PATH to name another file."
            )
    elif write_key:
        raise MetricsError(
            "--write-key: the inventory sets no vllm_serve_api_key, so there is no key to write; "
            "drop --write-key (the head's /metrics then needs none)"
        )
    ranks = {node.name: rank for rank, node in enumerate(cluster.nodes)}

    def labels(name: str) -> dict[str, str]:
        return {
            "node": str(name),  # a plain str: host names come from Ansible as tagged strings
            "role": "head" if ranks[name] == 0 else "worker",
            "rank": str(ranks[name]),
        }

    jobs = [
        Job(
            "vllm",
            (Target(host_port(parts.hostname, port), labels(head.name)),),
            scheme=parts.scheme,
            credentials_file=credentials,
        )
    ]
    exporters: list[Target] = []
    disabled: list[str] = []
    for node in cluster.nodes:
        settings = node.settings
        where = f"host {node.name}"
        if not _enabled(settings.get("metrics_exporter_enabled"), where):
            disabled.append(node.name)
            continue
        listen = str(settings.get("metrics_exporter_listen_host") or "").strip()
        host = (
            listen
            if listen not in _ANY_ADDRESS
            else str(settings.get("ansible_host") or str(node.name)).strip()
        )
        node_port = _port(settings.get("metrics_exporter_port", DEFAULT_EXPORTER_PORT), where)
        exporters.append(Target(host_port(host, node_port), labels(node.name)))
    if exporters:
        jobs.append(Job("node", tuple(exporters)))
    if disabled:
        notes.append(
            f"No node exporter on {', '.join(disabled)} (metrics_exporter_enabled is not true "
            "there): no GPU telemetry from " + ("it." if len(disabled) == 1 else "them.")
        )
    return MetricsConfig(
        sources=cluster.sources,
        jobs=tuple(jobs),
        interval=interval,
        notes=tuple(notes),
        key=key if write_key else "",
    )


def prometheus_config(config: MetricsConfig) -> dict[str, Any]:
    """The prometheus.yml document."""
    scrape_configs: list[dict[str, Any]] = []
    for job in config.jobs:
        entry: dict[str, Any] = {"job_name": job.name, "scheme": job.scheme}
        entry["metrics_path"] = "/metrics"
        if job.credentials_file:
            entry["authorization"] = {"type": "Bearer", "credentials_file": job.credentials_file}
        entry["static_configs"] = [
            {"targets": [target.address], "labels": dict(target.labels)} for target in job.targets
        ]
        scrape_configs.append(entry)
    timeout = max(1, config.interval - 1)
    return {
        "global": {
            "scrape_interval": f"{config.interval}s",
            "scrape_timeout": f"{timeout}s",
            "evaluation_interval": "15s",
        },
        "scrape_configs": scrape_configs,
    }


def render_config(config: MetricsConfig) -> str:
    header = [
        "# Prometheus scrape config for the gx10 service, written by `gx10 metrics config` from",
        f"# {', '.join(config.sources)}. Job vllm: the head's /metrics (a headless vLLM worker",
        "# serves none). Job node: each node's exporter, with the gx10_gpu_* GPU telemetry.",
        "# Relative file paths below are read from this file's directory.",
    ]
    body = yaml.safe_dump(prometheus_config(config), sort_keys=False, default_flow_style=False)
    return "\n".join(header) + "\n" + body


def render_readme(config: MetricsConfig) -> str:
    lines = [
        "# Prometheus and Grafana for the gx10 service",
        "",
        f"Written by `gx10 metrics config` from {', '.join(config.sources)}.",
        "",
        f"- `{CONFIG_FILE}`: scrape every {config.interval} s:",
    ]
    for job in config.jobs:
        targets = ", ".join(f"{t.address} ({t.labels['node']})" for t in job.targets)
        lines.append(f"  - job `{job.name}`: {targets}")
    lines += [
        f"- `{DASHBOARD_FILE}`: the Grafana dashboard (throughput, TTFT, queue, KV cache, "
        "speculative acceptance, power, temperature, clock, memory).",
        "",
        "Run Prometheus with the config (Debian/Ubuntu: `apt install prometheus`):",
        "",
        "```",
        f"prometheus --config.file={CONFIG_FILE} --storage.tsdb.path=./data",
        "```",
        "",
        "or copy it to `/etc/prometheus/prometheus.yml` (with the key file, if any, beside it) "
        "and restart the service. `promtool check config prometheus.yml` checks it first (it "
        "also refuses a key file that is not there yet).",
        "In Grafana: add the Prometheus as a data source, then Dashboards > New > Import > "
        f"upload `{DASHBOARD_FILE}` and pick that data source.",
    ]
    if config.notes:
        lines += ["", *(f"Note: {note}" for note in config.notes)]
    return "\n".join(lines) + "\n"


def files(config: MetricsConfig) -> list[OutFile]:
    """Every file `gx10 metrics config` writes, the README last."""
    out = [
        OutFile(CONFIG_FILE, render_config(config)),
        OutFile(DASHBOARD_FILE, json.dumps(dashboard.dashboard(), indent=2) + "\n"),
    ]
    if config.key:
        out.append(OutFile(KEY_FILE, config.key + "\n", 0o600))
    out.append(OutFile(README_FILE, render_readme(config)))
    return out


def _write_one(path: Path, text: str, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)  # before any byte is written
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write(out: Path, outputs: Sequence[OutFile], *, force: bool = False) -> list[Path]:
    """Write `outputs` into `out`, each by a temporary file renamed into place. Checked first:
    `out` is a directory (or can be made), and no file is overwritten without `force`."""
    out = Path(out).expanduser().absolute()
    for probe in (out, *out.parents):
        if probe.exists():
            if not probe.is_dir():
                raise MetricsError(f"--out {out}: {probe} is not a directory; give a directory")
            break
    existing = [str(out / f.path) for f in outputs if (out / f.path).exists()]
    if existing and not force:
        raise MetricsError(
            f"--out {out}: {', '.join(existing)} already there; give --force to overwrite, or "
            "another --out"
        )
    for f in outputs:
        if (out / f.path).exists() and not (out / f.path).is_file():
            raise MetricsError(f"--out {out}: {out / f.path} exists and is not a file; remove it")
    try:
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for f in outputs:
            _write_one(out / f.path, f.text, f.mode)
            written.append(out / f.path)
    except OSError as exc:
        raise MetricsError(f"--out {out}: cannot write there ({exc.strerror or exc})") from exc
    return written


def load(
    inventories: Sequence[str | Path],
    *,
    endpoint: str | None = None,
    key_file: str | None = None,
    write_key: bool = False,
    interval: int = DEFAULT_INTERVAL,
) -> MetricsConfig:
    """The config for the cluster the inventory describes."""
    from gx10.bench.nodes import load_cluster  # noqa: PLC0415 - ansible is slow to import

    if not inventories:
        raise MetricsError("gx10 metrics config needs -i INV: the inventory of the service")
    cluster = load_cluster(
        inventories,
        need_api_key=key_file is None,
        node_extra=NODE_VARS,
        role_defaults=(ROLE,),
    )
    return build(
        cluster, endpoint=endpoint, key_file=key_file, write_key=write_key, interval=interval
    )

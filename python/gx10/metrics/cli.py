"""`gx10 metrics config -i INV [--out DIR] [--endpoint URL] [--key-file PATH | --write-key]
[--scrape-interval S] [--force] [--json]`.

Exit codes: 0 written; 1 bad option or inventory value (nothing written)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from gx10.metrics import config as metrics_config

DEFAULT_OUT = Path("gx10-metrics")


def add_parser(commands: Any, json_option: argparse.ArgumentParser) -> None:
    metrics = commands.add_parser(
        "metrics", help="Prometheus scrape config and Grafana dashboard for the service"
    )
    actions = metrics.add_subparsers(title="actions", metavar="ACTION", required=True)
    p = actions.add_parser(
        "config",
        parents=[json_option],
        help="write prometheus.yml and the dashboard for the inventory's cluster",
        description=(
            "Write a Prometheus scrape config for the service the inventory deploys: the head's "
            "vLLM /metrics (a headless worker serves none) and every node's exporter (the "
            "metrics_exporter role: node exporter with the gx10_gpu_* GPU telemetry), each "
            "target labelled node, role and rank; the Grafana dashboard JSON and a README "
            "beside it. An API key is referenced by file (authorization.credentials_file), "
            "never written into the config."
        ),
    )
    p.add_argument(
        "-i",
        "--inventory",
        action="append",
        metavar="INV",
        required=True,
        help="the inventory the service was deployed from (repeatable, as ansible)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        metavar="DIR",
        help=f"output directory (default ./{DEFAULT_OUT}/)",
    )
    p.add_argument(
        "--endpoint",
        metavar="URL",
        help="the server whose /metrics to scrape, e.g. https://llm.example:443 (default: the "
        "head's API, as playbooks/smoke.yml computes it)",
    )
    key = p.add_mutually_exclusive_group()
    key.add_argument(
        "--key-file",
        metavar="PATH",
        help="Prometheus reads the API key from PATH (as the Prometheus host sees it; a relative "
        "path is read from the config's directory)",
    )
    key.add_argument(
        "--write-key",
        action="store_true",
        help=f"write the inventory's vllm_serve_api_key to {metrics_config.KEY_FILE} beside the "
        "config (mode 0600)",
    )
    p.add_argument(
        "--scrape-interval",
        type=int,
        default=metrics_config.DEFAULT_INTERVAL,
        metavar="S",
        help=f"seconds between scrapes (default {metrics_config.DEFAULT_INTERVAL})",
    )
    p.add_argument("--force", action="store_true", help="overwrite files already in --out")
    p.set_defaults(handler=_run_config)


def _run_config(args: argparse.Namespace) -> int:
    config = metrics_config.load(
        args.inventory,
        endpoint=args.endpoint,
        key_file=args.key_file,
        write_key=args.write_key,
        interval=args.scrape_interval,
    )
    written = metrics_config.write(args.out, metrics_config.files(config), force=args.force)
    if args.json:
        document = {
            "ok": True,
            "out": str(Path(args.out).expanduser().absolute()),
            "files": [str(path) for path in written],
            "jobs": {
                job.name: [{"target": target.address, **target.labels} for target in job.targets]
                for job in config.jobs
            },
            "notes": list(config.notes),
        }
        print(json.dumps(document, indent=2))
        return 0
    for path in written:
        print(f"wrote {path}")
    for job in config.jobs:
        for target in job.targets:
            print(
                f"  scrape {job.name}: {job.scheme}://{target.address}/metrics "
                f"({target.labels['node']}, {target.labels['role']})"
            )
    for note in config.notes:
        print(f"note: {note}")
    return 0

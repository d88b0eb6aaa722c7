"""The `gx10` command.

Each subcommand is an `_add_<name>` function that builds its parser and sets `handler` to a
`_run_<name>` function; `_SUBCOMMANDS` is the one place they are registered (other
distributions, the lab among them, add theirs through the `gx10.commands` entry points).
Handlers return an exit code and leave rendering to `gx10.progress`.

Exit codes: 0 ok; 1 setup or usage error; 2 the playbook ran and failed, or `model verify` found
a missing or mismatching file, or `doctor` found a fault (an error finding), or `status` found the
service not whole (a rank down, the head not healthy, the pair supervisor's breaker open); 3 `lab
status` found the lab not running (the LSB convention for "not running").
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn, cast

import yaml
from rich.console import Console

from gx10 import __version__, battery, smoke
from gx10 import status as cluster_status
from gx10.bench.cli import add_parser as _add_bench
from gx10.clients.cli import add_parser as _add_clients
from gx10.doctor import Evidence, diagnose, findings_json, has_errors, print_findings
from gx10.doctor import collect as doctor_collect
from gx10.errors import Gx10Error
from gx10.keys import add_parser as _add_keys
from gx10.metrics.cli import add_parser as _add_metrics
from gx10.model.errors import ModelError
from gx10.model.manifest import (
    Manifest,
    is_full_sha,
    load_manifest,
    manifest_from_directory,
    manifest_from_hub,
    resolve_token,
    save_manifest,
)
from gx10.model.sync import sync as model_sync
from gx10.model.verify import verify
from gx10.progress import (
    ByteProgress,
    ProgressPrinter,
    RunStatus,
    print_battery,
    print_summary,
    print_sync_report,
    print_verify_report,
)
from gx10.provision import provision

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_FAILED = 2
EXIT_NOT_RUNNING = 3
EXIT_INTERRUPTED = 130

Handler = Callable[[argparse.Namespace], int]
AddCommand = Callable[["argparse._SubParsersAction[Parser]", "Parser"], None]


class Parser(argparse.ArgumentParser):
    """argparse exits 2 on usage errors; 2 means "the playbook failed" here, so use 1."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except (Gx10Error, ModelError) as exc:  # ModelError: the collection's, see gx10.model.errors
        print(f"gx10: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("gx10: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="gx10", description="Provision GB10 nodes into a vLLM service.")
    parser.add_argument("--version", action="version", version=f"gx10 {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    json_option = Parser(add_help=False)
    json_option.add_argument(
        "--json", action="store_true", help="print a JSON document on stdout (progress on stderr)"
    )
    for add in _SUBCOMMANDS:
        add(commands, json_option)
    for add in _plugged_in():
        add(commands, json_option)
    return parser


PLUGIN_GROUP = "gx10.commands"


def _plugged_in() -> list[AddCommand]:
    """Commands other distributions add (entry point group ``gx10.commands``), by name.

    The lab registers ``gx10 lab`` this way (``gx10.lab.cli:add_parser``): the product's CLI knows
    nothing of its test equipment, and a build without the lab simply has no ``lab`` command.
    """
    found = sorted(importlib.metadata.entry_points(group=PLUGIN_GROUP), key=lambda ep: ep.name)
    return [cast(AddCommand, entry.load()) for entry in found]


# --- provision -------------------------------------------------------------------------------


def _add_provision(
    commands: argparse._SubParsersAction[Parser],
    json_option: Parser,
) -> None:
    p = commands.add_parser(
        "provision",
        parents=[json_option],
        help="run a playbook (site.yml by default) against an inventory",
        description="Run a playbook with the project's ansible.cfg and show live progress.",
    )
    p.add_argument("-i", "--inventory", required=True, help="inventory file or directory")
    p.add_argument(
        "-p", "--playbook", default="site.yml", help="playbook name or path (default: site.yml)"
    )
    p.add_argument("-l", "--limit", help="limit to hosts matching this pattern")
    p.add_argument("-t", "--tags", help="only run tasks with these tags (comma-separated)")
    p.add_argument("--skip-tags", help="skip tasks with these tags (comma-separated)")
    p.add_argument(
        "-e",
        "--extra-vars",
        dest="extra_vars",
        action="append",
        type=_extra_vars,
        default=[],
        metavar="KEY=VALUE|@FILE",
        help="extra variable, or @file.yml with a mapping; repeatable, later wins",
    )
    p.add_argument("-C", "--check", action="store_true", help="dry run (ansible --check)")
    p.add_argument("-D", "--diff", action="store_true", help="show file diffs (ansible --diff)")
    p.add_argument(
        "-v", "--verbose", action="count", default=0, help="ansible verbosity (repeat for more)"
    )
    p.set_defaults(handler=_run_provision)


def _run_provision(args: argparse.Namespace) -> int:
    # Keep stdout clean for the JSON document: progress goes to stderr then.
    console = Console(stderr=args.json, highlight=False)
    extravars: dict[str, Any] = {}
    for chunk in args.extra_vars:
        extravars.update(chunk)
    result = provision(
        args.inventory,
        args.playbook,
        limit=args.limit,
        tags=args.tags,
        skip_tags=args.skip_tags,
        extravars=extravars,
        check=args.check,
        diff=args.diff,
        on_event=ProgressPrinter(console),
        verbosity=args.verbose,
    )
    print_summary(console, result)
    if args.json:
        print_json(result.to_dict())
    if result.status == "canceled":  # Ctrl-C during the run: runner stops it and reports this
        return EXIT_INTERRUPTED
    return EXIT_OK if result.ok else EXIT_FAILED


def _extra_vars(value: str) -> dict[str, Any]:
    """Parse one -e: KEY=VALUE (a string, as with ansible's k=v) or @file.yml (a mapping)."""
    if value.startswith("@"):
        path = Path(value[1:]).expanduser()
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"cannot read {path}: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise argparse.ArgumentTypeError(f"{path} is not valid YAML: {exc}") from exc
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise argparse.ArgumentTypeError(f"{path} must hold a mapping of variables")
        return {str(key): val for key, val in data.items()}
    key, sep, val = value.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE or @FILE, got {value!r}")
    return {key.strip(): val}


# --- model -----------------------------------------------------------------------------------


def _add_model(
    commands: argparse._SubParsersAction[Parser],
    json_option: Parser,
) -> None:
    model = commands.add_parser(
        "model", help="model weights: build a manifest, verify a copy, sync the cluster"
    )
    actions = model.add_subparsers(title="actions", metavar="ACTION", required=True)

    m = actions.add_parser(
        "manifest",
        parents=[json_option],
        help="pin a revision: every file's path, size and hash, written as YAML",
        description=(
            "Build a manifest from the Hub (one API call, nothing downloaded) or by hashing a "
            "directory you trust, and write it (for example into inventories/<name>/files/)."
        ),
    )
    source = m.add_mutually_exclusive_group(required=True)
    source.add_argument("--from-hub", metavar="REPO", help="Hub model repository (owner/name)")
    source.add_argument("--from-dir", metavar="DIR", type=Path, help="a trusted local copy")
    m.add_argument(
        "--revision",
        required=True,
        help="commit sha (a branch or tag too with --from-hub: the manifest pins its commit)",
    )
    m.add_argument("--repo", help="repository id to record (required with --from-dir)")
    m.add_argument("-o", "--output", required=True, type=Path, help="manifest file to write")
    m.add_argument(
        "--token-file",
        type=Path,
        help="file holding the Hub token (default: HF_TOKEN, then a saved `hf auth login`)",
    )
    m.add_argument("--endpoint", help="Hub endpoint (default: HF_ENDPOINT or huggingface.co)")
    m.add_argument("--jobs", type=_positive_int, help="hashing threads (default: all cores)")
    m.set_defaults(handler=_run_model_manifest)

    v = actions.add_parser(
        "verify",
        parents=[json_option],
        help="check a checkpoint directory against a manifest",
        description=(
            "Check every manifest file's size and hash, in parallel. Exit 0 if all match, 2 "
            "naming the missing or mismatching files. Extra files are reported, never deleted."
        ),
    )
    v.add_argument("directory", type=Path, metavar="DIR", help="the checkpoint directory")
    v.add_argument("--manifest", required=True, type=Path, help="manifest file (YAML)")
    v.add_argument(
        "--reverify", action="store_true", help="hash every file, ignoring the verification cache"
    )
    v.add_argument(
        "--no-cache", action="store_true", help="neither read nor write the verification cache"
    )
    v.add_argument("--jobs", type=_positive_int, help="hashing threads (default: all cores)")
    v.set_defaults(handler=_run_model_verify)

    s = actions.add_parser(
        "sync",
        parents=[json_option],
        help="run the model stage: a verified checkpoint on every node, the source read once",
        description=(
            "Run the model stage (site.yml --tags model) and print each node's totals (files, "
            "bytes fetched, bytes hashed, cache hits, seconds). Exit 0 when every node verified "
            "its copy, 2 naming each unverified node and its files."
        ),
    )
    s.add_argument("-i", "--inventory", required=True, help="inventory file or directory")
    s.add_argument("-l", "--limit", metavar="NODES", help="only sync nodes matching this pattern")
    s.add_argument(
        "--reverify",
        action="store_true",
        help="hash every file again on every node, ignoring the verification caches",
    )
    s.add_argument(
        "-v", "--verbose", action="store_true", help="print each play, task and node result"
    )
    s.set_defaults(handler=_run_model_sync)


def _run_model_manifest(args: argparse.Namespace) -> int:
    err = Console(stderr=True, highlight=False)
    if args.from_hub is not None:
        if args.repo is not None:
            raise Gx10Error("--repo goes with --from-dir; with --from-hub the repo is REPO")
        manifest = manifest_from_hub(
            args.from_hub,
            args.revision,
            token=resolve_token(args.token_file),
            endpoint=args.endpoint,
        )
        source = f"the Hub at revision {args.revision}"
        if manifest.revision != args.revision:
            err.print(f"revision {args.revision} is commit {manifest.revision}; pinned the commit")
    else:
        if args.repo is None:
            raise Gx10Error("--from-dir needs --repo NAME (the repository id to record)")
        if not is_full_sha(args.revision):
            raise Gx10Error(
                f"--revision {args.revision!r} must be a full commit sha (40 lowercase hex) with "
                "--from-dir: nothing can resolve a branch or tag for a directory"
            )
        with ByteProgress(err, "hashing") as bar:
            manifest = manifest_from_directory(
                args.from_dir,
                repo=args.repo,
                revision=args.revision,
                jobs=args.jobs,
                progress=bar,
            )
        source = f"the directory {args.from_dir.resolve()}"
    save_manifest(manifest, args.output, source=source)
    summary = _manifest_summary(manifest, args.output)
    if args.json:
        print_json(summary)
    else:
        print(
            f"wrote {args.output}: {manifest.repo} at {manifest.revision}, "
            f"{summary['files']} files ({summary['lfs_files']} LFS by sha256, "
            f"{summary['git_files']} by git blob sha1), {manifest.total_size / 1e9:.2f} GB"
        )
    return EXIT_OK


def _manifest_summary(manifest: Manifest, path: Path) -> dict[str, Any]:
    lfs = sum(1 for f in manifest.files if f.kind == "lfs")
    return {
        "path": str(path),
        "repo": manifest.repo,
        "revision": manifest.revision,
        "files": len(manifest.files),
        "lfs_files": lfs,
        "git_files": len(manifest.files) - lfs,
        "total_bytes": manifest.total_size,
    }


def _run_model_verify(args: argparse.Namespace) -> int:
    manifest = load_manifest(args.manifest)
    err = Console(stderr=True, highlight=False)
    with ByteProgress(err, "verifying") as bar:
        report = verify(
            args.directory,
            manifest,
            jobs=args.jobs,
            reverify=args.reverify,
            use_cache=not args.no_cache,
            progress=bar,
        )
    print_verify_report(err if args.json else Console(highlight=False), report)
    if args.json:
        print_json(report.to_dict())
    return EXIT_OK if report.ok else EXIT_FAILED


def _run_model_sync(args: argparse.Namespace) -> int:
    err = Console(stderr=True, highlight=False)
    lines = ProgressPrinter(err) if args.verbose else None
    with RunStatus(err, "model sync") as status:

        def on_event(event: dict[str, Any]) -> None:
            status(event)
            if lines is not None:
                lines(event)

        result = model_sync(
            args.inventory, reverify=args.reverify, limit=args.limit, on_event=on_event
        )
    print_sync_report(err if args.json else Console(highlight=False), result)
    if args.json:
        print_json(result.to_dict())
    if result.run.status == "canceled":
        return EXIT_INTERRUPTED
    return EXIT_OK if result.ok else EXIT_FAILED


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


# --- doctor ----------------------------------------------------------------------------------


def _add_doctor(
    commands: argparse._SubParsersAction[Parser],
    json_option: Parser,
) -> None:
    p = commands.add_parser(
        "doctor",
        parents=[json_option],
        help="read-only diagnosis of the known faults, each with its evidence and fix",
        description=(
            "Gather evidence on every node (playbooks/doctor.yml, read-only) and the head "
            "engine's counters (its /metrics, from this machine), and report each known fault "
            "with its evidence and fix. Exit 0 when no error is found, 2 when one is."
        ),
    )
    p.add_argument("-i", "--inventory", required=True, help="inventory file or directory")
    p.add_argument("-l", "--limit", help="only check nodes matching this pattern")
    p.add_argument(
        "-v", "--verbose", action="store_true", help="show the evidence play's progress on stderr"
    )
    p.add_argument(
        "--measure-bandwidth",
        action="store_true",
        help=(
            "first measure each rail between every pair of nodes (fabric.yml, tag "
            "fabric_bandwidth; ib_write_bw or iperf3 runs for a few seconds per rail; on cables "
            "the head and its worker) and judge every measured link too, a slow one named by "
            "its rail and both ends"
        ),
    )
    p.add_argument(
        "--api-key-file",
        type=Path,
        help=(
            "file holding a key to send with the head's /metrics request (default: the "
            "inventory's vllm_serve_api_key, which the API gateway accepts)"
        ),
    )
    p.set_defaults(handler=_run_doctor)


def _read_key_file(path: Path | None) -> str | None:
    """The key in --api-key-file, or None without the option."""
    if path is None:
        return None
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise Gx10Error(f"cannot read --api-key-file {path}: {exc}") from exc


def _run_doctor(args: argparse.Namespace) -> int:
    err = Console(stderr=True, highlight=False)
    api_key = _read_key_file(args.api_key_file)
    measured: dict[str, Any] = {}
    bandwidth = None
    if args.measure_bandwidth:
        bandwidth = doctor_collect.measure_bandwidth_report(
            args.inventory,
            limit=args.limit,
            on_event=ProgressPrinter(err) if args.verbose else None,
        )
        if bandwidth.extravars:
            measured["extravars"] = bandwidth.extravars
    evidences, plan, result = doctor_collect.collect(
        args.inventory,
        limit=args.limit,
        on_event=ProgressPrinter(err) if args.verbose else None,
        **measured,
    )
    if result.status == "canceled":
        return EXIT_INTERRUPTED
    if bandwidth is not None:
        evidences = bandwidth.attach(evidences)
    if api_key is None and (plan.get("gateway") or {}).get("enabled"):
        # The inventory's own key, as the pipeline's checks send it: the gateway wants a key
        # for /metrics too.
        from gx10.bench.nodes import load_cluster  # noqa: PLC0415 - ansible loads slowly

        api_key = load_cluster([args.inventory]).api_key or None
    evidences = doctor_collect.read_engine_metrics(evidences, plan, api_key=api_key)
    findings = diagnose(evidences, plan)
    if args.json:
        document = json.loads(findings_json(findings))
        document["nodes"] = {ev.node: _node_document(ev) for ev in evidences}
        document["artifact_dir"] = str(result.artifact_dir)
        print_json(document)
    else:
        print_findings(Console(highlight=False), findings)
    return EXIT_FAILED if has_errors(findings) else EXIT_OK


def _node_document(ev: Evidence) -> dict[str, Any]:
    """A node in doctor's JSON: whether it answered, and the engine counters read from it."""
    document: dict[str, Any] = {"reachable": ev.reachable}
    if ev.spec_decode is not None:
        document["spec_decode"] = {**ev.spec_decode.to_dict(), "url": ev.metrics_url}
    return document


# --- status ----------------------------------------------------------------------------------


def _add_status(
    commands: argparse._SubParsersAction[Parser],
    json_option: Parser,
) -> None:
    p = commands.add_parser(
        "status",
        parents=[json_option],
        help=(
            "is the service whole: each rank's container, rank, image, its pair supervision, "
            "and the head's health"
        ),
        description=(
            "Per node the serving container's state, rank and image; where the pair supervisor "
            "is installed, its state, restarts in the breaker's window, the last restart and its "
            "reason, the breaker, and the GID index per rail (current and pinned at the rank's "
            "start); with more than two nodes, each node's peers (the head's are every worker, a "
            "worker's the head) with what its agent last heard of each; and the head's /health "
            "as this machine sees it (read-only). Exit 0 only when every rank runs, the head is "
            "healthy and no breaker is open; 2 otherwise."
        ),
    )
    p.add_argument("-i", "--inventory", required=True, help="inventory file or directory")
    p.set_defaults(handler=_run_status)


def _run_status(args: argparse.Namespace) -> int:
    evidences, plan, result = doctor_collect.collect(args.inventory)
    if result.status == "canceled":
        return EXIT_INTERRUPTED
    state = cluster_status.judge(evidences, plan)
    if args.json:
        print_json(state.to_dict())
    else:
        cluster_status.print_status(Console(highlight=False), state)
    return EXIT_OK if state.ok else EXIT_FAILED


# --- shared ----------------------------------------------------------------------------------


def stdout_for(args: argparse.Namespace) -> contextlib.AbstractContextManager[object]:
    """With --json, send whatever the call prints (lab progress logs) to stderr."""
    if args.json:
        return contextlib.redirect_stdout(sys.stderr)
    return contextlib.nullcontext()


def print_json(document: Mapping[str, Any]) -> None:
    print(json.dumps(document, indent=2, default=str))


# --- smoke -----------------------------------------------------------------------------------


def _add_smoke(
    commands: argparse._SubParsersAction[Parser],
    json_option: Parser,
) -> None:
    p = commands.add_parser(
        "smoke",
        parents=[json_option],
        help="use a served model as a coding agent does (models, chat, stream, tool call)",
        description=(
            "Smoke-test an OpenAI-compatible vLLM endpoint with the official openai client. "
            "With -i the endpoint, model and API key come from the inventory (as "
            "playbooks/smoke.yml computes them; --endpoint and --model override). The API key "
            "comes from --api-key-file, else the inventory's vllm_serve_api_key, else "
            "OPENAI_API_KEY. --battery runs the tool-call battery instead (docs/BATTERY.md): "
            "exit 0 when every case passes, 2 when one fails."
        ),
    )
    p.add_argument(
        "-i",
        "--inventory",
        action="append",
        metavar="INV",
        help="the cluster's inventory: endpoint, model and key (repeatable, as ansible)",
    )
    p.add_argument(
        "--endpoint",
        help="the server, e.g. http://gx10-a:8000 (with or without /v1); needed without -i",
    )
    p.add_argument("--model", help="the served model name; needed without -i")
    p.add_argument("--api-key-file", type=Path, help="file holding the API key")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per request")
    p.add_argument(
        "--tool-choice",
        choices=("auto", "required"),
        default="auto",
        help="the tool-call check's tool_choice: auto (the model chooses the call, the server's "
        "parser finds it; the default) or required (the server constrains the output to a "
        "call: for a model that never chooses one, such as the lab engine's random weights)",
    )
    p.add_argument(
        "--battery",
        action="store_true",
        help="run the tool-call battery: parallel and streamed calls, nested and long "
        "arguments, tool_choice, reasoning, an agent loop, /v1/messages",
    )
    p.add_argument(
        "--case",
        dest="cases",
        action="extend",
        nargs="+",
        choices=battery.CASES,
        metavar="NAME",
        help=f"with --battery, only these cases (repeatable): {', '.join(battery.CASES)}",
    )
    p.set_defaults(handler=_run_smoke)


def _smoke_target(args: argparse.Namespace) -> tuple[str, str, str]:
    """The endpoint, model and API key to smoke-test (the key is never printed)."""
    key_file = _read_key_file(args.api_key_file)
    if args.inventory:
        from gx10.bench.nodes import load_cluster  # noqa: PLC0415 - ansible loads slowly

        cluster = load_cluster(args.inventory, need_api_key=key_file is None)
        key = key_file if key_file is not None else cluster.api_key
        key = key or os.environ.get("OPENAI_API_KEY", "")
        return args.endpoint or cluster.endpoint, args.model or cluster.model, key
    if not args.endpoint or not args.model:
        raise Gx10Error("gx10 smoke needs -i INV, or --endpoint URL and --model NAME")
    key = key_file if key_file is not None else os.environ.get("OPENAI_API_KEY", "")
    return args.endpoint, args.model, key


def _run_smoke(args: argparse.Namespace) -> int:
    if args.cases and not args.battery:
        raise Gx10Error("--case selects battery cases: add --battery")
    endpoint, model, key = _smoke_target(args)
    if args.battery:
        return _run_battery(args, endpoint, model, key)
    result = smoke.run(
        endpoint, model, api_key=key, timeout=args.timeout, tool_choice=args.tool_choice
    )
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        for check in result.checks:
            mark = "ok  " if check.ok else "FAIL"
            print(f"{mark} {check.name:<10} {check.seconds:6.2f} s  {check.detail}")
        print(f"{'OK' if result.ok else 'FAILED'}: {result.base_url} model {result.model}")
    return 0 if result.ok else 2


def _run_battery(args: argparse.Namespace, endpoint: str, model: str, key: str) -> int:
    result = battery.run(endpoint, model, api_key=key, timeout=args.timeout, cases=args.cases)
    if args.json:
        print_json(result.to_dict())
    else:
        print_battery(Console(highlight=False), result)
    return EXIT_OK if result.ok else EXIT_FAILED


_SUBCOMMANDS: tuple[AddCommand, ...] = (
    _add_provision,
    _add_model,
    _add_doctor,
    _add_status,
    _add_smoke,
    _add_bench,
    _add_clients,
    _add_keys,
    _add_metrics,
)


if __name__ == "__main__":
    raise SystemExit(main())

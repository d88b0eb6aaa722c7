"""`gx10 bench`: the subcommand's parser and handler (registered in gx10.cli._SUBCOMMANDS).

    gx10 bench -i INV [--run FILE] --out DIR [flags]        the cluster: caps, telemetry, safety
    gx10 bench --endpoint URL [--model NAME] [--api-key-file F] [--run FILE] --out DIR [flags]
    gx10 bench --report DIR

With -i the endpoint, model and API key come from the inventory (as playbooks/smoke.yml computes
them; --endpoint, --model, --api-key-file override), every node is locked for the run, the clock
caps of the matrix are set and restored, and nvidia-smi telemetry is recorded per case.

Exit codes: 0 every case ran; 2 some case failed or was skipped (recorded, the rest ran; a clock
sweep aborted on temperature skips the rest); 1 setup or usage error (invalid matrix,
unreachable endpoint, another run holding the controller's or a node's lock); 130 interrupted
(Ctrl-C; SIGTERM ends with its own status), the nodes' caps restored either way.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from gx10.errors import Gx10Error

EXIT_OK, EXIT_ERROR, EXIT_FAILED = 0, 1, 2
EXIT_TERMINATED = 128 + 15  # as a shell reports a process ended by SIGTERM


def add_parser(commands: Any, json_option: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "bench",
        parents=[json_option],
        help="benchmark the service (prompt lengths x concurrency x clock caps) and report",
        description=(
            "Benchmark an OpenAI-compatible vLLM endpoint with the reference method: unique "
            "prompts padded to exact token counts, streamed timings, results after every case "
            "(resumable), and an HTML report. With an inventory (-i) the nodes are locked for "
            "the run, clock caps are swept safely (cool-down before each case, abort above a "
            "limit, the original caps restored on every exit) and nvidia-smi telemetry gives "
            "power, temperature and tok/s/W per case; with a bare --endpoint only 'unlocked' "
            "cases run. The API key comes from --api-key-file, else the inventory's "
            "vllm_serve_api_key, else OPENAI_API_KEY."
        ),
    )
    p.add_argument(
        "-i",
        "--inventory",
        action="append",
        metavar="INV",
        help="the cluster's inventory: nodes, endpoint, model and key (repeatable, as ansible)",
    )
    p.add_argument(
        "--endpoint",
        help="base URL, e.g. http://gx10-a:8000 (a /v1 suffix is fine); with -i the default is "
        "the head's API, as playbooks/smoke.yml computes it",
    )
    p.add_argument(
        "--model",
        help="served model name (default: the first one listed; with -i, the inventory's "
        "vllm_serve_served_model_name)",
    )
    p.add_argument("--api-key-file", type=Path, help="file holding the API key")
    p.add_argument("--run", type=Path, help="run file (YAML): matrix and request settings")
    p.add_argument("--out", type=Path, help="results directory (rerun with it to resume)")
    p.add_argument("--report", type=Path, metavar="DIR", help="only rebuild DIR/report.html")
    p.add_argument("--prompt-lengths", help="comma-separated prompt tokens, e.g. 256,2048,32k")
    p.add_argument("--concurrency", help="comma-separated stream counts, e.g. 1,4,12")
    p.add_argument(
        "--clock-caps", help="comma-separated MHz or 'unlocked', e.g. 2000,2400,unlocked (needs -i)"
    )
    p.add_argument(
        "--cool-down-c",
        type=float,
        help="with -i: before each case wait until every node is below this (default 70)",
    )
    p.add_argument(
        "--abort-c",
        type=float,
        help="with -i: a node above this skips the rest of the run (default 84)",
    )
    p.add_argument(
        "--cool-down-timeout",
        type=float,
        metavar="SECONDS",
        help="with -i: a cool-down taking longer aborts the run (default 900)",
    )
    p.add_argument("--max-tokens", type=int, help="max_tokens per request (default 2048)")
    p.add_argument("--temperature", type=float, help="default 0.6")
    p.add_argument("--top-p", type=float, help="default 0.95")
    p.add_argument(
        "--thinking",
        help="chat_template_kwargs.thinking sent on every request: on, off, or a mode name "
        "(default on)",
    )
    p.add_argument("--max-num-seqs", type=int, help="the server's MAX_NUM_SEQS, if not exported")
    p.add_argument(
        "--allow-queueing",
        action="store_true",
        default=None,
        help="allow concurrency above max_num_seqs (measures the queue)",
    )
    p.add_argument(
        "--ignore-eos", action="store_true", default=None, help="every request runs to max_tokens"
    )
    p.add_argument(
        "--shared-prompts",
        action="store_true",
        help="do NOT make prompts unique (only to see what prefix-cache hits look like)",
    )
    p.add_argument("--prefill-ceiling", type=float, help="prefill tok/s flagged as a cache hit")
    p.add_argument("--timeout", type=float, help="seconds per request (default 3600)")
    p.add_argument("--no-report", action="store_true", help="do not build the report at the end")
    p.set_defaults(handler=run)


def _thinking(text: str | None) -> bool | str | None:
    if text is None:
        return None
    lowered = text.lower()
    if lowered in ("on", "true", "yes"):
        return True
    if lowered in ("off", "false", "no", "none"):
        return False
    return text


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "prompt_lengths": args.prompt_lengths,
        "concurrency": args.concurrency,
        "clock_caps": args.clock_caps,
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "thinking": _thinking(args.thinking),
        "max_num_seqs": args.max_num_seqs,
        "allow_queueing": args.allow_queueing,
        "ignore_eos": args.ignore_eos,
        "unique_prompts": False if args.shared_prompts else None,
        "prefill_ceiling_tps": args.prefill_ceiling,
        "request_timeout_s": args.timeout,
        "cool_down_c": args.cool_down_c,
        "abort_c": args.abort_c,
        "cool_down_timeout_s": args.cool_down_timeout,
    }


def run(args: argparse.Namespace) -> int:
    # Imported here: matplotlib and httpx stay out of every other gx10 command's start-up.
    from gx10.bench.client import Endpoint  # noqa: PLC0415
    from gx10.bench.clocks import Terminated  # noqa: PLC0415
    from gx10.bench.matrix import (  # noqa: PLC0415
        MatrixError,
        build_config,
        inventory_problems,
        load_run_file,
    )
    from gx10.bench.nodes import load_cluster  # noqa: PLC0415
    from gx10.bench.report import build_report  # noqa: PLC0415
    from gx10.bench.runner import run_bench  # noqa: PLC0415

    err = Console(stderr=True, highlight=False)
    if args.report is not None:
        if args.endpoint or args.out or args.inventory:
            raise Gx10Error("--report DIR only rebuilds a report; it takes no -i/--endpoint/--out")
        path = build_report(args.report)
        print(json.dumps({"report": str(path)}) if args.json else f"report: {path}")
        return EXIT_OK
    if args.out is None or not (args.endpoint or args.inventory):
        raise Gx10Error(
            "gx10 bench needs -i INV (or --endpoint URL) and --out DIR (or --report DIR)"
        )
    run_file = load_run_file(args.run) if args.run is not None else None
    config = build_config(run_file, overrides(args))
    problems = inventory_problems(config, bool(args.inventory))
    if problems:
        raise MatrixError("invalid bench matrix:\n  - " + "\n  - ".join(problems))
    key_file = None
    if args.api_key_file is not None:
        try:
            key_file = args.api_key_file.read_text().strip()
        except OSError as exc:
            raise Gx10Error(f"cannot read --api-key-file {args.api_key_file}: {exc}") from exc
    cluster = None
    if args.inventory:
        cluster = load_cluster(args.inventory, need_api_key=key_file is None)
        key = key_file if key_file is not None else cluster.api_key
        key = key or os.environ.get("OPENAI_API_KEY", "")
        endpoint = Endpoint.parse(
            args.endpoint or cluster.endpoint, key, args.model or cluster.model
        )
        nodes = ", ".join(n.describe() for n in cluster.nodes)
        err.print(f"cluster: {escape(nodes)}; endpoint {escape(endpoint.root)}")
    else:
        key = key_file if key_file is not None else os.environ.get("OPENAI_API_KEY", "")
        endpoint = Endpoint.parse(args.endpoint, key, args.model)
    try:
        outcome = run_bench(
            config,
            endpoint,
            args.out,
            console=err,
            command=["gx10", *sys.argv[1:]],
            cluster=cluster,
        )
    except Terminated:
        print(
            "gx10: terminated (SIGTERM); results so far are in the --out directory", file=sys.stderr
        )
        return EXIT_TERMINATED
    report = None if args.no_report else build_report(args.out)
    failed = outcome.failed
    flagged = [c["id"] for c in outcome.cases if c.get("flags")]
    if args.json:
        print(
            json.dumps(
                {
                    "out": str(args.out),
                    "report": str(report) if report else None,
                    "cases": len(outcome.cases),
                    "ran": outcome.ran,
                    "skipped": outcome.skipped,
                    "failed": [c["id"] for c in failed],
                    "flagged": flagged,
                    "notes": outcome.notes,
                    "aborted": outcome.aborted,
                    "restore": outcome.restore or None,
                },
                indent=2,
            )
        )
    else:
        print(
            f"{len(outcome.cases)} cases ({outcome.ran} run, {outcome.skipped} kept), "
            f"{len(failed)} failed, {len(flagged)} flagged; results in {args.out}"
            + (f"; report {report}" if report else "")
        )
        if outcome.aborted:
            print(f"clock sweep aborted: {outcome.aborted}")
    return EXIT_FAILED if failed else EXIT_OK

"""The `gx10` command.

Each subcommand is an `_add_<name>` function that builds its parser and sets `handler` to a
`_run_<name>` function; `_SUBCOMMANDS` is the one place they are registered. Handlers return an
exit code and leave rendering to `gx10.progress`.

Exit codes: 0 ok; 1 setup or usage error; 2 the playbook ran and failed; 3 `lab status` found
the lab not running (the LSB convention for "not running").
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn, Protocol, cast

import yaml
from rich.console import Console

from gx10 import __version__
from gx10.errors import Gx10Error
from gx10.progress import ProgressPrinter, print_summary
from gx10.provision import provision

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_FAILED = 2
EXIT_NOT_RUNNING = 3
EXIT_INTERRUPTED = 130

Handler = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on usage errors; 2 means "the playbook failed" here, so use 1."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except Gx10Error as exc:
        print(f"gx10: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("gx10: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gx10", description="Provision GB10 nodes into a vLLM service.")
    parser.add_argument("--version", action="version", version=f"gx10 {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    json_option = _Parser(add_help=False)
    json_option.add_argument(
        "--json", action="store_true", help="print a JSON document on stdout (progress on stderr)"
    )
    for add in _SUBCOMMANDS:
        add(commands, json_option)
    return parser


# --- provision -------------------------------------------------------------------------------


def _add_provision(
    commands: argparse._SubParsersAction[_Parser],
    json_option: _Parser,
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
        _print_json(result.to_dict())
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


# --- lab -------------------------------------------------------------------------------------


class _LabStatus(Protocol):
    @property
    def running(self) -> bool: ...

    def to_dict(self) -> Mapping[str, Any]: ...

    def summary_lines(self) -> list[str]: ...


class _LabApi(Protocol):
    def up(self) -> _LabStatus: ...

    def down(self) -> None: ...

    def status(self) -> _LabStatus: ...


def _add_lab(
    commands: argparse._SubParsersAction[_Parser],
    json_option: _Parser,
) -> None:
    lab = commands.add_parser("lab", help="the two-node docker lab that stands in for GB10 nodes")
    actions = lab.add_subparsers(title="actions", metavar="ACTION", required=True)
    for name, handler, text in (
        ("up", _run_lab_up, "start the lab and wait until it is reachable"),
        ("down", _run_lab_down, "stop and remove the lab"),
        ("status", _run_lab_status, "show the lab; exit 0 only if it is running"),
    ):
        actions.add_parser(name, parents=[json_option], help=text).set_defaults(handler=handler)


def _run_lab_up(args: argparse.Namespace) -> int:
    with _stdout_for(args):
        status = _lab().up()
    _print_lab_status(args, status)
    return EXIT_OK


def _run_lab_down(args: argparse.Namespace) -> int:
    with _stdout_for(args):
        _lab().down()
    if args.json:
        _print_json({"ok": True})
    else:
        print("lab is down")
    return EXIT_OK


def _run_lab_status(args: argparse.Namespace) -> int:
    with _stdout_for(args):
        status = _lab().status()
    _print_lab_status(args, status)
    return EXIT_OK if status.running else EXIT_NOT_RUNNING


def _lab() -> _LabApi:
    # Imported on use: the lab pulls in docker tooling that provision does not need.
    try:
        module = importlib.import_module("gx10.lab")
    except ModuleNotFoundError as exc:
        if exc.name not in ("gx10.lab",):
            raise
        raise Gx10Error("the lab is not available: gx10.lab is not installed") from exc
    missing = [name for name in ("up", "down", "status") if not hasattr(module, name)]
    if missing:
        raise Gx10Error(f"the lab is not available: gx10.lab has no {', '.join(missing)}")
    return cast(_LabApi, module)


def _print_lab_status(args: argparse.Namespace, status: _LabStatus) -> None:
    if args.json:
        _print_json(status.to_dict())
    else:
        for line in status.summary_lines():
            print(line)


# --- shared ----------------------------------------------------------------------------------


def _stdout_for(args: argparse.Namespace) -> contextlib.AbstractContextManager[object]:
    """With --json, send whatever the call prints (lab progress logs) to stderr."""
    if args.json:
        return contextlib.redirect_stdout(sys.stderr)
    return contextlib.nullcontext()


def _print_json(document: Mapping[str, Any]) -> None:
    print(json.dumps(document, indent=2, default=str))


_SUBCOMMANDS: tuple[
    Callable[[argparse._SubParsersAction[_Parser], _Parser], None],
    ...,
] = (_add_provision, _add_lab)


if __name__ == "__main__":
    raise SystemExit(main())

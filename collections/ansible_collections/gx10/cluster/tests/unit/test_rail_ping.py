# SPDX-License-Identifier: Apache-2.0
"""The jumbo ping over every rail: targets, the ping command line, retries, and the module.

The module is run by a real ansible-playbook on localhost with a fake `ping` (a script that
records its arguments and answers as the test says), so the task the two roles share is what is
tested, not a copy of it.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.gx10.cluster.plugins.module_utils import rail_ping
from ansible_collections.gx10.cluster.tests.unit.localhost_playbook import run_module

RAILS: list[dict[str, Any]] = [
    {
        "name": "rail0",
        "netdev": "enp1s0f0np0",
        "address": "192.168.100.10",
        "cidr": "192.168.100.10/24",
        "peers": {"gx10-b": "192.168.100.11", "gx10-c": "192.168.100.12"},
        "ping_payload": 8972,
    },
    {
        "name": "rail1",
        "netdev": "enP2p1s0f0np0",
        "address": "192.168.101.10",
        "cidr": "192.168.101.10/24",
        "peers": {"gx10-b": "192.168.101.11", "gx10-c": "192.168.101.12"},
        "ping_payload": 8972,
    },
]


def test_every_rail_to_every_peer_in_plan_order() -> None:
    found = rail_ping.targets(RAILS)
    assert [(t["rail"], t["peer"], t["peer_address"]) for t in found] == [
        ("rail0", "gx10-b", "192.168.100.11"),
        ("rail0", "gx10-c", "192.168.100.12"),
        ("rail1", "gx10-b", "192.168.101.11"),
        ("rail1", "gx10-c", "192.168.101.12"),
    ]
    assert {t["payload"] for t in found} == {8972}
    assert [t["peer"] for t in rail_ping.targets(RAILS, ["gx10-c"])] == ["gx10-c", "gx10-c"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"ping_payload": None}, "rail0: ping_payload is missing"),
        ({"ping_payload": 0}, "rail0: ping_payload 0 is not a positive byte count"),
        ({"ping_payload": True}, "rail0: ping_payload True is not a positive byte count"),
        ({"netdev": ""}, "rail0: netdev is missing"),
        ({"peers": ["gx10-b"]}, "rail0: peers ['gx10-b'] is not a mapping"),
    ],
)
def test_an_incomplete_rail_is_named(change: dict[str, Any], message: str) -> None:
    with pytest.raises(rail_ping.RailPingError, match=message.replace("[", r"\[")):
        rail_ping.targets([{**RAILS[0], **change}])


def test_the_command_never_fragments_and_fills_one_frame() -> None:
    target = rail_ping.targets(RAILS)[2]
    assert rail_ping.ping_argv(target, count=2, reply_timeout=3, executable="/bin/ping") == [
        "/bin/ping",
        "-M",
        "do",
        "-s",
        "8972",
        "-c",
        "2",
        "-W",
        "3",
        "-I",
        "enP2p1s0f0np0",
        "192.168.101.11",
    ]


@pytest.mark.parametrize(
    ("rc", "stdout", "stderr", "message"),
    [
        (0, "PING x\n\nrtt min/avg/max/mdev = 0.1/0.1/0.1/0.0 ms\n", "", "rtt min/avg"),
        (1, "PING x\n", "ping: local error: message too long, mtu=1500\n", "ping: local error"),
        (1, "PING x\n1 packets transmitted, 0 received\n\n", "", "1 packets transmitted"),
        (2, "", "", "no answer"),
    ],
)
def test_what_ping_said(rc: int, stdout: str, stderr: str, message: str) -> None:
    assert rail_ping.said(rc, stdout, stderr).startswith(message)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_unanswered_pairs_are_retried_until_the_settle_time_and_no_longer() -> None:
    calls: list[list[str]] = []
    clock = Clock()

    def run(argv: list[str]) -> tuple[int, str, str]:
        calls.append(argv)
        # rail1 to gx10-b answers from its third try; rail0 to gx10-c never does.
        tried = sum(1 for c in calls if c[-1] == argv[-1])
        if (argv[-1] == "192.168.101.11" and tried < 3) or argv[-1] == "192.168.100.12":
            return 1, "PING\n1 packets transmitted, 0 received\n", ""
        return 0, "rtt min/avg/max/mdev = 0.1/0.1/0.1/0.0 ms\n", ""

    results = rail_ping.ping_all(
        rail_ping.targets(RAILS), run, settle=5, clock=clock, sleep=clock.sleep
    )
    by_address = {r["peer_address"]: r for r in results}
    assert by_address["192.168.101.11"]["ok"]
    assert by_address["192.168.101.11"]["attempts"] == 3
    assert by_address["192.168.100.11"]["attempts"] == 1  # an answered pair is not pinged again
    assert not by_address["192.168.100.12"]["ok"]
    assert by_address["192.168.100.12"]["attempts"] == 6  # tries at 0..5 s, then judged
    assert clock.now == 5.0
    assert set(clock.sleeps) == {1.0}
    assert rail_ping.unanswered("gx10-a", results) == [
        "rail0 from gx10-a enp1s0f0np0 192.168.100.10 to gx10-c 192.168.100.12: "
        "1 packets transmitted, 0 received"
    ]


def test_without_settle_the_first_answer_is_judged() -> None:
    results = rail_ping.ping_all(
        rail_ping.targets(RAILS), lambda argv: (1, "", "connect: Network is unreachable")
    )
    assert [r["attempts"] for r in results] == [1, 1, 1, 1]
    assert {r["message"] for r in results} == {"connect: Network is unreachable"}


# --- the module, through ansible-playbook --------------------------------------------------------

FAKE_PING = """#!/bin/sh
# A fake iputils ping: records its arguments; refuses frames to {refused}.
echo "$*" >> "{log}"
for last; do :; done
if [ "$last" = "{refused}" ]; then
  echo "PING $last"
  echo "ping: local error: message too long, mtu=1500" >&2
  exit 1
fi
echo "rtt min/avg/max/mdev = 0.050/0.050/0.050/0.000 ms"
"""


def _play(tmp_path: Path, refused: str, module_args: dict[str, Any]) -> dict[str, Any]:
    log = tmp_path / "ping.log"
    fake = tmp_path / "ping"
    fake.write_text(FAKE_PING.format(log=log, refused=refused))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    result = run_module(
        tmp_path, "gx10.cluster.rail_ping", {**module_args, "executable": str(fake)}
    )
    result["argv"] = log.read_text().splitlines()
    return result


def test_the_module_reports_every_pair_and_never_fails_for_one(tmp_path: Path) -> None:
    got = _play(
        tmp_path, "192.168.101.12", {"rails": RAILS, "count": 2, "host": "gx10-a", "settle": 0}
    )
    assert got["changed"] is False
    assert [r["ok"] for r in got["results"]] == [True, True, True, False]
    assert got["unanswered"] == [
        "rail1 from gx10-a enP2p1s0f0np0 192.168.101.10 to gx10-c 192.168.101.12: "
        "ping: local error: message too long, mtu=1500"
    ]
    assert got["argv"][0] == "-M do -s 8972 -c 2 -W 2 -I enp1s0f0np0 192.168.100.11"


def test_the_module_refuses_an_incomplete_rail(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="rail0: ping_payload is missing"):
        _play(tmp_path, "", {"rails": [{**RAILS[0], "ping_payload": None}]})

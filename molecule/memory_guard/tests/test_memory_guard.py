"""testinfra: the memory guard as the lab nodes show it after converge."""

from __future__ import annotations

import json

import testinfra

TOOL = "/usr/local/sbin/gx10-memory-guard"
LOG = "/var/log/gx10/memory-guard.jsonl"
PREFER = "^(vllm|VLLM::.*|pt_main_thread|python[0-9.]*)$"


def _argv(host: testinfra.host.Host, unit: str) -> list[str]:
    pid = host.check_output(f"systemctl show -p MainPID --value {unit}").strip()
    assert pid not in ("", "0"), f"{unit} has no main process"
    return host.check_output(f"tr '\\0' '\\n' < /proc/{pid}/cmdline").splitlines()


def _records(host: testinfra.host.Host) -> list[dict[str, object]]:
    text = host.file(LOG).content_string if host.file(LOG).exists else ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_earlyoom_runs_the_rendered_options(nodes: list[testinfra.host.Host]) -> None:
    for host in nodes:
        service = host.service("earlyoom.service")
        assert service.is_enabled
        assert service.is_running
        argv = _argv(host, "earlyoom.service")
        assert argv[0] == "/usr/bin/earlyoom"
        # Each option and each regex arrives as its own argument, quotes gone (systemd's split).
        assert argv[argv.index("-m") + 1] == "4,2"
        assert argv[argv.index("-s") + 1] == "100,100"
        assert argv[argv.index("-r") + 1] == "60"
        assert argv[argv.index("--prefer") + 1] == PREFER
        assert "gx10-pair" in argv[argv.index("--avoid") + 1]
        assert argv[argv.index("-N") + 1] == TOOL
        log = host.check_output("journalctl -u earlyoom -b --no-pager -n 50")
        assert "Preferring to kill process names that match regex" in log
        default = host.file("/etc/default/earlyoom").content_string
        assert "EARLYOOM_ARGS=" in default


def test_the_hook_is_installed_and_records_a_kill_with_evidence(
    nodes: list[testinfra.host.Host],
) -> None:
    for host in nodes:
        tool = host.file(TOOL)
        assert (tool.user, tool.mode) == ("root", 0o755)
        dropin = host.file("/etc/systemd/system/earlyoom.service.d/gx10.conf").content_string
        assert "DynamicUser=no" in dropin
        before = len(_records(host))
        # As earlyoom runs it after a kill: no argument, the victim in the environment.
        host.check_output(
            f"EARLYOOM_PID=4242 EARLYOOM_NAME=vllm EARLYOOM_UID=0 GX10_MEMORY_GUARD_CONFIG="
            f"/etc/gx10/memory-guard.json {TOOL}"
        )
        records = _records(host)
        assert len(records) == before + 1
        kill = records[-1]
        assert kill["kind"] == "kill"
        assert kill["victim"] == {"pid": 4242, "name": "vllm", "uid": 0}
        memory = kill["memory"]
        assert isinstance(memory, dict)
        assert memory["mem_available_mib"] > 0
        assert kill["top_rss"], kill
        journal = host.check_output("journalctl -t gx10-memory-guard -b --no-pager -n 20")
        assert "earlyoom killed vllm (pid 4242" in journal


def test_the_pressure_watcher_runs_under_its_own_name(nodes: list[testinfra.host.Host]) -> None:
    for host in nodes:
        service = host.service("gx10-memory-pressure.service")
        assert service.is_enabled
        assert service.is_running
        pid = host.check_output("systemctl show -p MainPID --value gx10-memory-pressure.service")
        assert host.file(f"/proc/{pid.strip()}/comm").content_string.strip() == "gx10-memguard"


def test_the_drop_before_a_launch_writes_its_level_and_records_it(
    nodes: list[testinfra.host.Host],
) -> None:
    for host in nodes:
        host.check_output(f"{TOOL} drop-caches")
        # The lab's drop_caches is a file (test equipment; the inventory says why).
        assert host.file("/run/gx10-sim/drop_caches").content_string == "3\n"
        drop = _records(host)[-1]
        assert drop["kind"] == "drop-caches"
        assert drop["ok"] is True
        assert drop["file"] == "/run/gx10-sim/drop_caches"

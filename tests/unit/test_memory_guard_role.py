"""The memory_guard role's inputs and files: its defaults are the settings table's, its templates
render earlyoom's file, the drop-in and the watcher's unit, and the supervised rank unit drops
the page cache before it starts exactly when the role publishes the command."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import jinja2
import yaml

from gx10._collection import load as module_utils

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "memory_guard"
RANK_UNIT = ROOT / "roles" / "vllm_supervisor" / "templates" / "gx10-vllm-rank.service.j2"
memory_guard = module_utils("memory_guard")


def render(path: Path, **variables: Any) -> dict[str, dict[str, list[str]]]:
    """A unit-like file as {section: {key: [values in order]}} ("" for keys before a section)."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True)
    env.filters["dirname"] = lambda p: str(Path(p).parent)
    env.filters["join"] = lambda items, sep="": sep.join(items)
    text = env.from_string(path.read_text()).render(ansible_managed="managed", **variables)
    units: dict[str, dict[str, list[str]]] = {"": {}}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            units[section] = {}
            continue
        key, _, value = line.partition("=")
        units[section].setdefault(key, []).append(value)
    return units


def test_the_role_defaults_are_the_settings_tables() -> None:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    for key, setting in memory_guard.SETTINGS.items():
        if setting.variable == memory_guard.DROP_CACHES_VAR:
            # A cluster variable (the serve stage's), read with its default by vars/main.yml.
            assert setting.variable not in defaults
            continue
        assert defaults[setting.variable] == setting.default, key
        assert setting.variable in options, key
    settings = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__memory_guard_settings"]
    assert set(settings) == set(memory_guard.SETTINGS)
    assert defaults["memory_guard_tool"] == memory_guard.DEFAULT_TOOL
    assert defaults["memory_guard_log_file"] == memory_guard.DEFAULT_LOG_FILE


def test_earlyoom_reads_the_rendered_arguments_as_separate_words() -> None:
    args = memory_guard.earlyoom_args({}, memory_guard.DEFAULT_TOOL)
    unit = render(ROLE / "templates" / "earlyoom.default.j2", __memory_guard_args=args)
    [line] = unit[""]["EARLYOOM_ARGS"]
    assert line.startswith('"')
    assert line.endswith('"')
    # systemd's EnvironmentFile strips the double quotes; ExecStart's $EARLYOOM_ARGS then splits
    # on whitespace honouring (and removing) the single quotes.
    argv = shlex.split(line[1:-1])
    assert argv[argv.index("--prefer") + 1] == memory_guard.DEFAULT_PREFER
    assert argv[argv.index("--avoid") + 1] == memory_guard.DEFAULT_AVOID
    assert argv[argv.index("-N") + 1] == memory_guard.DEFAULT_TOOL


def test_the_dropin_runs_the_hook_as_root_with_only_its_directories_writable() -> None:
    common = {
        "memory_guard_config_path": "/etc/gx10/memory-guard.json",
        "memory_guard_log_file": "/var/log/gx10/memory-guard.jsonl",
    }
    dropin = ROLE / "templates" / "earlyoom-gx10.conf.j2"
    service = render(dropin, __memory_guard_pair_event_file=None, **common)["Service"]
    assert service["DynamicUser"] == ["no"]
    assert service["ReadWritePaths"] == ["-/var/log/gx10"]
    assert service["Environment"] == ["GX10_MEMORY_GUARD_CONFIG=/etc/gx10/memory-guard.json"]
    supervised = render(
        dropin, __memory_guard_pair_event_file="/var/lib/gx10/pair/memory-event.json", **common
    )["Service"]
    assert supervised["ReadWritePaths"] == ["-/var/log/gx10", "-/var/lib/gx10/pair"]


def test_the_watcher_unit_runs_the_tool_at_boot() -> None:
    unit = render(
        ROLE / "templates" / "gx10-memory-pressure.service.j2",
        memory_guard_tool="/usr/local/sbin/gx10-memory-guard",
        memory_guard_config_path="/etc/gx10/memory-guard.json",
    )
    assert unit["Service"]["ExecStart"] == ["/usr/local/sbin/gx10-memory-guard watch"]
    assert unit["Service"]["Restart"] == ["always"]
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]


RANK_VARS = {
    "vllm_supervisor_python": "/usr/bin/python3",
    "vllm_supervisor_lib_dir": "/usr/local/lib/gx10/pair",
    "vllm_supervisor_config_path": "/etc/gx10/pair.json",
    "vllm_supervisor_rank_path": "/etc/gx10/rank.json",
    "vllm_supervisor_docker": "/usr/bin/docker",
    "vllm_supervisor_container": "gx10-vllm",
    "vllm_supervisor_stop_timeout": 60,
}


def test_the_rank_unit_drops_the_page_cache_before_each_start_when_asked() -> None:
    drop = ["/usr/local/sbin/gx10-memory-guard", "drop-caches"]
    unit = render(RANK_UNIT, memory_guard_drop_caches_argv=drop, **RANK_VARS)
    assert unit["Service"]["ExecStartPre"] == [
        "-/usr/bin/docker rm -f gx10-vllm",
        "-/usr/local/sbin/gx10-memory-guard drop-caches",
    ]
    off = render(RANK_UNIT, memory_guard_drop_caches_argv=[], **RANK_VARS)
    assert off["Service"]["ExecStartPre"] == ["-/usr/bin/docker rm -f gx10-vllm"]

# SPDX-License-Identifier: Apache-2.0
"""Unit tests for module_utils/memory_guard.py, its filters and its place in the validate stage."""

from __future__ import annotations

import shlex
from typing import Any

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gx10.cluster.plugins.filter.memory_guard import FilterModule
from ansible_collections.gx10.cluster.plugins.module_utils import memory_guard
from ansible_collections.gx10.cluster.plugins.module_utils.cluster_plan import (
    NODE_VARS,
    validate_cluster,
)

TOOL = "/usr/local/sbin/gx10-memory-guard"
TWO = {"head": ["gx10-a"], "workers": ["gx10-b"]}


def test_the_defaults_are_valid_and_render_earlyoom_17_options() -> None:
    assert memory_guard.validate_settings({}) == []
    args = memory_guard.earlyoom_args({}, TOOL)
    # systemd splits $EARLYOOM_ARGS honouring and removing quotes (replace_env_argv:
    # EXTRACT_RELAX|EXTRACT_UNQUOTE); without backslashes that is POSIX shell splitting.
    assert shlex.split(args) == [
        "-m", "4,2",
        "-s", "100,100",
        "-r", "60",
        "--prefer", memory_guard.DEFAULT_PREFER,
        "--avoid", memory_guard.DEFAULT_AVOID,
        "-N", TOOL,
    ]  # fmt: skip


def test_values_render_as_given() -> None:
    args = memory_guard.earlyoom_args(
        {
            "mem_term_percent": 6.5,
            "mem_kill_percent": 3,
            "swap_term_percent": 20,
            "swap_kill_percent": 10,
            "report_interval": 0,
            "prefer_regex": "^(vllm|VLLM::)",
            "warn_percent": 10,
        },
        "/opt/hook",
    )
    argv = shlex.split(args)
    assert argv[:6] == ["-m", "6.5,3", "-s", "20,10", "-r", "0"]
    assert argv[argv.index("--prefer") + 1] == "^(vllm|VLLM::)"
    assert argv[-2:] == ["-N", "/opt/hook"]


@pytest.mark.parametrize(
    ("values", "fragments"),
    [
        ({"mem_term_percent": 0}, ["memory_guard_mem_term_percent is 0", "from 1 to 50"]),
        ({"mem_term_percent": "4"}, ["memory_guard_mem_term_percent is '4' (str)", "a number"]),
        ({"mem_term_percent": True}, ["memory_guard_mem_term_percent is True (bool)"]),
        ({"swap_term_percent": 101}, ["memory_guard_swap_term_percent is 101", "0 to 100"]),
        ({"report_interval": 1.5}, ["memory_guard_report_interval is 1.5", "a whole number"]),
        ({"drop_caches_level": 4}, ["memory_guard_drop_caches_level is 4", "from 1 to 3"]),
        ({"enabled": "yes"}, ["memory_guard_enabled is 'yes' (str)", "true or false"]),
        ({"drop_caches": 1}, ["gx10_drop_caches_before_launch is 1 (int)", "true or false"]),
        ({"prefer_regex": "^(a b)$"}, ["memory_guard_prefer_regex is '^(a b)$'", "without spaces"]),
        ({"avoid_regex": "^a\\.b$"}, ["memory_guard_avoid_regex", "[.] for a literal dot"]),
        ({"prefer_regex": "^$(reboot)"}, ["memory_guard_prefer_regex is '^$(reboot)'"]),
        ({"prefer_regex": "^(vllm"}, ["memory_guard_prefer_regex is '^(vllm', which does not"]),
        (
            {"mem_term_percent": 4, "mem_kill_percent": 5},
            ["memory_guard_mem_kill_percent is 5 but must be at most memory_guard_mem_term"],
        ),
        (
            {"swap_term_percent": 10, "swap_kill_percent": 50},
            ["memory_guard_swap_kill_percent is 50 but must be at most"],
        ),
        (
            {"mem_term_percent": 8, "warn_percent": 8},
            ["memory_guard_mem_term_percent is 8 but must be below memory_guard_warn_percent"],
        ),
        ({"mem_term": 4}, ["'mem_term' is not a memory guard setting"]),
    ],
)
def test_each_bad_value_is_named_with_its_fix(values: dict[str, Any], fragments: list[str]) -> None:
    errors = memory_guard.validate_settings(values)
    assert len(errors) == 1, errors
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    assert "set " in errors[0] or "lower " in errors[0] or "use one of" in errors[0]


def test_a_rule_between_two_values_waits_for_both_to_be_valid() -> None:
    errors = memory_guard.validate_settings({"mem_term_percent": 90, "mem_kill_percent": 95})
    assert len(errors) == 2  # each out of range; no comparison of two bad values
    assert all("from " in error for error in errors)


def test_the_tool_config_carries_paths_and_the_watchers_thresholds() -> None:
    config = memory_guard.tool_config(
        {"drop_caches_level": 1, "watch_interval": 2, "psi_full_threshold": 5},
        pair_event_file=None,
        drop_caches_file="/run/x",
    )
    assert config == {
        "schema": 1,
        "log_file": "/var/log/gx10/memory-guard.jsonl",
        "log_max_bytes": 10485760,
        "pair_event_file": None,
        "drop_caches_file": "/run/x",
        "drop_caches_level": 1,
        "watch": {"interval": 2, "psi_full_threshold": 5, "warn_percent": 8},
    }
    with pytest.raises(memory_guard.MemoryGuardError, match="the log file is 'log'"):
        memory_guard.tool_config({}, log_file="log")


def test_the_filters_fail_the_task_naming_every_problem() -> None:
    filters = FilterModule().filters()
    assert filters["earlyoom_args"]({}, TOOL).endswith(f"-N {TOOL}")
    with pytest.raises(AnsibleFilterError) as caught:
        filters["earlyoom_args"]({"mem_term_percent": 0, "prefer_regex": "a b"})
    message = str(caught.value)
    assert "memory_guard_mem_term_percent is 0" in message
    assert "memory_guard_prefer_regex is 'a b'" in message
    with pytest.raises(AnsibleFilterError, match="expects a mapping"):
        filters["earlyoom_args"]("-m 4")
    with pytest.raises(AnsibleFilterError, match="must be an absolute plain path"):
        filters["earlyoom_args"]({}, "hook")
    with pytest.raises(AnsibleFilterError, match="memory_guard_warn_percent is 95"):
        filters["memory_guard_config"]({"warn_percent": 95})
    assert filters["memory_guard_config"]({}, pair_event_file=None)["pair_event_file"] is None


def test_the_validate_stage_refuses_a_bad_value_on_any_node() -> None:
    assert set(memory_guard.variables()) <= set(NODE_VARS)
    hostvars: dict[str, dict[str, Any]] = {
        "gx10-a": {"gx10_allow_unauthenticated": True},
        "gx10-b": {},
    }
    assert validate_cluster(TWO, hostvars) == []
    hostvars["gx10-b"] = {
        "memory_guard_mem_term_percent": 70,
        "gx10_drop_caches_before_launch": "no",
    }
    errors = validate_cluster(TWO, hostvars)
    assert len(errors) == 2, errors
    assert "gx10_drop_caches_before_launch is 'no'" in errors[0]
    assert "memory_guard_mem_term_percent is 70" in errors[1]
    assert all(error.endswith("(host gx10-b)") for error in errors)
    hostvars["gx10-b"] = {"memory_guard_mem_term_percent": None}  # null: the default
    assert validate_cluster(TWO, hostvars) == []

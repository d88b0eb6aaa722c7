# SPDX-License-Identifier: Apache-2.0
"""gx10.cluster.checks: every failure reported with node, value, expectation and fix."""

from __future__ import annotations

import pytest

from ansible_collections.gx10.cluster.plugins.module_utils.checks import as_bool, judge


def test_all_failures_are_reported_in_order() -> None:
    results, failures = judge(
        "gx10-b",
        [
            {"name": "memory", "ok": False, "value": "900 MB", "expected": "1024 MB", "fix": "a"},
            {"name": "gpu", "ok": True, "value": "GB10"},
            {"name": "disk", "ok": "False", "value": "1 GB", "fix": "free space"},
        ],
    )
    assert [r["ok"] for r in results] == [False, True, False]
    assert failures == [
        "gx10-b: memory: found 900 MB, expected 1024 MB. Fix: a",
        "gx10-b: disk: found 1 GB. Fix: free space",
    ]


def test_passing_checks_report_nothing() -> None:
    _, failures = judge("gx10-a", [{"name": "arch", "ok": True, "value": "aarch64"}])
    assert failures == []


@pytest.mark.parametrize("value", ["ture", "maybe", None, 2])
def test_an_unclear_ok_is_an_error_not_a_pass(value: object) -> None:
    with pytest.raises(ValueError, match="ok must be a boolean"):
        as_bool(value, "arch")


def test_a_check_needs_a_name() -> None:
    with pytest.raises(ValueError, match="needs a name"):
        judge("gx10-a", [{"ok": True}])

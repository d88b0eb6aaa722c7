"""Refused plans at unit level (issue 24): the bad values the end-to-end tests once applied to the
lab, each refused by the validate play before any node is touched.

Each run is what the end-to-end test ran: gx10.provision() with the same playbook, tags and extra
variables, on a temporary copy of inventories/lab with the same bad value in group_vars,
host_vars or hosts.yml. The validate play (playbooks/validate.yml, which site.yml and every stage
playbook import first) runs on the controller and reads the nodes' inventory variables only, no
facts; a refusal there fails the play's only host, localhost, and the run ends before any play
that has a node in it. So the lab is not needed, and the end-to-end tests' "changes nothing"
checks of node state (addresses, files, rank containers, the pair's config) have nothing to see
here: no node is ever contacted, which each test asserts (the recap names localhost alone).
tests/e2e/test_network.py keeps one bad plan on the lab, with its node snapshot, as the proof of
that wiring.

The copy's nodes are pointed at addresses that are never routed (192.0.2.0/24, TEST-NET-1) with
ssh: the validate play reads neither the connection nor the address, and a run that got past it
by mistake reaches nothing, least of all a lab that happens to be up on this machine.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gx10 import ProvisionResult, keys, provision

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "inventories" / "lab"
VALIDATE_PLAY = "Validate the inventory"
VALIDATE_TASK = "Check the inventory shape and the rail plan"
NOWHERE = {"gx10-a": "192.0.2.10", "gx10-b": "192.0.2.11"}

ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")

pytestmark = [
    pytest.mark.heavy,  # long tests: make unit hands this file out first
    pytest.mark.skipif(
        not ANSIBLE_PLAYBOOK.exists(), reason="needs ansible-playbook next to the test interpreter"
    ),
]


@pytest.fixture(scope="module")
def lab_copy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """inventories/lab copied once per module, its nodes pointed nowhere; the runs use this
    checkout as the project home."""
    inventory = tmp_path_factory.mktemp("lab") / "inventory"
    shutil.copytree(LAB, inventory)
    hosts_yml = inventory / "hosts.yml"
    hosts = yaml.safe_load(hosts_yml.read_text(encoding="utf-8"))
    hosts["all"]["vars"]["ansible_connection"] = "ssh"
    for group in hosts["all"]["children"]["gx10"]["children"].values():
        for name in group["hosts"]:
            group["hosts"][name] = {**(group["hosts"][name] or {}), "ansible_host": NOWHERE[name]}
    hosts_yml.write_text(yaml.safe_dump(hosts), encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GX10_HOME", str(ROOT))
        yield inventory


def variant(
    lab_copy: Path,
    tmp_path: Path,
    group_vars: dict[str, Any] | None = None,
    host_vars: dict[str, Any] | None = None,
) -> Path:
    """A copy of lab_copy with values added to group_vars/all.yml and host_vars files, as
    tests/e2e/test_network.py's bad_inventory() writes them."""
    inventory = tmp_path / "inventory"
    shutil.copytree(lab_copy, inventory)
    all_yml = inventory / "group_vars" / "all.yml"
    values = yaml.safe_load(all_yml.read_text(encoding="utf-8")) or {}
    all_yml.write_text(yaml.safe_dump({**values, **(group_vars or {})}), encoding="utf-8")
    for host, variables in (host_vars or {}).items():
        (inventory / "host_vars").mkdir(exist_ok=True)
        (inventory / "host_vars" / f"{host}.yml").write_text(yaml.safe_dump(variables))
    return inventory


def run(inventory: Path, tmp_path: Path, playbook: str, **kwargs: Any) -> ProvisionResult:
    return provision(inventory, playbook, artifact_dir=tmp_path / "runner", **kwargs)


def refused_in_validation(result: ProvisionResult) -> str:
    """The validate play's message, once the run is shown to have stopped there, on localhost,
    with no node contacted and nothing changed."""
    assert not result.ok
    assert set(result.hosts) == {"localhost"}, f"a node was in the run: {result.hosts}"
    assert result.changed_total == 0
    (task,) = result.failed_tasks
    assert (task.host, task.play, task.task) == ("localhost", VALIDATE_PLAY, VALIDATE_TASK), task
    assert task.message.startswith("Inventory validation failed"), task.message
    return task.message


def test_the_lab_copy_passes_validation(lab_copy: Path, tmp_path: Path) -> None:
    """The copy as it is validates: each refusal below comes from its bad value alone."""
    result = run(lab_copy, tmp_path, "validate.yml")
    assert result.ok, result.failed_tasks
    assert set(result.hosts) == {"localhost"}


# --- from tests/e2e/test_network.py::test_bad_plan_fails_clearly_and_changes_nothing ----------

DEFAULT_RAILS = [
    {"name": "rail0", "netdev": "enp1s0f0np0", "subnet": "192.168.100.0/24"},
    {"name": "rail1", "netdev": "enP2p1s0f0np0", "subnet": "192.168.101.0/24"},
]


def rails_with(index: int, **changes: Any) -> list[dict[str, Any]]:
    rails = [dict(rail) for rail in DEFAULT_RAILS]
    rails[index].update(changes)
    return rails


# Each case: group_vars, host_vars, and fragments the message must hold: the variable, the bad
# value, the fix. "two rails sharing a subnet" stays on the lab too (the wiring's proof).
BAD_PLANS: dict[str, tuple[dict[str, Any], dict[str, Any], list[str]]] = {
    "two rails sharing a subnet": (
        {"gx10_rails": rails_with(1, subnet="192.168.100.0/24")},
        {},
        [
            "gx10_rails[1].subnet '192.168.100.0/24' (rail rail1) is the same subnet as "
            "gx10_rails[0].subnet '192.168.100.0/24'",
            "give each rail its own, non-overlapping subnet, e.g. 192.168.101.0/24 for rail1",
        ],
    ),
    "overlapping rail subnets": (
        {"gx10_rails": rails_with(1, subnet="192.168.100.128/25")},
        {},
        ["gx10_rails[1].subnet '192.168.100.128/25' (rail rail1) overlaps", "non-overlapping"],
    ),
    "address outside its subnet": (
        {"gx10_rails": rails_with(0, addresses={"gx10-b": "10.0.0.11"})},
        {},
        [
            "gx10_rails[0].addresses['gx10-b'] (rail rail0) is 10.0.0.11, outside subnet "
            "192.168.100.0/24",
            "use an address in 192.168.100.1..192.168.100.254",
        ],
    ),
    "network address": (
        {"gx10_rails": rails_with(0, addresses={"gx10-b": "192.168.100.0"})},
        {},
        [
            "gx10_rails[0].addresses['gx10-b'] (rail rail0) is 192.168.100.0, the network address",
            "use an address in 192.168.100.1..192.168.100.254",
        ],
    ),
    "broadcast address": (
        {},
        {"gx10-b": {"gx10_node_id": 255}},
        [
            "gx10_node_id 255 on host gx10-b gives 192.168.100.255 on gx10_rails[0] (rail rail0), "
            "the broadcast address",
            "choose a gx10_node_id between 1 and 254",
        ],
    ),
    "address duplicated across nodes": (
        {"gx10_rails": rails_with(1, addresses={"gx10-b": "192.168.101.10"})},
        {},
        [
            "gx10-a (gx10_node_id 10 on host gx10-a) and gx10-b "
            "(gx10_rails[1].addresses['gx10-b']) both get address 192.168.101.10",
            "change one of them",
        ],
    ),
    "rail on the management interface (declared)": (
        {"gx10_rails": rails_with(1, netdev="eth0")},
        {"gx10-b": {"gx10_mgmt_interface": "eth0"}},
        [
            "gx10_mgmt_interface on host gx10-b is 'eth0', which is also gx10_rails[1].netdev",
            "use a different netdev for the rail",
        ],
    ),
    "MTU 1000": (
        {"gx10_rail_mtu": 1000},
        {},
        ["gx10_rail_mtu is 1000, out of range: allowed 1280..9216; use 9000"],
    ),
    "MTU 9300": (
        {"gx10_rail_mtu": 9300},
        {},
        ["gx10_rail_mtu is 9300, out of range: allowed 1280..9216; use 9000"],
    ),
    # A node's address comes from gx10_rails[i].addresses, else from its gx10_node_id: a node
    # drops out of the plan when the explicit map names a host that is not a cluster node.
    "node missing from the plan": (
        {
            "gx10_rails": rails_with(
                1, addresses={"gx10-a": "192.168.101.10", "gx10-c": "192.168.101.11"}
            )
        },
        {},
        [
            "gx10_rails[1].addresses (rail rail1) names host 'gx10-c', which is not in "
            "groups['head'] or groups['workers']",
            "fix the host name or remove the entry",
        ],
    ),
}


@pytest.mark.parametrize("case", list(BAD_PLANS))
def test_a_bad_rail_plan_is_refused_in_the_validate_play(
    lab_copy: Path, tmp_path: Path, case: str
) -> None:
    group_vars, host_vars, fragments = BAD_PLANS[case]
    inventory = variant(lab_copy, tmp_path, group_vars, host_vars)

    message = refused_in_validation(run(inventory, tmp_path, "site.yml"))

    for fragment in fragments:
        assert fragment in message, f"{case}: {fragment!r} not in:\n{message}"


# --- from tests/e2e/test_site.py::test_bad_inventory_stops_before_any_node_is_touched ---------


def test_two_heads_are_refused_in_the_validate_play(lab_copy: Path, tmp_path: Path) -> None:
    inventory = variant(lab_copy, tmp_path)
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())
    # Two heads: gx10-b moves from workers to head.
    children = hosts["all"]["children"]["gx10"]["children"]
    children["head"]["hosts"]["gx10-b"] = children["workers"]["hosts"]["gx10-b"]
    del children["workers"]
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))

    message = refused_in_validation(run(inventory, tmp_path, "site.yml"))

    assert "head" in message
    assert "gx10-b" in message


# --- from tests/e2e/test_serve.py and tests/e2e/test_supervise.py: serve.yml with extra vars ---

# Each case: extra variables, and fragments the message must hold.
BAD_SERVE_VARS: dict[str, tuple[dict[str, Any], list[str]]] = {
    # test_serve.py::test_tensor_parallel_mismatch_is_refused_before_any_restart
    "tensor parallel mismatch": (
        {"vllm_serve_tensor_parallel_size": 4},
        ["vllm_serve_tensor_parallel_size is 4, but 2 node(s) x 1 GPU(s) = 2"],
    ),
    # test_serve.py::test_a_profile_that_does_not_fit_memory_is_refused_before_any_change:
    # twice the profile's context, 2M tokens of the lab checkpoint's 17,200 B of KV per token, is
    # 33.6 GiB, beyond vLLM's share of a 24 GiB lab node (0.835 x 24 = 20.0).
    "a profile that does not fit memory": (
        {"vllm_serve_max_model_len": 2 * 1048576},
        [
            "memory on host gx10-a: profile dspark-0731 v1 does not fit",
            "KV 33.6 (2097152 tokens, vllm_serve_max_model_len (inventory)",
            "x 17200 B, vllm_serve_kv_bytes_per_token (inventory)",
            "> available 20.0 GiB",
            "lower vllm_serve_max_model_len to at most",
        ],
    ),
    # test_supervise.py::test_bad_supervisor_timings_are_refused_before_any_node_changes
    "bad supervisor timings": (
        {
            "vllm_supervisor_enabled": True,
            "vllm_supervisor_probe_interval": 5,
            "vllm_supervisor_breaker_window": 30,
        },
        ["vllm_supervisor_probe_interval is 5", "vllm_supervisor_breaker_window is 30"],
    ),
    # test_serve.py::test_every_missing_input_is_named_before_any_restart's bad boot phase
    # timeouts, which the serve stage refused after the network and model stages had run: a run
    # (site.yml, serve.yml) now stops in the validate play, naming them on both nodes (an extra
    # variable is every host's).
    "bad boot phase timeouts": (
        {"vllm_serve_phase_timeouts": {"compile": 3600, "compiling": 60, "api": 0}},
        [
            "vllm_serve_phase_timeouts on host gx10-a: 'compiling' is no phase",
            "vllm_serve_phase_timeouts on host gx10-b: 'compiling' is no phase",
            "api: 0 is not a number of seconds >= 1",
        ],
    ),
    "a compile cache outside any absolute path": (
        {"vllm_serve_cache_root": "cache", "vllm_serve_cache_keep": -1},
        ["vllm_serve_cache_root on host gx10-a is 'cache'", "vllm_serve_cache_keep on host"],
    ),
}


@pytest.mark.parametrize("case", list(BAD_SERVE_VARS))
def test_a_bad_serving_value_is_refused_in_the_validate_play(
    lab_copy: Path, tmp_path: Path, case: str
) -> None:
    extravars, fragments = BAD_SERVE_VARS[case]

    message = refused_in_validation(run(lab_copy, tmp_path, "serve.yml", extravars=extravars))

    for fragment in fragments:
        assert fragment in message, f"{case}: {fragment!r} not in:\n{message}"


# --- from tests/e2e/test_gateway.py::test_a_gateway_without_the_service_key_is_refused_... ----


def test_a_gateway_without_the_service_key_is_refused_in_the_validate_play(
    lab_copy: Path, tmp_path: Path
) -> None:
    """The gateway set where a user sets it (group_vars/gx10.yml, as the e2e module's inventory
    has it), then the service key emptied on the command line."""
    inventory = variant(lab_copy, tmp_path)
    (inventory / "group_vars" / "gx10.yml").write_text(
        yaml.safe_dump({"gx10_gateway_enabled": True, "vllm_serve_api_key": "unit-service-key"})
    )

    result = run(inventory, tmp_path, "serve.yml", extravars={"vllm_serve_api_key": ""})

    assert "vllm_serve_api_key is not set" in refused_in_validation(result)


# --- from tests/e2e/test_model.py::test_a_bad_manifest_fails_on_the_controller ----------------


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"path": "../escape.json"}, "'..' component, which could escape the model directory"),
        ({"sha256": "abc"}, "is not a sha256"),
    ],
)
def test_a_bad_manifest_is_refused_in_the_validate_play(
    lab_copy: Path, tmp_path: Path, change: dict[str, str], expected: str
) -> None:
    """The validate stage reads the manifest for the memory budget, so it refuses it before the
    model stage would."""
    document = yaml.safe_load((lab_copy / "files" / "model-manifest.yml").read_text())
    shard = next(f for f in document["files"] if f["kind"] == "lfs")
    shard.update(change)
    bad = tmp_path / "manifest.yml"
    bad.write_text(yaml.safe_dump(document, sort_keys=False))

    result = run(
        lab_copy, tmp_path, "site.yml", tags=["model"], extravars={"gx10_model_manifest": str(bad)}
    )

    message = refused_in_validation(result)
    assert message.startswith("Inventory validation failed (1 problem)"), message
    assert "gx10_model_manifest is" in message
    assert expected in message


# --- secure by default (issue 26) ----------------------------------------------------------------


def test_an_engine_open_to_the_network_is_refused_in_the_validate_play(
    lab_copy: Path, tmp_path: Path
) -> None:
    """The lab's gateway turned off, and nothing said of the network: the run stops before any
    node is touched, naming both ways out."""
    inventory = variant(lab_copy, tmp_path, group_vars={"gx10_gateway_enabled": False})
    message = refused_in_validation(run(inventory, tmp_path, "site.yml"))
    assert message.startswith("Inventory validation failed (1 problem)"), message
    assert "gx10_gateway_enabled is false: the engine would answer on every address" in message
    assert "gx10_gateway_enabled: true" in message
    assert "gx10 keys init -i INVENTORY" in message
    assert "gx10_allow_unauthenticated: true" in message


def test_the_real_node_inventory_serves_behind_the_gateway_with_the_key_init_makes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """inventories/gx10 as a new owner gets it (its nodes pointed nowhere): refused until `gx10
    keys init` has written the service key beside it, then valid, the key read from that file."""
    monkeypatch.setenv("GX10_HOME", str(ROOT))
    inventory = tmp_path / "gx10"
    shutil.copytree(
        ROOT / "inventories" / "gx10", inventory, ignore=shutil.ignore_patterns(".secrets")
    )
    hosts_yml = inventory / "hosts.yml"
    hosts = yaml.safe_load(hosts_yml.read_text(encoding="utf-8"))
    for group in hosts["all"]["children"]["gx10"]["children"].values():
        for name in group["hosts"]:
            group["hosts"][name] = {**(group["hosts"][name] or {}), "ansible_host": NOWHERE[name]}
    hosts_yml.write_text(yaml.safe_dump(hosts), encoding="utf-8")

    message = refused_in_validation(run(inventory, tmp_path, "site.yml"))
    assert message.startswith("Inventory validation failed (1 problem)"), message
    assert "gx10_gateway_enabled is true but vllm_serve_api_key is not set" in message
    assert "gx10 keys init -i INVENTORY" in message

    made = keys.init_service_key(inventory)
    assert made.path == inventory / ".secrets" / "service.key"
    accepted = run(inventory, tmp_path, "validate.yml")
    assert accepted.ok, accepted.failed_tasks
    assert set(accepted.hosts) == {"localhost"}

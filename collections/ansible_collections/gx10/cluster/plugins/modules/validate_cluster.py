# SPDX-License-Identifier: Apache-2.0
# Documentation only: the work is done on the controller by plugins/action/validate_cluster.py.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: validate_cluster
short_description: Validate the whole gx10 inventory and compute the cluster rail plan
version_added: 0.1.0
description:
  - Checks the C(head) and C(workers) groups and the C(gx10_*) variables of every node before
    anything on any node is changed, and reports B(all) problems at once. Each message names the
    variable, the bad value, the host where relevant, and the fix.
  - Checks groups (exactly one head, at least one worker, no host in both), the variable
    C(gx10_rails) (non-empty list of C({name, netdev, subnet}) with optional C(addresses)), unique
    rail names and netdevs, IPv4 subnets in CIDR notation without host bits, no longer than /30,
    no two rails on the same or overlapping subnets, C(gx10_node_id) (positive, unique integers),
    every node address inside its subnet and unique, C(gx10_rail_mtu) in 1280..9216, that no
    rail uses a node's C(gx10_mgmt_interface), and C(gx10_model_dir) (an absolute, normalised
    path other than C(/), without C(:)).
  - Checks the API gateway on the head when C(gx10_gateway_enabled) is true (the api_gateway
    role); C(gx10_gateway_address) an IP address, C(gx10_serve_port) and
    C(gx10_gateway_engine_port) TCP ports that differ, C(vllm_serve_api_key) set (only whether it
    is set is read, never its value), and C(gx10_gateway_tls_cert) with C(gx10_gateway_tls_key)
    given together as absolute paths of files on the controller that hold a PEM certificate and
    its unencrypted private key, valid now. C(gx10_serve_port) is checked in any case.
  - Checks the head's smoke-stage battery switches too, C(gx10_smoke_battery) (a bool) and
    C(gx10_smoke_battery_cases) (a list of the battery's case names), and the tool-call check's
    C(gx10_smoke_tool_choice) (C(auto) or C(required)).
  - Checks the serving settings (module_utils/serve_plan.py) - C(vllm_serve_profile) and every
    C(vllm_serve_<setting>) override resolve the same on every node; the flags they render, with
    C(vllm_serve_extra_args), pass the parser model of the profile's vLLM
    (module_utils/vllm_cli.py), naming the variable of each unknown, removed or repeated flag, bad
    choice or bad value; each
    node's unified-memory budget (module_utils/memory_budget.py) with C(gx10_node_memory_gib),
    C(gx10_node_reserve_gib) and C(vllm_serve_shm_size) fits, or the error names the numbers. The
    weights share is the manifest's size (C(gx10_model_manifest)) when the file exists, else the
    catalog size of the profile's checkpoint.
  - On success returns the cluster plan (ranks, rail addresses, peers, C(master_addr), the
    checkpoint directory C(model_dir), C(supervised), the API C(gateway), and C(serving) - the
    profile, its image and vLLM version, the expected draft acceptance, the speculative config
    every rank renders (what C(gx10 doctor) judges the draft against), and per node the memory
    budget's inputs and result), the same value as the P(gx10.cluster.rail_plan#filter) filter.
  - Defaults when a variable is undefined or null. C(gx10_rails) is rail0 C(enp1s0f0np0)
    C(192.168.100.0/24) and rail1 C(enP2p1s0f0np0) C(192.168.101.0/24); C(gx10_rail_mtu) is
    C(9000); C(gx10_node_id) is 10 for the head and 11, 12, ... for the workers in inventory order;
    C(gx10_model_dir) is C(/srv/models/DeepSeek-V4-Flash-0731).
  - C(gx10_rails), C(gx10_rail_mtu) and C(gx10_model_dir) are cluster-wide; a node that sees a
    different value than the first node is an error.
  - Run it once (with C(run_once) set), in the first play, before any other task.
options:
  groups:
    description:
      - Inventory groups to read; only C(head) and C(workers) are used.
      - Defaults to the inventory's C(groups).
    type: dict
  hostvars:
    description:
      - Variables per host; only the C(gx10_*) variables of hosts in C(head) and C(workers) are
        read.
      - Defaults to the inventory's C(hostvars).
    type: dict
attributes:
  action:
    description: Runs as an action plugin on the controller.
    support: full
  check_mode:
    description: Read-only; runs the same in check mode.
    support: full
  diff_mode:
    description: Changes nothing, so there is no diff.
    support: none
  platform:
    description: Runs on the controller only and never connects to the target host.
    platforms: all
author:
  - gx10 maintainers
"""

EXAMPLES = r"""
- name: Validate groups, rails, node ids and addresses (in a play on localhost)
  gx10.cluster.validate_cluster:
  register: __gx10_validation

- name: Validate an inventory given as data (for example in a test)
  gx10.cluster.validate_cluster:
    groups:
      head: [gx10-a]
      workers: [gx10-b]
    hostvars:
      gx10-a: {}
      gx10-b: {gx10_mgmt_interface: enP7s7}
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
msg:
  description:
    - On failure, a first line C(Inventory validation failed) with the number of problems, then
      one line per problem.
    - On success, a one-line summary.
  returned: always
  type: str
  sample: "Inventory validation failed (1 problem):\n - groups['workers'] is missing or empty: ..."
errors:
  description: Every problem found, one message each.
  returned: failure
  type: list
  elements: str
plan:
  description: The cluster plan.
  returned: success
  type: dict
  contains:
    head:
      description: The head node (rank 0).
      type: str
      sample: gx10-a
    workers:
      description: The worker nodes, ranks 1..N in inventory order.
      type: list
      elements: str
      sample: [gx10-b]
    nodes:
      description: Every node as C({name, rank, role, node_id}); role is C(head) or C(worker).
      type: list
      elements: dict
      sample: [{name: gx10-a, rank: 0, role: head, node_id: 10}]
    mtu:
      description: MTU of every rail interface.
      type: int
      sample: 9000
    rails:
      description:
        - One entry per rail, C({name, netdev, subnet, prefix, addresses}); C(addresses) maps each
          node to its IPv4 address on this rail.
      type: list
      elements: dict
      sample:
        - name: rail0
          netdev: enp1s0f0np0
          subnet: 192.168.100.0/24
          prefix: 24
          addresses: {gx10-a: 192.168.100.10, gx10-b: 192.168.100.11}
    topology:
      description:
        - How the rails are cabled (C(gx10_topology), validated); C(direct), two nodes with a
          cable per rail, or C(switch), every node's rail k on the switch's subnet k
          (docs/TOPOLOGY.md).
      type: str
      sample: direct
    peers:
      description:
        - For each node, every other node's address on each rail (node -> peer -> rail -> IP).
          On C(switch) every other node is a peer on every rail.
      type: dict
      sample: {gx10-a: {gx10-b: {rail0: 192.168.100.11, rail1: 192.168.101.11}}}
    hosts:
      description:
        - Per node, C({rank, role, node_id, rails}); each rail is
          C({name, netdev, address, cidr, peers}) with C(peers) mapping the other nodes to their
          address on that rail.
      type: dict
      sample:
        gx10-a:
          rank: 0
          role: head
          node_id: 10
          rails:
            - name: rail0
              netdev: enp1s0f0np0
              address: 192.168.100.10
              cidr: 192.168.100.10/24
              peers: {gx10-b: 192.168.100.11}
    master_addr:
      description: The head's address on the first rail (vLLM C(--master-addr)).
      type: str
      sample: 192.168.100.10
    model_dir:
      description:
        - The checkpoint directory on every node (C(gx10_model_dir), validated). The preflight,
          model_sync and vllm_serve roles default to it.
      type: str
      sample: /srv/models/DeepSeek-V4-Flash-0731
    supervised:
      description: Whether the pair supervises itself (C(vllm_supervisor_enabled)).
      type: bool
      sample: false
    gateway:
      description:
        - The API gateway on the head, C({enabled, address, port, engine_host, engine_port, tls,
          tls_cert, tls_key, scheme}). C(port) is the API port clients use (C(gx10_serve_port));
          the engine listens on C(engine_host):C(engine_port), which is 127.0.0.1 and
          C(gx10_gateway_engine_port) with the gateway, else 0.0.0.0 and C(port).
      type: dict
      sample:
        enabled: true
        address: 0.0.0.0
        port: 8000
        engine_host: 127.0.0.1
        engine_port: 8001
        tls: false
        tls_cert: ""
        tls_key: ""
        scheme: http
"""

# SPDX-License-Identifier: Apache-2.0
# Documentation for the action plugin of the same name (it runs on the controller only).

DOCUMENTATION = r"""
---
module: checks
short_description: Judge named checks and report every failure with its value and fix
description:
  - Evaluates a list of checks whose outcome the caller computed (from facts or probes) and fails
    once, listing every failed check with the node, the value found, the value expected and
    the fix. Nothing runs on the node; the task never reports a change.
options:
  checks:
    description: The checks, each with C(name), C(ok) (boolean), C(value), C(expected), C(fix).
    type: list
    elements: dict
    required: true
  node:
    description: The node named in messages; defaults to C(inventory_hostname).
    type: str
  title:
    description: What the checks are, for the summary line (for example C(preflight)).
    type: str
author:
  - gx10 maintainers
"""

EXAMPLES = r"""
- name: Judge this node
  gx10.cluster.checks:
    title: preflight
    checks:
      - name: architecture
        ok: "{{ ansible_facts.architecture == 'aarch64' }}"
        value: "{{ ansible_facts.architecture }}"
        expected: aarch64
        fix: run on a GB10 node
"""

RETURN = r"""
checks:
  description: The checks as judged.
  returned: success
  type: list
  elements: dict
failures:
  description: One line per failed check (node, check, value, expected, fix).
  returned: failure
  type: list
  elements: str
"""

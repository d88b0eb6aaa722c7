#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
"""Module gx10.cluster.host_kernel_info: the kernel build and its known faults (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_kernel_info
short_description: Read the node's kernel build and judge it against the known-bad builds table
description:
  - Reads the kernel release (C(<proc_root>/sys/kernel/osrelease), what C(uname -r) prints), the
    kernel command line, C(CmaTotal) and C(CmaFree) from C(<proc_root>/meminfo) and
    C(<sys_root>/kernel/kexec_crash_size).
  - Returns the faults of the collection's known-bad builds table
    (C(plugins/module_utils/host_faults.py)) that the node shows, each with its evidence, the
    fix and the field reports it follows. It never fails for a fault; the caller judges.
  - Read-only; supports check mode.
options:
  ignore:
    description: Fault ids the inventory has accepted (not reported); an unknown id is an error.
    type: list
    elements: str
    default: []
  proc_root:
    description: Where procfs is mounted (tests point this at a fake tree).
    type: path
    default: /proc
  sys_root:
    description: Where sysfs is mounted (tests point this at a fake tree).
    type: path
    default: /sys
author:
  - gx10 maintainers
"""

EXAMPLES = r"""
- name: Read the kernel build
  gx10.cluster.host_kernel_info:
  register: kernel
"""

RETURN = r"""
host:
  description: >-
    C(schema) (1), C(release), C(cmdline) (list of arguments), C(cma_total_kb), C(cma_free_kb),
    C(kexec_crash_size); a value that could not be read is null.
  returned: always
  type: dict
faults:
  description: >-
    The known faults the node shows, each C(id), C(summary), C(evidence), C(fix), C(sources).
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gx10.cluster.plugins.module_utils.host_faults import (
    KNOWN_FAULTS,
    known_faults,
    read_host,
    unknown_ids,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "ignore": {"type": "list", "elements": "str", "default": []},
            "proc_root": {"type": "path", "default": "/proc"},
            "sys_root": {"type": "path", "default": "/sys"},
        },
        supports_check_mode=True,
    )
    params = module.params
    unknown = unknown_ids(params["ignore"])
    if unknown:
        known = ", ".join(fault.id for fault in KNOWN_FAULTS)
        module.fail_json(msg=f"ignore: {', '.join(unknown)} is no known fault (known: {known})")
    host = read_host(params["proc_root"], params["sys_root"])
    module.exit_json(changed=False, host=host, faults=known_faults(host, params["ignore"]))


if __name__ == "__main__":
    main()

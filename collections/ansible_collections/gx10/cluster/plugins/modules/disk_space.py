#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
"""Module gx10.cluster.disk_space: free space where a path is, or will be, created."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: disk_space
short_description: Free and total space of the filesystem that holds a path, existing or not
description:
  - Walks up from I(path) to the nearest existing directory and reports C(statvfs) of it, so the
    space for a directory can be checked before the directory exists. Read-only; check mode safe.
options:
  path:
    description: An absolute path.
    type: path
    required: true
author:
  - gx10 maintainers
"""

EXAMPLES = r"""
- name: Space where the checkpoint goes
  gx10.cluster.disk_space:
    path: /srv/models/DeepSeek-V4-Flash-0731
  register: space
"""

RETURN = r"""
probed:
  description: The existing directory that was measured.
  returned: always
  type: str
free_bytes:
  description: Bytes available to an unprivileged writer (f_bavail x f_frsize).
  returned: always
  type: int
total_bytes:
  description: Size of the filesystem.
  returned: always
  type: int
device:
  description: The filesystem's device number (C(st_dev)); two paths on one filesystem share it.
  returned: always
  type: int
"""

import os
from typing import Any

from ansible.module_utils.basic import AnsibleModule


def nearest_existing(path: str) -> str:
    probe = os.path.normpath(path)
    while not os.path.isdir(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    return probe


def space(path: str) -> dict[str, Any]:
    probe = nearest_existing(path)
    st = os.statvfs(probe)
    return {
        "probed": probe,
        "free_bytes": st.f_bavail * st.f_frsize,
        "total_bytes": st.f_blocks * st.f_frsize,
        "device": os.stat(probe).st_dev,
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={"path": {"type": "path", "required": True}},
        supports_check_mode=True,
    )
    path = module.params["path"]
    if not os.path.isabs(path):
        module.fail_json(msg=f"path must be absolute, got {path!r}")
    module.exit_json(changed=False, **space(path))


if __name__ == "__main__":
    main()

#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
"""Module gx10.cluster.gateway_usage: per-key usage from the API gateway's access log."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gateway_usage
short_description: Per-key requests and tokens from the API gateway's access log (read-only)
description:
  - Reads the API gateway's access log (the api_gateway role's HAProxy, one line per request
    with the key's name, the status and the tokens the response reported) from the systemd
    journal of I(unit), or from the file I(path), and sums it per key name. Changes nothing.
  - A key's requests are split into served (2xx, 3xx), limited (429, over its limit of requests
    in flight) and failed (any other 4xx, 5xx); requests without a known key (refused with 401)
    are counted under C(-). Tokens are those the responses reported (prompt and completion);
    C(counted) says how many responses reported any (a chat stream reports them only when the
    client asks, with C(stream_options.include_usage)).
options:
  unit:
    description: The gateway's systemd unit, whose journal holds the access log.
    type: str
    default: gx10-gateway.service
  since:
    description:
      - Only lines from this time on, as journalctl's C(--since) takes it (C(-24h),
        C(2026-12-01), C(yesterday)); empty for all the journal holds.
    type: str
    default: ""
  path:
    description: Read this log file instead of the journal (I(since) does not apply).
    type: path
attributes:
  check_mode:
    description: Reads only; the same in check mode.
    support: full
  diff_mode:
    description: Nothing changes, so there is no diff.
    support: none
author:
  - gx10 maintainers
"""

EXAMPLES = r"""
- name: Usage per key over the last day
  gx10.cluster.gateway_usage:
    since: -24h
  register: usage
"""

RETURN = r"""
keys:
  description: >-
    Per key name (C(-) for requests without a known key): requests, ok, limited, failed,
    tokens_in, tokens_out, counted, bytes, first and last (the log's times).
  returned: always
  type: list
  elements: dict
lines:
  description: Log lines read.
  returned: always
  type: int
unread:
  description: Lines that were not access lines (HAProxy's own messages).
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gx10.cluster.plugins.module_utils.gateway_usage import summarize


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "default": "gx10-gateway.service"},
            "since": {"type": "str", "default": ""},
            "path": {"type": "path"},
        },
        supports_check_mode=True,
    )
    params = module.params
    if params["path"]:
        try:
            with open(params["path"], encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except OSError as exc:
            module.fail_json(msg=f"cannot read the gateway's log {params['path']}: {exc}")
    else:
        argv = [
            module.get_bin_path("journalctl", required=True),
            "--unit",
            params["unit"],
            "--output",
            "cat",
            "--no-pager",
            "--quiet",
        ]
        if params["since"]:
            argv += ["--since", params["since"]]
        rc, text, err = module.run_command(argv)
        if rc != 0:
            module.fail_json(
                msg=f"journalctl could not read {params['unit']}'s journal"
                + (f" since {params['since']!r}" if params["since"] else "")
                + f": {err.strip() or f'exit {rc}'} (--since takes journalctl's times: -24h, "
                "2026-12-01, yesterday)"
            )
    module.exit_json(changed=False, **summarize(text.splitlines()).as_dict())


if __name__ == "__main__":
    main()

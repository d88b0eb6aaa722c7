"""Every test run's first step: the lab inventories' service keys, as `gx10 lab up` makes them.

The labs run the API gateway as real nodes do, and their inventories read the service key from
`.secrets/service.key` beside them (`gx10 keys init`). Unit tests of both test directories read
these inventories; a fresh clone has no key until the lab (or this) makes one. `init` keeps a key
that is there and is safe to run from several workers at once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

LAB_INVENTORIES = ("lab", "lab4", "lab-vllm")


@pytest.fixture(scope="session", autouse=True)
def lab_service_keys() -> None:
    from gx10 import keys  # noqa: PLC0415 - ansible-runner is slow to import

    root = Path(__file__).resolve().parent
    for name in LAB_INVENTORIES:
        keys.init_service_key(root / "inventories" / name)

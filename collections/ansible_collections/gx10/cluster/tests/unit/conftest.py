# SPDX-License-Identifier: Apache-2.0
"""Make ``ansible_collections.gx10.cluster`` importable from the repository checkout."""

from __future__ import annotations

import sys
from pathlib import Path

# tests/unit -> tests -> cluster -> gx10 -> ansible_collections -> collections
COLLECTIONS_ROOT = Path(__file__).resolve().parents[5]

if str(COLLECTIONS_ROOT) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS_ROOT))

"""Re-export the shared lab fixtures for this scenario."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from lab_fixtures import head, nodes, workers  # noqa: F401  (pytest fixtures)

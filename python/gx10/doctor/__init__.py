"""`gx10 doctor`: read-only diagnosis of the known faults, each with its evidence and fix.

`rules` holds the evidence model and the rules (pure Python); `render` shows the findings.
"""

from gx10.doctor.render import findings_json, print_findings
from gx10.doctor.rules import (
    ContainerEvidence,
    Evidence,
    Finding,
    RailEvidence,
    diagnose,
    has_errors,
)

__all__ = [
    "ContainerEvidence",
    "Evidence",
    "Finding",
    "RailEvidence",
    "diagnose",
    "findings_json",
    "has_errors",
    "print_findings",
]

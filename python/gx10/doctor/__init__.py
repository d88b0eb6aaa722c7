"""`gx10 doctor`: read-only diagnosis of the known faults, each with its evidence and fix.

`rules` holds the evidence model and the rules (pure Python); `pair` the pair supervisor's report
(`gx10-pair status --json`) as evidence; `render` shows the findings.
"""

from gx10.doctor.pair import PairReport
from gx10.doctor.render import findings_json, print_findings
from gx10.doctor.rules import (
    BandwidthLink,
    ContainerEvidence,
    Evidence,
    Finding,
    RailEvidence,
    diagnose,
    has_errors,
)

__all__ = [
    "BandwidthLink",
    "ContainerEvidence",
    "Evidence",
    "Finding",
    "PairReport",
    "RailEvidence",
    "diagnose",
    "findings_json",
    "has_errors",
    "print_findings",
]

"""`gx10 bench`: benchmark an OpenAI-compatible vLLM endpoint the way the reference notes did
(FIELD_NOTES section 5), with unique exact-length prompts, streaming timings and a report.

matrix: what to run (defaults, run file, flags, validation); client: the wire (limits, counters,
prompts, one streamed request); metrics: figures and cache-hit flags; runner: the run (lock,
resume, progress); results: the results files and the run's outcome; guard: the nodes' side of
a run with an inventory (clock sessions, limits, telemetry); report: HTML and markdown.
"""

from gx10.bench.matrix import Case, MatrixError, RunConfig, build_config, load_run_file
from gx10.bench.results import RunOutcome
from gx10.bench.runner import LockHeldError, run_bench

__all__ = [
    "Case",
    "LockHeldError",
    "MatrixError",
    "RunConfig",
    "RunOutcome",
    "build_config",
    "load_run_file",
    "run_bench",
]

"""The `vllm` entry point: parse, pick the rank's process, report a fatal error as vLLM does."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from .cli import parse_args, validate_serve_args
from .env import SimEnv
from .errors import EXIT_OK, EXIT_USAGE, SimFatal
from .processes import Head, Stop, Worker
from .tokenizer import use_tokenizer


def report_fatal(error: SimFatal) -> int:
    sys.stdout.flush()
    sys.stderr.write(
        "Traceback (most recent call last):\n"
        '  File "/usr/local/bin/vllm", line 8, in <module>\n'
        "    sys.exit(main())\n"
        f"{error.exc_type}: {error.message}\n"
    )
    sys.stderr.flush()
    return error.code


def main(argv: Sequence[str] | None = None) -> int:
    env = SimEnv.from_env(os.environ)
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv, env.version)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    stop = Stop()
    stop.install()
    try:
        problems = env.problems()
        if problems:
            raise SimFatal("ValueError", "[gx10-sim] " + "; ".join(problems))
        validate_serve_args(args)
        use_tokenizer(os.environ.get("GX10_SIM_TOKENIZER") or None)
        process: Head | Worker = Worker(args, env, stop) if args.headless else Head(args, env, stop)
        return process.run()
    except SimFatal as error:
        return report_fatal(error)
    except InterruptedError:
        return EXIT_OK

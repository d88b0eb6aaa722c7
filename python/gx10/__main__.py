"""`python -m gx10`: the same CLI as the `gx10` entry point (used by playbooks/smoke.yml)."""

import sys

from gx10.cli import main

sys.exit(main())

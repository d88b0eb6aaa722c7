"""`python -m gx10.lab.simulators.vllm_sim serve ...`; `python3 -m vllm_sim` beside the package."""

import sys

from .entrypoint import main

sys.exit(main())

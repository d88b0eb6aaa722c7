#!/bin/sh
# Runs once inside the image while it is built: `vllm` on PATH, as in the real image.
set -eu
chmod 0755 /usr/local/lib/gx10-sim/vllm_sim.py
ln -sf /usr/local/lib/gx10-sim/vllm_sim.py /usr/local/bin/vllm

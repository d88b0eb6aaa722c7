#!/bin/sh
# Runs once inside the image while it is built: `vllm` on PATH, as in the real image, and the
# simulator's BPE tokenizer trained from the shipped corpus (GX10_SIM_TOKENIZER points at it).
set -eu
lib=/usr/local/lib/gx10-sim
chmod 0755 "$lib/vllm_sim.py"
ln -sf "$lib/vllm_sim.py" /usr/local/bin/vllm
python3 "$lib/train_tokenizer.py" "$lib/tokenizer-corpus.txt" /usr/local/share/gx10-sim/tokenizer.json

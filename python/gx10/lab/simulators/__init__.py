"""Simulators the lab installs on its nodes in place of GB10 hardware tools (test equipment)."""

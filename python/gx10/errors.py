"""Typed setup errors.

These are raised before ansible-playbook starts (bad project home, inventory, playbook, or runner
setup). A playbook that runs and fails is not an error: `provision()` returns a result with
`ok == False`.
"""

from __future__ import annotations


class Gx10Error(Exception):
    """Base class for every error the gx10 Python layer raises on purpose."""


class ProjectNotFoundError(Gx10Error):
    """The project home (repo root with ansible.cfg and playbooks/) could not be located."""


class InventoryNotFoundError(Gx10Error):
    """The inventory path does not exist."""


class PlaybookNotFoundError(Gx10Error):
    """The playbook name or path does not resolve to a file."""


class RunnerSetupError(Gx10Error):
    """ansible-runner could not be set up (missing ansible-playbook, bad private data dir, ...)."""


class LimitError(Gx10Error):
    """A --limit that selects no node of the inventory (or that Ansible cannot read)."""

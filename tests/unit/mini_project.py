"""A minimal gx10 project home for the unit tests that run real ansible-playbook on localhost.

`conftest.py` writes it once per test module (the `home` fixture); the tests assert on what
these playbooks do, so a change here means re-checking test_cli.py and test_provision.py.
"""

from __future__ import annotations

from pathlib import Path

# Exported while the project home is in use; must not show up in any artifact.
SECRET = "gx10-test-secret-0c5d7a"

ANSIBLE_CFG = """\
[defaults]
interpreter_python = auto_silent
host_key_checking = False
forks = 7
timeout = 5

[ssh_connection]
ssh_args = -o ConnectTimeout=2 -o ControlMaster=no
"""

LOCAL_HOST = """\
    localhost:
      ansible_connection: local
      ansible_python_interpreter: "{{ ansible_playbook_python }}"
"""

# One changed task and one ok task; the ok task shows check mode and that our ansible.cfg
# (forks = 7) is the one in effect, and is tagged so that --skip-tags can leave it out.
CONVERGE = """\
- name: Converge localhost
  hosts: all
  gather_facts: false
  tasks:
    - name: Write the marker file
      ansible.builtin.copy:
        content: "{{ marker_content | default('hello') }}\\n"
        dest: "{{ marker_path }}"
        mode: "0644"
    - name: Report the run mode
      ansible.builtin.debug:
        msg: "check={{ ansible_check_mode }} forks={{ forks }}"
      vars:
        forks: "{{ lookup('ansible.builtin.config', 'DEFAULT_FORKS') }}"
      tags: [report]
"""

# A rescued failure, an ignored failure, then a real one that stops the host.
BROKEN = """\
- name: Break things
  hosts: all
  gather_facts: false
  tasks:
    - name: Recover from a failure
      block:
        - name: Fail inside a block
          ansible.builtin.fail:
            msg: rescued failure
      rescue:
        - name: Rescue it
          ansible.builtin.debug:
            msg: recovered
    - name: Ignore a failure
      ansible.builtin.command: "false"
      ignore_errors: true
      changed_when: false
    - name: Run a failing command
      ansible.builtin.command: sh -c 'echo to-stdout; echo to-stderr >&2; exit 3'
      changed_when: false
    - name: Never reached
      ansible.builtin.debug:
        msg: not reached
"""


def write_project(home: Path) -> None:
    """ansible.cfg, the converge and broken playbooks, a local and a half-dead inventory."""
    (home / "ansible.cfg").write_text(ANSIBLE_CFG)
    (home / "playbooks").mkdir()
    (home / "playbooks" / "converge.yml").write_text(CONVERGE)
    (home / "playbooks" / "broken.yml").write_text(BROKEN)
    local = home / "inventories" / "local"
    local.mkdir(parents=True)
    (local / "hosts.yml").write_text(f"all:\n  hosts:\n{LOCAL_HOST}")
    # ssh to a closed port: refused at once, so the host is unreachable without a long timeout.
    ghost = "    ghost:\n      ansible_connection: ssh\n      ansible_host: 127.0.0.1\n"
    ghost += "      ansible_port: 1\n"
    (home / "inventories" / "mixed.yml").write_text(f"all:\n  hosts:\n{LOCAL_HOST}{ghost}")

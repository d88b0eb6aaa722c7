#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# What a read-only role must leave as it found it: every file and directory under the places a
# gx10 stage writes to, with its size, mtime and mode. prepare.yml records this before the
# scenario; the verifier runs it again and compares. The lab is shared by every scenario, so
# "unchanged" is the claim, not "absent". A running pair agent rewrites its own status file every
# heartbeat (a temporary file, then a rename): those are not a stage's doing and are left out.
for root in /etc/gx10 /etc/netplan /etc/systemd/system /srv /usr/local/bin /usr/local/lib/gx10 \
            /var/lib/gx10 /var/cache/gx10; do
  [ -e "$root" ] || { echo "absent $root"; continue; }
  find "$root" -xdev \( -type d -printf 'dir %p/ %m\n' \) -o -printf '%y %p %s %T@ %m\n'
done | grep -Ev '^f /var/lib/gx10/pair/(status\.json|\.tmp-)' | LC_ALL=C sort

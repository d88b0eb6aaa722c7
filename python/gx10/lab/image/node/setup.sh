#!/bin/sh
# Runs once inside the image while it is built: make systemd at home in a container.
set -eu
# Units that have nothing to do in a container and only slow boot or fail.
systemctl mask getty@tty1.service console-getty.service systemd-logind.service \
  systemd-remount-fs.service sys-kernel-config.mount sys-kernel-debug.mount \
  sys-kernel-tracing.mount dev-hugepages.mount systemd-firstboot.service
# A real DGX node manages its rails with networkd or NetworkManager; the lab uses networkd.
systemctl enable systemd-networkd.service docker.service containerd.service
# Docker, not networkd, configures the lab's management link (eth0), so wait-online would wait
# its full two minutes for a link it never manages, holding docker.service back.
systemctl mask systemd-networkd-wait-online.service
# Writable /sys as on a real host (see the unit's comment).
systemctl enable gx10-lab-sysfs-rw.service
# Test equipment: the nvidia-smi simulator stands where the real tool lives.
chmod 0755 /usr/local/lib/gx10-sim/nvidia_smi.py
ln -sf /usr/local/lib/gx10-sim/nvidia_smi.py /usr/bin/nvidia-smi
# Test equipment: the RDMA sysfs simulator (GID tables that follow the rail addresses).
systemctl enable gx10-sim-rdma.service
# earlyoom is in the image only so the memory_guard role finds it without a network: a node that
# never ran the role does not run it (its package enables it on Debian's stock arguments).
systemctl disable earlyoom.service
# A machine id per container is generated at boot.
: > /etc/machine-id

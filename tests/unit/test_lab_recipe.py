"""The lab's pure parts: image recipe keys, the files tar, MACs, node privileges."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from gx10.lab import images, manager
from gx10.lab.config import LabConfig


def test_image_keys_are_stable_and_follow_the_recipe(tmp_path: Path) -> None:
    packages = tmp_path / "packages.txt"
    packages.write_text("# comment\nsystemd\npython3\n")
    extra = tmp_path / "file"
    extra.write_text("one")
    spec = images.ImageSpec("t", packages, files={"/etc/x": extra})
    assert spec.packages() == ["systemd", "python3"]
    base, image = spec.base_key(), spec.image_key()
    assert (base, image) == (spec.base_key(), spec.image_key())
    # Package order does not matter; a new package does.
    packages.write_text("python3\nsystemd\n")
    assert spec.base_key() == base
    packages.write_text("python3\nsystemd\niperf3\n")
    assert spec.base_key() != base
    # A changed file rebuilds the image but not the (slow) base.
    packages.write_text("python3\nsystemd\n")
    extra.write_text("two")
    assert spec.base_key() == base
    assert spec.image_key() != image


def test_files_tar_places_files_with_parents_and_fixed_times() -> None:
    spec = images.node_spec()
    first = images._files_tar(spec)
    assert first == images._files_tar(spec), "the tar must be reproducible"
    with tarfile.open(fileobj=io.BytesIO(first)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    sim = members["usr/local/lib/gx10-sim/nvidia_smi.py"]
    assert sim.mode == 0o755
    assert members["etc/docker/daemon.json"].mode == 0o644
    assert members["usr/local/lib/gx10-sim"].isdir()
    assert {m.mtime for m in members.values()} == {int(images.SOURCE_DATE_EPOCH)}
    assert "gx10-setup.sh" in members


def test_macs_are_distinct_local_and_change_with_the_nic_generation() -> None:
    cfg = LabConfig()
    macs = {cfg.mac(n, r) for n in cfg.nodes for r in cfg.rails}
    assert len(macs) == 4
    assert all(
        int(m.split(":")[0], 16) & 0x02 and not int(m.split(":")[0], 16) & 0x01 for m in macs
    )
    swapped = {cfg.mac(n, r, generation=1) for n in cfg.nodes for r in cfg.rails}
    assert macs.isdisjoint(swapped)


@pytest.mark.parametrize(
    ("bounding", "expect_privileged", "dropped"),
    [(0x1FFFFFFFFFF, True, []), (0x1FFFEFFFFFF, False, ["SYS_RESOURCE"])],
)
def test_node_privileges_follow_the_bounding_set(
    monkeypatch: pytest.MonkeyPatch, bounding: int, expect_privileged: bool, dropped: list[str]
) -> None:
    status = f"Name:\tx\nCapBnd:\t{bounding:016x}\n"
    real_read = Path.read_text

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        if str(self) == "/proc/self/status":
            return status
        if str(self) == "/proc/sys/kernel/cap_last_cap":
            return "40\n"
        return real_read(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", read_text)
    args = manager._node_security_args()
    assert ("--privileged" in args) is expect_privileged
    assert [args[i + 1] for i, a in enumerate(args) if a == "--cap-drop"] == dropped

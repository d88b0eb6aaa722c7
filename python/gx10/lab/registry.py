"""Publish the lab's stand-in images to the lab registry under the names the inventory uses.

The community GB10 vLLM image cannot be pulled here, so the lab registry serves the vLLM
simulator under the same repository path; the lab inventory points the image role at it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import PurePosixPath
from typing import IO

import httpx

from gx10.lab import _docker, engine, images
from gx10.lab.config import LabConfig
from gx10.lab.errors import LabError

Log = Callable[[str], None]

# repository:tag in the registry -> the recipe of the image that stands in for it.
STAND_INS: Mapping[str, Callable[[], images.ImageSpec]] = {
    "anemll/dspark-vllm-gx10:0.1.1": images.vllm_sim_spec,
}

# What push() writes: an OCI manifest, Docker's image config, layers as they are (uncompressed).
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
_CHUNK = 1 << 20

_MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
    )
)


def _manifest(cfg: LabConfig, ref: str, timeout: float = 10.0) -> httpx.Response | None:
    """The lab registry's answer for repository:tag's manifest, or None if it has none."""
    repo, _, tag = ref.rpartition(":")
    url = f"http://{cfg.registry_host_address}/v2/{repo}/manifests/{tag}"
    try:
        resp = httpx.get(url, headers={"Accept": _MANIFEST_TYPES}, timeout=timeout)
    except httpx.HTTPError as exc:
        raise LabError(
            f"lab registry at {cfg.registry_host_address} does not answer: {exc}"
        ) from exc
    if resp.status_code == 404:
        return None
    if resp.status_code != 200:
        raise LabError(f"lab registry answered {resp.status_code} for {ref}")
    return resp


def registry_digest(cfg: LabConfig, ref: str, timeout: float = 10.0) -> str | None:
    """The digest the lab registry serves for repository:tag, or None if it has none."""
    resp = _manifest(cfg, ref, timeout)
    digest: str | None = None if resp is None else resp.headers.get("Docker-Content-Digest")
    return digest


def served_config(cfg: LabConfig, ref: str) -> str | None:
    """The config digest (the image ID) of what the lab registry serves as repository:tag."""
    resp = _manifest(cfg, ref)
    digest: str | None = None if resp is None else resp.json().get("config", {}).get("digest")
    return digest


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


def _upload(client: httpx.Client, base: str, chunks: Iterator[bytes]) -> tuple[str, int]:
    """Upload one blob as one streamed chunk, hashed on the way; its (digest, size)."""
    sha = hashlib.sha256()
    size = 0

    def hashed() -> Iterator[bytes]:
        nonlocal size
        for chunk in chunks:
            sha.update(chunk)
            size += len(chunk)
            yield chunk

    start = client.post(f"{base}/blobs/uploads/")
    _expect(start, 202, "start an upload")
    sent = client.patch(
        start.headers["Location"], content=hashed(),
        headers={"Content-Type": "application/octet-stream"},
    )  # fmt: skip
    _expect(sent, 202, "take a blob")
    digest = f"sha256:{sha.hexdigest()}"
    # The location carries the upload's state in its query: add the digest to it, keep the rest.
    done = client.put(httpx.URL(sent.headers["Location"]).copy_merge_params({"digest": digest}))
    _expect(done, 201, f"commit blob {digest}")
    return digest, size


def _expect(resp: httpx.Response, status: int, what: str) -> None:
    if resp.status_code != status:
        raise LabError(f"lab registry did not {what}: {resp.status_code} {resp.text.strip()[:300]}")


def _read(stream: IO[bytes]) -> Iterator[bytes]:
    while chunk := stream.read(_CHUNK):
        yield chunk


def push(cfg: LabConfig, tag: str, ref: str) -> str:
    """Push the local image `tag` to the lab registry as repository:tag with uncompressed
    layers (an OCI manifest); return the manifest's digest.

    `docker push` compresses every layer with gzip on one core: the real engine's 6.9 GB took
    three minutes. The registry is on this machine, so the layers go as they are, streamed from
    `docker save` (a layer's digest is then its diff ID, which its config lists). Nodes pull it as
    any image; their engines take uncompressed OCI layers.
    """
    repo, _, name = ref.rpartition(":")
    base = f"http://{cfg.registry_host_address}/v2/{repo}"
    layers: dict[str, tuple[str, int]] = {}  # the archive's layer.tar path -> (digest, size)
    links: dict[str, str] = {}  # a layer.tar that is a link to another one -> its target
    files: dict[str, bytes] = {}  # the archive's small JSON files
    save = subprocess.Popen(["docker", "save", tag], stdout=subprocess.PIPE)
    assert save.stdout is not None
    try:
        with (
            httpx.Client(timeout=httpx.Timeout(60, read=600)) as client,
            tarfile.open(fileobj=save.stdout, mode="r|") as archive,
        ):
            for member in archive:
                if member.name.endswith("/layer.tar"):
                    if member.issym():
                        parent = PurePosixPath(member.name).parent
                        links[member.name] = str(PurePosixPath(parent, member.linkname))
                    else:
                        stream = archive.extractfile(member)
                        assert stream is not None
                        layers[member.name] = _upload(client, base, _read(stream))
                elif member.isfile() and member.name.endswith(".json"):
                    stream = archive.extractfile(member)
                    assert stream is not None
                    files[member.name] = stream.read()
            if save.wait(timeout=600) != 0:
                raise LabError(f"`docker save {tag}` failed (exit {save.returncode})")
            (entry,) = json.loads(files["manifest.json"])
            config = files[entry["Config"]]
            config_digest, config_size = _upload(client, base, iter([config]))
            described = []
            for path in entry["Layers"]:
                digest, size = layers[os.path.normpath(links.get(path, path))]
                described.append({"mediaType": OCI_LAYER, "digest": digest, "size": size})
            manifest = {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": config_size},
                "layers": described,
            }
            put = client.put(
                f"{base}/manifests/{name}",
                content=json.dumps(manifest, separators=(",", ":")).encode(),
                headers={"Content-Type": OCI_MANIFEST},
            )
            _expect(put, 201, f"take the manifest of {ref}")
            return put.headers["Docker-Content-Digest"]
    finally:
        if save.poll() is None:
            save.kill()
            save.wait()


def publish(cfg: LabConfig, log: Log) -> dict[str, str]:
    """Build and push every image the lab serves (published()) whose current build the
    registry lacks (by its image ID).

    Returns repository:tag -> digest as the registry serves it.
    """
    _wait_ready(cfg)
    digests: dict[str, str] = {}
    for ref, build in published(cfg).items():
        tag = build(log)
        current = _docker.docker("image", "inspect", "--format", "{{.Id}}", tag)
        if served_config(cfg, ref) != current:
            log(f"publishing {tag} to the lab registry as {ref}")
            started = time.monotonic()
            push(cfg, tag, ref)
            log(f"published {ref} in {time.monotonic() - started:.0f} s")
        served = registry_digest(cfg, ref)
        if served is None:
            raise LabError(f"lab registry does not serve {ref} after a push")
        digests[ref] = served
    return digests

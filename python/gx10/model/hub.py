"""Build a manifest from the Hub's file listing (huggingface_hub).

Kept apart from `manifest` because huggingface_hub is slow to import and only this path needs it;
`gx10.model.manifest.manifest_from_hub` is the public entry point.
"""

from __future__ import annotations

import httpx2
from huggingface_hub import HfApi
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoSibling

from gx10 import __version__
from gx10.model.errors import (
    HubAccessError,
    HubError,
    HubRepoNotFoundError,
    HubRevisionNotFoundError,
    ManifestError,
)
from gx10.model.manifest import Manifest, ManifestFile, is_full_sha


def fetch_manifest(
    repo: str,
    revision: str,
    *,
    token: str | None = None,
    endpoint: str | None = None,
) -> Manifest:
    """Ask the Hub for every file of `repo` at `revision` with its size and hash.

    One request: `GET /api/models/{repo}/revision/{revision}?blobs=true`. `revision` may be a
    branch or tag; the manifest pins the commit sha the Hub resolved it to. A full 40-hex sha must
    come back unchanged.
    """
    api = HfApi(endpoint=endpoint, token=token, library_name="gx10", library_version=__version__)
    where = f"{repo} on {api.endpoint}"
    try:
        info = api.model_info(repo, revision=revision, files_metadata=True)
    except RevisionNotFoundError as exc:
        raise HubRevisionNotFoundError(
            f"revision {revision!r} not found in {where} ({_detail(exc)}); pass a commit sha, "
            "branch or tag that exists in the repository's history"
        ) from None
    except GatedRepoError as exc:
        raise HubAccessError(
            f"{where} is gated ({_detail(exc)}); accept its terms on the Hub with the account "
            "whose token you use (HF_TOKEN or --token-file)"
        ) from None
    except RepositoryNotFoundError as exc:
        raise HubRepoNotFoundError(
            f"model repository {where} not found ({_detail(exc)}); check the name "
            "(owner/name), or if it is private give a token that can read it "
            "(HF_TOKEN or --token-file)"
        ) from None
    except HfHubHTTPError as exc:
        raise HubError(f"the Hub refused the request for {where} ({_detail(exc)})") from None
    except HFValidationError as exc:
        raise HubError(f"{repo!r} is not a valid repository id: {exc}") from None
    except (httpx2.HTTPError, OfflineModeIsEnabled) as exc:
        raise HubError(f"cannot reach {api.endpoint}: {type(exc).__name__}: {exc}") from None

    sha = info.sha
    if not isinstance(sha, str) or not is_full_sha(sha):
        raise HubError(f"the Hub did not return a commit sha for {where} at {revision!r}: {sha!r}")
    if is_full_sha(revision) and sha != revision:
        raise HubError(f"asked {where} for commit {revision}, the Hub answered for {sha}")
    if info.siblings is None:
        raise HubError(f"the Hub listed no files for {where} at {sha}")
    try:
        files = [_sibling_entry(sibling, where) for sibling in info.siblings]
        return Manifest(repo=repo, revision=sha, files=tuple(files))
    except ManifestError as exc:
        raise ManifestError(f"the Hub's listing of {where} at {sha} is unusable: {exc}") from None


def _sibling_entry(sibling: RepoSibling, where: str) -> ManifestFile:
    """One `siblings[]` entry as a manifest file: LFS files by sha256, the rest by blob sha1."""
    name = sibling.rfilename
    if sibling.size is None:
        raise HubError(f"the Hub gave no size for {name} in {where} (files metadata missing)")
    if sibling.lfs is not None:
        if sibling.lfs.size != sibling.size:
            raise HubError(
                f"the Hub gave two sizes for {name} in {where}: {sibling.size} and "
                f"lfs.size {sibling.lfs.size}"
            )
        return ManifestFile(name, sibling.size, "lfs", sibling.lfs.sha256)
    if sibling.blob_id is not None:
        return ManifestFile(name, sibling.size, "git", sibling.blob_id)
    raise HubError(f"the Hub gave no hash for {name} in {where} (no blobId, no lfs)")


def _detail(exc: HfHubHTTPError) -> str:
    """The status and the server's own words (X-Error-Message or the body's "error")."""
    detail = f"HTTP {exc.response.status_code}"
    return f"{detail}: {exc.server_message}" if exc.server_message else detail

"""What makes a folder a trainer checkpoint, as every reader of `policy-updates` checks it.

    from runtime.policy.checkpoint import verify_checkpoint

    verify_checkpoint("s3://bucket/run/ckpt/v000015", 15)   # PolicyError unless it is v15

A checkpoint is an HF model folder (a local path, `file://`, or any fsspec URL such as
`s3://`) that holds the trainer's metadata, `scalecua_trainer.json`. The trainer writes
that file last, so a folder is a complete checkpoint exactly when it exists, and it names
the policy version the weights are. An announcement that points anywhere else, or names
another version than the folder holds, is not the trainer's: rollout workers refuse it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runtime.errors import PolicyError

__all__ = ["CHECKPOINT_METADATA", "read_checkpoint_metadata", "verify_checkpoint"]

CHECKPOINT_METADATA = "scalecua_trainer.json"


def read_checkpoint_metadata(uri: str) -> dict[str, Any]:
    """The trainer's metadata of the checkpoint at `uri`; PolicyError if it is not one."""
    try:
        if "://" in uri and not uri.startswith("file://"):
            import fsspec

            fs, root = fsspec.core.url_to_fs(uri)
            with fs.open(f"{root.rstrip('/')}/{CHECKPOINT_METADATA}", "rb") as handle:
                raw = handle.read()
        else:
            raw = (Path(uri.removeprefix("file://")) / CHECKPOINT_METADATA).read_bytes()
    except FileNotFoundError:
        raise PolicyError(
            f"{uri} is not a complete checkpoint (it has no {CHECKPOINT_METADATA})"
        ) from None
    except (OSError, ValueError, ImportError) as exc:
        raise PolicyError(f"cannot read {CHECKPOINT_METADATA} of {uri}: {exc}") from exc
    try:
        metadata = json.loads(raw)
    except ValueError as exc:
        raise PolicyError(f"{CHECKPOINT_METADATA} of {uri} is not JSON: {exc}") from exc
    if not isinstance(metadata, dict):
        raise PolicyError(f"{CHECKPOINT_METADATA} of {uri} is not a JSON object")
    return metadata


def verify_checkpoint(uri: str, policy_version: int) -> dict[str, Any]:
    """Refuse (PolicyError) a checkpoint that is missing, incomplete or another version."""
    metadata = read_checkpoint_metadata(uri)
    holds = metadata.get("policy_version")
    if holds != policy_version:
        raise PolicyError(f"{uri} holds policy version {holds}, not {policy_version}")
    return metadata

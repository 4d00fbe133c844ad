"""Task parts that need an online account: OSWorld's Google Drive steps and getter.

They are known by name (a task using them is not "unknown"), and each fails with
`AccountRequired` saying which account and why; a coverage report can name the same
reason up front from these two tables.
"""

from __future__ import annotations

from runtime.errors import AccountRequired

__all__ = ["ACCOUNT_GETTERS", "ACCOUNT_STEPS", "account_error"]

_GOOGLE = (
    "a Google account: OSWorld signs in to Google Drive with its own OAuth client and "
    "credentials (evaluation_examples/settings/google*), which a task file does not carry"
)

# Setup step type -> the account it needs.
ACCOUNT_STEPS: dict[str, str] = {
    "googledrive": _GOOGLE,  # deletes and uploads files in the account's Drive
    "login": _GOOGLE,  # signs Chrome in to the account's Drive
}

# Getter type -> the account it needs.
ACCOUNT_GETTERS: dict[str, str] = {
    "googledrive_file": _GOOGLE,  # downloads the agent's file from the account's Drive
}


def account_error(kind: str, name: str) -> AccountRequired:
    """The error a step or getter that needs an account raises (kind: "setup step" or "getter")."""
    need = ACCOUNT_STEPS.get(name) if kind == "setup step" else ACCOUNT_GETTERS.get(name)
    return AccountRequired(f"{kind} `{name}` needs {need}")

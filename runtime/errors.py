"""The scalecua exception hierarchy: one base a user can catch.

ScaleCUAError
├── ConfigError              a setting is missing or invalid
│   └── SettingError         a command's setting has a value it does not take (CLI exit status 2)
├── InfrastructureError      a service's own dependency failed: retried, never dead-lettered
│   ├── BrokerError          the broker is unreachable or refused a request
│   │   └── BrokerTimeout    a broker call did not finish within its bound
│   │       └── ReplayIncomplete   a replay did not reach the ends it was asked for (replay.py)
│   ├── StorageError         a store (archive, blobs, checkpoints) failed to read or write
│   ├── CgroupError          this machine cannot make a cgroup (isolation/cgroup.py)
│   ├── LLMUnavailable       VeriGen's LLM endpoint kept failing (producers/verigen/llm.py)
│   └── ProbeError           VeriGen's desktop probe failed (producers/verigen/probe)
├── RecordError              this record cannot be processed: dead-lettered, the stream goes on
│   └── MissingImage         a sample's screenshot is gone: it leaves its group (trainer)
├── ServiceHalted            a service gave up on an infrastructure failure without committing
├── RetryStopped             a stop request interrupted a retry (retry.py)
├── SchemaError              bytes do not decode to the topic's event type
├── BlobNotFound             no blob with that sha256 in the store
├── BlobCorrupt              a stored blob's bytes do not match its sha256
├── DesktopError             a desktop failed to start, respond or act
│   ├── AgentSideError       a call on the agent's side of a desktop failed (desktop server)
│   └── _DesktopDied         a probed desktop died during a task's setup (VeriGen)
├── TaskError                a task file is malformed or its setup failed
│   ├── AccountRequired      a task part needs an online account this machine does not have
│   ├── FileNotCached        a file a task names is not in the file cache and may not be fetched
│   ├── FetchError           a URL could not be fetched (status, size limit, network, refused host)
│   │   ├── DownloadError    a desktop's /setup/download_file source could not be fetched
│   │   └── _Transient       a fetch failure worth another attempt (tasks/files/fetch.py)
│   ├── CandidateError       a synthesised task is malformed (VeriGen)
│   └── CompositionError     tasks that cannot be joined into one (VeriGen)
├── OutcomeError             what an agent did cannot be used or checked: scored, never raised
│   ├── ActionError          an action is malformed (envs/desktop/actions.py)
│   ├── ChromeError          a desktop's Chrome does not answer or refuses a command (cdp.py)
│   ├── FormulaError         a spreadsheet formula does not compute (a metric)
│   ├── JudgeFailed          a task's sandboxed judge gave no score (a metric)
│   └── ParseError           an LLM agent's reply does not fit its schema (VeriGen)
├── PolicyError              a model, tokenizer or engine failed
│   ├── EngineUnavailable    a rollout worker's engine cannot serve (consumers/rollout)
│   ├── NonFiniteStep        a training step's loss or gradient was not finite (trainer)
│   └── _NonFiniteWeights    a training step left weights that are not finite (trainer)
├── RankFailure              a rank of the trainer's process group died or fell out of step
└── LLMRejected              VeriGen's LLM endpoint refused a request (a 4xx)

Classes beyond this module subclass these where they are raised, keeping a builtin base
(ValueError) where callers catch that. A test (tests/runtime/test_errors.py) holds every
exception class of the project to this tree.
"""

from __future__ import annotations

__all__ = [
    "AccountRequired",
    "BlobCorrupt",
    "BlobNotFound",
    "BrokerError",
    "BrokerTimeout",
    "ConfigError",
    "DesktopError",
    "FetchError",
    "FileNotCached",
    "InfrastructureError",
    "OutcomeError",
    "PolicyError",
    "RecordError",
    "ScaleCUAError",
    "SchemaError",
    "ServiceHalted",
    "SettingError",
    "StorageError",
    "TaskError",
]


class ScaleCUAError(Exception):
    """Base class of every error scalecua raises on purpose."""


class ConfigError(ScaleCUAError):
    """A setting is missing or invalid."""


class SettingError(ConfigError):
    """A command's setting (flag, config file, environment) has a value it does not take."""


class InfrastructureError(ScaleCUAError):
    """A service's own dependency failed; the service runner retries, never dead-letters."""


class BrokerError(InfrastructureError):
    """The broker is unreachable or refused a request."""


class BrokerTimeout(BrokerError):
    """A broker call did not finish within its bound."""


class StorageError(InfrastructureError):
    """A store (archive, blob store, checkpoints) failed to read or write."""


class RecordError(ScaleCUAError):
    """This record cannot be processed; the runner dead-letters it and goes on."""


class ServiceHalted(ScaleCUAError):
    """A service stopped on an infrastructure failure that outlasted its retries."""


class SchemaError(ScaleCUAError):
    """Bytes do not decode to the topic's event type."""


class BlobNotFound(ScaleCUAError):
    """No blob with that sha256 exists in the store."""


class BlobCorrupt(ScaleCUAError):
    """A stored blob's bytes do not match the sha256 in its reference."""


class DesktopError(ScaleCUAError):
    """A desktop failed to start, respond or act."""


class TaskError(ScaleCUAError):
    """A task file is malformed or its setup failed."""


class AccountRequired(TaskError):
    """A task's setup step or getter needs an online account (Google Drive, a login)."""


class FileNotCached(TaskError):
    """A file a task names by URL is not in the file cache, and fetching it is not allowed."""


class FetchError(TaskError):
    """A URL could not be fetched: an HTTP error, the size limit, the network, a refused host."""


class OutcomeError(ScaleCUAError):
    """What an agent did or left cannot be used or checked (an action or a reply that does
    not parse, a browser it closed, a formula that does not compute, a judge failing on it).

    Part of the outcome, not a broken system: an evaluation scores it 0 with the reason,
    an episode answers it, VeriGen asks again; it never stops a run as other errors do.
    """


class PolicyError(ScaleCUAError):
    """A model, tokenizer or engine failed."""

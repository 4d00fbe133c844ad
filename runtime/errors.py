"""The scalecua exception hierarchy: one base a user can catch.

ScaleCUAError
├── ConfigError            a setting is missing or invalid
│   └── SettingError       a command's setting has a value it does not take (CLI exit status 2)
├── InfrastructureError    a service's own dependency failed: retried, never dead-lettered
│   ├── BrokerError        the broker is unreachable or refused a request
│   │   └── BrokerTimeout  a broker call did not finish within its bound
│   └── StorageError       a store (archive, blobs, checkpoints) failed to read or write
├── RecordError            this record cannot be processed: dead-lettered, the stream goes on
├── ServiceHalted          a service gave up on an infrastructure failure without committing
├── SchemaError            bytes do not decode to the topic's event type
├── BlobNotFound           no blob with that sha256 in the store
├── BlobCorrupt            a stored blob's bytes do not match its sha256
├── DesktopError           a desktop failed to start, respond or act
├── TaskError              a task file is malformed or its setup failed
│   ├── AccountRequired    a task part needs an online account this machine does not have
│   ├── FileNotCached      a file a task names is not in the file cache and may not be fetched
│   └── FetchError         a URL could not be fetched (status, size limit, network, refused host)
└── PolicyError            a model, tokenizer or engine failed
"""

from __future__ import annotations


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


class PolicyError(ScaleCUAError):
    """A model, tokenizer or engine failed."""

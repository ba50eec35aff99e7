"""rmq_scheduler: a Python client of rmq-scheduler's HTTP API.

Standard library only. See README.md for a quick start.
"""

from .client import Client, Retry
from .errors import (
    ERROR_CLASSES,
    AbortError,
    ConflictError,
    ConnectionError,
    CrossOriginError,
    ForbiddenError,
    HostNotAllowedError,
    InternalError,
    InvalidArgumentError,
    MethodNotAllowedError,
    NotFoundError,
    PayloadTooLargeError,
    RmqsError,
    SearchTimeoutError,
    StorageFullError,
    TimeoutError,
    UiReadOnlyError,
    UnauthorizedError,
    UnavailableError,
    UnsupportedMediaTypeError,
)

__version__ = "0.1.0"

__all__ = [
    "Client", "Retry", "ERROR_CLASSES", "RmqsError",
    "InvalidArgumentError", "UnauthorizedError", "ForbiddenError",
    "UiReadOnlyError", "CrossOriginError", "HostNotAllowedError",
    "NotFoundError", "MethodNotAllowedError", "ConflictError",
    "PayloadTooLargeError", "UnsupportedMediaTypeError", "UnavailableError",
    "StorageFullError", "SearchTimeoutError", "InternalError",
    "TimeoutError", "ConnectionError", "AbortError",
]

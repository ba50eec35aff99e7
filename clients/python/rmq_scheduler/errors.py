"""The errors the client raises: one class per error code of the API."""

import builtins


class RmqsError(Exception):
    """Every error the client raises.

    ``status`` is the HTTP status (0 when there was no answer), ``code`` the
    API's error code (or ``timeout``, ``aborted``, ``connection`` for the
    client's own), ``field`` the request member at fault, ``errors`` a
    batch's per-item list, ``retry_after`` the seconds of a Retry-After
    header, ``body`` the parsed answer.
    """

    def __init__(self, message, *, status=0, code="unknown", field=None,
                 errors=None, retry_after=None, body=None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.field = field
        self.errors = errors
        self.retry_after = retry_after
        self.body = body

    def __str__(self):
        where = f" ({self.field})" if self.field else ""
        return f"{self.status} {self.code}{where}: {self.message}"


# One class per ``error.code`` of api/openapi.yaml (ErrorDetail.code).
class InvalidArgumentError(RmqsError):
    pass


class UnauthorizedError(RmqsError):
    pass


class ForbiddenError(RmqsError):
    pass


class UiReadOnlyError(RmqsError):
    pass


class CrossOriginError(RmqsError):
    pass


class HostNotAllowedError(RmqsError):
    pass


class NotFoundError(RmqsError):
    pass


class MethodNotAllowedError(RmqsError):
    pass


class ConflictError(RmqsError):
    pass


class PayloadTooLargeError(RmqsError):
    pass


class UnsupportedMediaTypeError(RmqsError):
    pass


class UnavailableError(RmqsError):
    pass


class StorageFullError(RmqsError):
    pass


class SearchTimeoutError(RmqsError):
    pass


class InternalError(RmqsError):
    pass


# The client's own. They are also the built-in exceptions of the same
# names, so ``except TimeoutError`` catches them either way.
class TimeoutError(RmqsError, builtins.TimeoutError):
    """No answer within the client's timeout (or schedule()'s own)."""


class ConnectionError(RmqsError, builtins.ConnectionError):
    """No connection (or the connection was cut) after every retry."""


class AbortError(RmqsError):
    """The client was closed before the call could be sent."""


ERROR_CLASSES = {
    "invalid_argument": InvalidArgumentError,
    "unauthorized": UnauthorizedError,
    "forbidden": ForbiddenError,
    "ui_read_only": UiReadOnlyError,
    "cross_origin": CrossOriginError,
    "host_not_allowed": HostNotAllowedError,
    "not_found": NotFoundError,
    "method_not_allowed": MethodNotAllowedError,
    "conflict": ConflictError,
    "payload_too_large": PayloadTooLargeError,
    "unsupported_media_type": UnsupportedMediaTypeError,
    "unavailable": UnavailableError,
    "storage_full": StorageFullError,
    "search_timeout": SearchTimeoutError,
    "internal": InternalError,
}

# Without a recognised code (a proxy's answer, say): by HTTP status.
_BY_STATUS = {
    400: "invalid_argument",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    500: "internal",
    503: "unavailable",
}


def error_from_answer(status, body, retry_after=None):
    """The typed error of an HTTP answer that is not a success."""
    detail = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        detail = body["error"]
    code = None
    if detail and isinstance(detail.get("code"), str):
        code = detail["code"]
    if code is None:
        code = _BY_STATUS.get(status, "unknown")
    cls = ERROR_CLASSES.get(code, RmqsError)
    if detail and detail.get("message"):
        message = detail["message"]
    elif isinstance(body, str) and body:
        message = body[:300]
    else:
        message = f"HTTP {status}"
    errors = body.get("errors") if isinstance(body, dict) else None
    return cls(message, status=status, code=code,
               field=detail.get("field") if detail else None,
               errors=errors if isinstance(errors, list) else None,
               retry_after=retry_after, body=body)

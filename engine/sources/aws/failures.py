"""What went wrong with an AWS call, in one line and of which kind, and the tallies of a scan's
failures that become its warnings."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from engine.sources.aws import clients

_CREDENTIAL_CODES = frozenset({
    "ExpiredToken", "ExpiredTokenException", "InvalidClientTokenId", "UnrecognizedClientException",
    "AuthFailure", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken",
    "MissingAuthenticationToken", "RequestExpired",
})
_DENIED_CODES = frozenset({
    "AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedAccess",
    "AuthorizationError", "Forbidden",
})
_THROTTLE_CODES = frozenset({
    "Throttling", "ThrottlingException", "ThrottledException", "RequestLimitExceeded",
    "TooManyRequestsException", "RequestThrottled", "RequestThrottledException",
    "EC2ThrottledException", "SlowDown",
})
# Kinds after which no other call in the region can succeed.
ABORTS_REGION = frozenset({"credentials", "connection", "region"})


@dataclass(frozen=True, slots=True)
class CallFailure:
    kind: str  # credentials | denied | throttled | connection | region | other
    text: str


def classify(exc: BaseException) -> CallFailure:
    """What went wrong with one call, in one line, and of which kind."""
    from botocore.exceptions import (
        ClientError,
        ConnectionError,
        CredentialRetrievalError,
        HTTPClientError,
        NoCredentialsError,
        PartialCredentialsError,
    )

    if isinstance(exc, ClientError):
        return _client_error(exc)
    if isinstance(exc, NoCredentialsError | PartialCredentialsError | CredentialRetrievalError):
        return CallFailure("credentials", one_line(exc))
    if isinstance(exc, ConnectionError | HTTPClientError):
        return CallFailure("connection", f"cannot connect: {one_line(exc)}")
    return CallFailure("other", one_line(exc))


def _client_error(exc: Any) -> CallFailure:
    """A botocore ClientError: its code tells the kind."""
    error = exc.response.get("Error") or {}
    code = str(error.get("Code") or "Unknown")
    message = one_line(str(error.get("Message") or ""))[:200]
    operation = exc.operation_name
    if code in _CREDENTIAL_CODES:
        return CallFailure("credentials", f"credentials rejected on {operation} "
                           f"({code}: {message})")
    if code in _DENIED_CODES:
        return CallFailure("denied", f"access denied to {operation} ({code}: {message})")
    if code in _THROTTLE_CODES:
        return CallFailure("throttled", f"{operation} still throttled after "
                           f"{clients.RETRY_ATTEMPTS} retries ({code})")
    if code == "OptInRequired":
        return CallFailure("region", f"the region is not enabled for the account ({code})")
    return CallFailure("other", f"{operation} failed ({code}: {message})")


def boto_errors() -> tuple[type[Exception], ...]:
    """The exceptions a boto3 call raises for a failed call (for `except`)."""
    from botocore.exceptions import BotoCoreError, ClientError

    return (BotoCoreError, ClientError)


def one_line(value: object) -> str:
    return " ".join(str(value).split()) or type(value).__name__


@dataclass
class Tally:
    """Outcomes of the calls of a scan, across threads: `succeeded` counts the inventory reads
    of regions (not the identity and region checks), `failures` every failed call."""

    succeeded: int = 0
    failures: list[CallFailure] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ok(self) -> None:
        with self.lock:
            self.succeeded += 1

    def failed(self, failure: CallFailure) -> None:
        with self.lock:
            self.failures.append(failure)


@dataclass
class RegionLog:
    """Failures of one (account, region), summarized into warning lines at the end."""

    account: str
    region: str
    tally: Tally
    failures: list[tuple[str, CallFailure]] = field(default_factory=list)
    attempted: int = 0

    def warnings(self) -> list[str]:
        where = f"aws: account {self.account}, region {self.region}"
        kinds = {failure.kind for _, failure in self.failures}
        if self.failures and len(kinds) == 1 and len(self.failures) == self.attempted:
            service, first = self.failures[0]
            return [f"{where}: nothing could be read: {service}: {first.text}; region skipped"]
        return [f"{where}, {service}: {failure.text}; skipped" for service, failure
                in self.failures]

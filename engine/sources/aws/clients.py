"""boto3 clients: one per (account, region, service), made with adaptive retries and handed to
the hooks in CLIENT_HOOKS. botocore is imported inside functions only."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from engine import __version__

RETRY_ATTEMPTS = 10  # retries after the first attempt (botocore's `max_attempts`)
# Called with every boto3 client gpuwarden creates (scan and remediation alike), e.g. to
# register botocore event handlers: `client.meta.events.register("before-call", check)`.
CLIENT_HOOKS: list[Callable[[Any], None]] = []


@dataclass
class Account:
    """One account to scan: its boto3 session and, once known, its id."""

    session: Any
    account_id: str | None = None
    role_arn: str | None = None

    @property
    def label(self) -> str:
        return self.account_id or self.role_arn or "default"


class AwsClients:
    """boto3 clients per (account, region, service), made once and shared by the scan threads
    and the remediation executor. Creating a client from a session is not thread-safe; using
    one is."""

    def __init__(self, accounts: Iterable[Account] = ()) -> None:
        self.accounts: list[Account] = list(accounts)
        self._clients: dict[tuple[str, str, str], Any] = {}
        self._lock = threading.Lock()

    def account(self, account_id: str | None) -> Account:
        for account in self.accounts:
            if account_id is not None and account.account_id == account_id:
                return account
        if len(self.accounts) == 1:
            return self.accounts[0]
        raise LookupError(f"no credentials for AWS account {account_id or '(unknown)'}")

    def client(self, service: str, region: str | None, account: str | Account | None = None
               ) -> Any:
        chosen = account if isinstance(account, Account) else self.account(account)
        region = region or chosen.session.region_name or "us-east-1"
        key = (chosen.label, region, service)
        with self._lock:
            if key not in self._clients:
                self._clients[key] = make_client(chosen.session, service, region)
            return self._clients[key]


def make_client(session: Any, service: str, region: str) -> Any:
    """A client with adaptive retries; the endpoint comes from the environment
    (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_<SERVICE>`) or the profile, as boto3 reads it."""
    from botocore.config import Config

    config = Config(retries={"mode": "adaptive", "max_attempts": RETRY_ATTEMPTS},
                    user_agent_extra=f"gpuwarden/{__version__}")
    return apply_client_hooks(session.client(service, region_name=region, config=config))


def apply_client_hooks(client: Any) -> Any:
    """`client`, once every hook in CLIENT_HOOKS has seen it."""
    for hook in CLIENT_HOOKS:
        hook(client)
    return client


"""The webhook's ASGI app: routes, the request deadline, metrics. Thin wiring of review.py
(parse and answer), limits.py (refuse oversized objects), admission.py (decide), executor.py
(bounded evaluation threads), caches.py (cluster facts) and metrics.py.

Admission endpoints never answer 5xx: a body that is not a usable AdmissionReview gets 400 (or
an AdmissionReview refusal when its uid is readable); an object over a Kubernetes size limit is
refused (400) without evaluation. An evaluation that fails, passes the deadline or finds every
evaluation slot taken gets no verdict: in a fail-open namespace it is allowed with a warning, as
the API server would with failurePolicy Ignore; in a fail-closed one (the `/…/fail-closed`
routes, which the failurePolicy Fail configurations call, or a namespace labelled
`<fail_closed_label>=true`) it is denied (503), as the API server would with failurePolicy Fail.
Either way the reason is in the response, the audit annotations and the metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from engine.core.evaluate import Engine
from engine.sources.kubernetes import CONTROLLER_KINDS
from engine.webhook.admission import (
    AdmissionSettings,
    Endpoint,
    Evaluator,
    Judge,
    Outcome,
    PolicyEvaluator,
)
from engine.webhook.caches import ClusterCache, Snapshot
from engine.webhook.executor import BoundedExecutor, Busy
from engine.webhook.inventory import inventory_feed
from engine.webhook.limits import ObjectTooLarge, check_object
from engine.webhook.metrics import WebhookMetrics
from engine.webhook.review import (
    JUDGED_OPERATIONS,
    MAX_BODY_BYTES,
    AdmissionRequest,
    Decision,
    ReviewError,
    parse_review,
    refusal,
    review_response,
)

log = logging.getLogger("gpuwarden.webhook")
DEFAULT_TIMEOUT_SECONDS = 3.0  # the validating webhook's timeoutSeconds
FAIL_CLOSED_LABEL = "gpuwarden.io/fail-closed"  # the Terraform module's var.fail_closed_label
_METRIC_KINDS = frozenset({"Pod", *CONTROLLER_KINDS})
_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    admission: AdmissionSettings = field(default_factory=AdmissionSettings)
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    deadline_fraction: float = 0.8
    # Evaluation threads, and evaluations running or waiting for one; past that, no verdict.
    workers: int = 4
    max_in_flight: int = 64
    fail_closed_label: str = FAIL_CLOSED_LABEL  # namespaces labelled `<it>=true` fail closed

    def __post_init__(self) -> None:
        if self.workers < 1 or self.max_in_flight < self.workers:
            raise ValueError("workers must be ≥ 1 and max_in_flight ≥ workers")

    def deadline(self, requested_timeout: str | None) -> float:
        """Seconds an evaluation may take: a fraction of the API server's timeout for this call
        (its `?timeout=` query parameter, a Go duration), else of the configured one."""
        timeout = parse_go_duration(requested_timeout) if requested_timeout else None
        return (timeout or self.timeout_seconds) * self.deadline_fraction


def parse_go_duration(text: str) -> float | None:
    """`3s`, `2.5s`, `1500ms`, `1m30s` as seconds; None unless 0 < value ≤ 60 s."""
    parts = _GO_DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    seconds = sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)
    return seconds if 0 < seconds <= 60 else None


class WebhookApp:
    """State and handlers of one webhook; `create_app` wraps it in Starlette."""

    def __init__(self, engine: Engine, *, settings: WebhookSettings, caches: ClusterCache,
                 evaluator: Evaluator | None, clock: Callable[[], datetime],
                 metrics: WebhookMetrics):
        self.settings = settings
        self.caches = caches
        self.clock = clock
        self.metrics = metrics
        help_by_policy = {p.id: " ".join(p.spec.help.split()) for p in engine.policies}
        self.judge = Judge(evaluator or PolicyEvaluator(engine), caches, settings.admission,
                           help_by_policy=help_by_policy, catalog=engine.catalog)
        self.policies_loaded = bool(engine.policies)
        self.executor = BoundedExecutor(settings.workers, settings.max_in_flight)
        metrics.evaluations_in_flight.set_function(lambda: self.executor.in_flight)
        self.inventory = inventory_feed(engine.policies)
        caches.inventory_kinds |= self.inventory.kinds
        caches.on_refresh = self._cache_refreshed
        if caches.snapshot is not None:
            self._cache_refreshed(caches.snapshot)

    def _cache_refreshed(self, snapshot: Snapshot) -> None:
        self.metrics.cache_refreshed.set(snapshot.listed_at)
        self.metrics.cache_objects.labels("namespace").set(len(snapshot.namespaces))
        self.metrics.cache_objects.labels("gpu_node").set(len(snapshot.nodes))
        self.metrics.cache_objects.labels("inventory").set(snapshot.inventory.objects)
        self.metrics.cache_objects.labels("dra_claim").set(len(snapshot.inventory.claims))
        self.inventory.push(snapshot.inventory)

    # ------------------------------------------------------------------ admission

    async def validate(self, request: Request) -> Response:
        return await self.admit(request, "validate", fail_closed=False)

    async def mutate(self, request: Request) -> Response:
        return await self.admit(request, "mutate", fail_closed=False)

    async def validate_fail_closed(self, request: Request) -> Response:
        return await self.admit(request, "validate", fail_closed=True)

    async def mutate_fail_closed(self, request: Request) -> Response:
        return await self.admit(request, "mutate", fail_closed=True)

    async def admit(self, http: Request, endpoint: Endpoint, *, fail_closed: bool) -> Response:
        started = time.perf_counter()
        try:
            body = await _read_capped(http)
            request = parse_review(body)
        except ReviewError as error:
            self.metrics.observe_request(endpoint, "invalid", False, "unknown", "unknown",
                                         time.perf_counter() - started)
            return _invalid(error)
        except ClientDisconnect:
            return Response(status_code=400)
        except Exception as exc:  # a parser bug must still not become a 5xx
            log.exception("%s: could not read the AdmissionReview", endpoint)
            self.metrics.observe_request(endpoint, "invalid", False, "unknown", "unknown",
                                         time.perf_counter() - started)
            return _invalid(ReviewError(f"unreadable AdmissionReview (internal error: "
                                        f"{type(exc).__name__})"))
        deadline = self.settings.deadline(http.query_params.get("timeout"))
        outcome = _oversized(request) or await self.decide(
            endpoint, request, deadline - (time.perf_counter() - started),
            fail_closed=fail_closed or self.namespace_fails_closed(request.namespace))
        if outcome.evaluation is not None:
            for policy_id, seconds in outcome.evaluation.seconds_by_policy.items():
                self.metrics.policy_time.labels(policy_id).observe(seconds)
        kind = request.kind if request.kind in _METRIC_KINDS else "other"
        self.metrics.observe_request(endpoint, outcome.label, request.dry_run, kind,
                                     request.operation, time.perf_counter() - started)
        return _json(review_response(request.uid, outcome.decision))

    async def decide(self, endpoint: Endpoint, request: AdmissionRequest, budget: float, *,
                     fail_closed: bool = False) -> Outcome:
        """The judge's outcome, computed in a bounded worker pool so the deadline can cut it
        short; without a verdict, allowed or denied as the namespace fails open or closed."""
        now = self.clock()
        verb = "denied" if fail_closed else "allowed"
        try:
            return await self.executor.run(self.judge.decide, endpoint, request, now,
                                           timeout=max(budget, 0.001))
        except Busy:
            log.warning("%s %s: all %d evaluation slots are taken; %s", endpoint, request.uid,
                        self.executor.capacity, verb)
            return _without_verdict("busy", "too many evaluations in flight", fail_closed)
        except TimeoutError:
            log.warning("%s %s: evaluation passed the %.0f ms deadline; %s", endpoint,
                        request.uid, budget * 1000, verb)
            return _without_verdict("timeout", "policy evaluation passed its deadline",
                                    fail_closed)
        except Exception:  # a bug must not block a fail-open cluster: say so, log it
            log.exception("%s %s: evaluation failed; %s", endpoint, request.uid, verb)
            return _without_verdict("error", "policy evaluation failed", fail_closed)

    def namespace_fails_closed(self, namespace: str | None) -> bool:
        """Whether the cached namespace carries `<fail_closed_label>=true`."""
        labels = self.caches.namespace_labels(namespace) or {}
        return labels.get(self.settings.fail_closed_label) == "true"

    # ------------------------------------------------------------------ health and metrics

    async def healthz(self, request: Request) -> Response:
        return PlainTextResponse("ok")

    async def readyz(self, request: Request) -> Response:
        if not self.policies_loaded:
            return PlainTextResponse("no policies loaded", status_code=503)
        if not self.caches.ready:
            return PlainTextResponse("cluster cache not loaded yet", status_code=503)
        return PlainTextResponse("ready")

    async def metrics_endpoint(self, request: Request) -> Response:
        return Response(self.metrics.exposition(), media_type=self.metrics.content_type)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        if self.settings.admission.cloud is None and self.caches.lister is None:
            log.warning("no --cloud and --no-cluster: /mutate writes no spot patch (give "
                        "--cloud aws|eks|gke|azure to pin GPU workloads to spot)")
        task = asyncio.create_task(self.caches.run())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self.executor.shutdown()


def create_app(
    engine: Engine,
    *,
    settings: WebhookSettings | None = None,
    caches: ClusterCache | None = None,
    evaluator: Evaluator | None = None,
    clock: Callable[[], datetime] | None = None,
    metrics: WebhookMetrics | None = None,
) -> Starlette:
    """The webhook ASGI app. `caches` defaults to an empty, ready cache (no cluster);
    `evaluator` and `clock` are injectable for tests. The WebhookApp is `app.state.webhook`."""
    webhook = WebhookApp(
        engine,
        settings=settings or WebhookSettings(),
        caches=caches or ClusterCache(None),
        evaluator=evaluator,
        clock=clock or (lambda: datetime.now(UTC)),
        metrics=metrics or WebhookMetrics(),
    )
    app = Starlette(
        routes=[
            Route("/validate", webhook.validate, methods=["POST"]),
            Route("/mutate", webhook.mutate, methods=["POST"]),
            Route("/validate/fail-closed", webhook.validate_fail_closed, methods=["POST"]),
            Route("/mutate/fail-closed", webhook.mutate_fail_closed, methods=["POST"]),
            Route("/healthz", webhook.healthz, methods=["GET"]),
            Route("/readyz", webhook.readyz, methods=["GET"]),
            Route("/metrics", webhook.metrics_endpoint, methods=["GET"]),
        ],
        lifespan=webhook.lifespan,
    )
    app.state.webhook = webhook
    return app


# ---------------------------------------------------------------------------- helpers


async def _read_capped(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ReviewError(f"request body is {declared} bytes, over the {MAX_BODY_BYTES}-byte cap")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ReviewError(f"request body is over the {MAX_BODY_BYTES}-byte cap")
        chunks.append(chunk)
    return b"".join(chunks)


def _invalid(error: ReviewError) -> Response:
    if error.uid is not None:
        return _json(refusal(error.uid, f"gpuwarden: malformed AdmissionReview: {error.message}"))
    status = {"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": "BadRequest",
              "code": 400, "message": f"gpuwarden: {error.message}"}
    return _json(status, status_code=400)


def _oversized(request: AdmissionRequest) -> Outcome | None:
    """A refusal (400, never evaluated) of an object over a Kubernetes size limit."""
    if request.object is None or request.operation not in JUDGED_OPERATIONS:
        return None
    try:
        check_object(request.object, request.kind)
    except ObjectTooLarge as error:
        message = f"gpuwarden: invalid object, not evaluated: {error}"
        return Outcome(Decision(allowed=False, code=400, message=message,
                                audit_annotations={"evaluation": "invalid-object"}), "invalid")
    except Exception:  # a bug here must not become a 5xx: the bounded evaluation still runs
        log.exception("%s: could not measure the object", request.uid)
    return None


def _without_verdict(label: str, why: str, fail_closed: bool) -> Outcome:
    """No verdict: denied (503, the request may be retried) where the namespace fails closed,
    else allowed with a warning."""
    audit = {"evaluation": label}
    if fail_closed:
        message = f"gpuwarden: {why}; denied without a verdict (the namespace fails closed)"
        return Outcome(Decision(allowed=False, code=503, message=message,
                                audit_annotations=audit), f"{label}-deny")
    decision = Decision(warnings=[f"gpuwarden: {why}; allowed without a verdict"],
                        audit_annotations=audit)
    return Outcome(decision, label)


def _json(content: Any, status_code: int = 200) -> Response:
    return Response(orjson.dumps(content), status_code=status_code,
                    media_type="application/json")

"""Prometheus metrics of one webhook app, in a registry of its own (several apps per process in
tests never collide)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

# Seconds, at millisecond resolution where admission latencies live (the API server waits 2-3 s).
LATENCY_BUCKETS = (
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0,
)
POLICY_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.25, 1.0)


class WebhookMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        self.requests = Counter(
            "gpuwarden_admission_requests",
            "Admission reviews answered, by decision (allow, deny, warn, patch, skip, invalid; "
            "without a verdict: timeout, error, busy when allowed, timeout-deny, error-deny, "
            "busy-deny when the namespace fails closed).",
            ["endpoint", "decision", "dry_run", "kind", "operation"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "gpuwarden_admission_request_duration_seconds",
            "Time from reading the review to answering it, millisecond buckets.",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.policy_time = Histogram(
            "gpuwarden_policy_evaluation_seconds",
            "Evaluation time of one policy on one admitted workload.",
            ["policy"],
            buckets=POLICY_BUCKETS,
            registry=self.registry,
        )
        self.evaluations_in_flight = Gauge(
            "gpuwarden_admission_evaluations_in_flight",
            "Evaluations running or waiting for a thread, those past their deadline included.",
            registry=self.registry,
        )
        self.cert_expiry = Gauge(
            "gpuwarden_tls_certificate_expiry_timestamp_seconds",
            "notAfter of the serving certificate now loaded (Unix time).",
            registry=self.registry,
        )
        self.cert_reloads = Counter(
            "gpuwarden_tls_certificate_reloads",
            "Serving certificate reloads, by result.",
            ["result"],
            registry=self.registry,
        )
        self.cache_refreshed = Gauge(
            "gpuwarden_cluster_cache_refresh_timestamp_seconds",
            "When namespaces and GPU nodes were last listed (Unix time).",
            registry=self.registry,
        )
        self.cache_objects = Gauge(
            "gpuwarden_cluster_cache_objects",
            "Objects in the cluster cache, by kind.",
            ["kind"],
            registry=self.registry,
        )

    def observe_request(self, endpoint: str, decision: str, dry_run: bool, kind: str,
                        operation: str, seconds: float) -> None:
        self.requests.labels(endpoint, decision, "true" if dry_run else "false",
                             kind[:63] or "unknown", operation[:16] or "unknown").inc()
        self.latency.labels(endpoint).observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

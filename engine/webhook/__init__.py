"""The Kubernetes admission webhook: `gpuwarden webhook` serves /validate and /mutate
(AdmissionReview admission.k8s.io/v1), /healthz, /readyz and /metrics."""

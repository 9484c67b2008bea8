# gpuwarden admission webhook: namespace, RBAC, a highly available Deployment on on-demand nodes,
# PDB, Service, a NetworkPolicy admitting only the API server, cert-manager certificate, and
# separate validating/mutating configurations.

locals {
  labels = {
    "app.kubernetes.io/name"       = "gpuwarden"
    "app.kubernetes.io/component"  = "admission-webhook"
    "app.kubernetes.io/managed-by" = "terraform"
  }
  selector       = { "app.kubernetes.io/name" = "gpuwarden", "app.kubernetes.io/component" = "admission-webhook" }
  tls_secret     = "${var.name}-tls"
  certificate    = "${var.name}-cert"
  issuer         = "${var.name}-selfsigned"
  service_host   = "${var.name}.${var.namespace}.svc"
  inject_ca_from = "${var.namespace}/${local.certificate}"
  container_port = 8443
  client_ca_dir  = "/client-ca"

  # Never police the control plane's namespaces, nor the webhook's own (it must be able to
  # restart itself while it is down).
  excluded_namespaces = distinct(concat(
    ["kube-system", "kube-node-lease", "kube-public", var.namespace],
    var.excluded_namespaces,
  ))

  # Node labels marking spot/preemptible capacity, per cloud: the webhook must not run there.
  spot_node_labels = {
    "karpenter.sh/capacity-type"            = ["spot"]
    "eks.amazonaws.com/capacityType"        = ["SPOT"]
    "cloud.google.com/gke-spot"             = ["true"]
    "cloud.google.com/gke-preemptible"      = ["true"]
    "kubernetes.azure.com/scalesetpriority" = ["spot"]
  }
}

resource "kubernetes_namespace_v1" "this" {
  metadata {
    name   = var.namespace
    labels = local.labels
  }
}

# ------------------------------------------------------------------------------ RBAC

resource "kubernetes_service_account_v1" "this" {
  metadata {
    name      = var.name
    namespace = kubernetes_namespace_v1.this.metadata[0].name
    labels    = local.labels
  }
}

# The request path does no API calls: namespace labels, node GPU models, the DRA claims pods
# name and the kinds Rego policies declare for data.inventory come from caches fed by list/watch.
# Nothing else is readable, nothing is writable.
resource "kubernetes_cluster_role_v1" "this" {
  metadata {
    name   = var.name
    labels = local.labels
  }

  rule {
    api_groups = [""]
    resources  = ["namespaces", "nodes"]
    verbs      = ["list", "watch"]
  }

  rule {
    api_groups = ["resource.k8s.io"]
    resources  = ["resourceclaims", "resourceclaimtemplates"]
    verbs      = ["list", "watch"]
  }

  dynamic "rule" {
    for_each = var.inventory_kinds
    content {
      api_groups = [rule.value.api_group]
      resources  = rule.value.resources
      verbs      = ["list", "watch"]
    }
  }
}

resource "kubernetes_cluster_role_binding_v1" "this" {
  metadata {
    name   = var.name
    labels = local.labels
  }

  role_ref {
    api_group = "rbac.authorization.k8s.io"
    kind      = "ClusterRole"
    name      = kubernetes_cluster_role_v1.this.metadata[0].name
  }

  subject {
    kind      = "ServiceAccount"
    name      = kubernetes_service_account_v1.this.metadata[0].name
    namespace = kubernetes_namespace_v1.this.metadata[0].name
  }
}

# ------------------------------------------------------------------------------ certificate

resource "kubernetes_manifest" "issuer" {
  manifest = {
    apiVersion = "cert-manager.io/v1"
    kind       = "Issuer"
    metadata = {
      name      = local.issuer
      namespace = kubernetes_namespace_v1.this.metadata[0].name
      labels    = local.labels
    }
    spec = {
      selfSigned = {}
    }
  }
}

resource "kubernetes_manifest" "certificate" {
  manifest = {
    apiVersion = "cert-manager.io/v1"
    kind       = "Certificate"
    metadata = {
      name      = local.certificate
      namespace = kubernetes_namespace_v1.this.metadata[0].name
      labels    = local.labels
    }
    spec = {
      secretName  = local.tls_secret
      dnsNames    = [local.service_host, "${local.service_host}.cluster.local"]
      duration    = "2160h"
      renewBefore = "360h"
      privateKey = {
        algorithm      = "ECDSA"
        size           = 256
        rotationPolicy = "Always"
      }
      issuerRef = {
        kind = "Issuer"
        name = local.issuer
      }
    }
  }

  depends_on = [kubernetes_manifest.issuer]
}

# ------------------------------------------------------------------------------ workload

resource "kubernetes_deployment_v1" "this" {
  metadata {
    name      = var.name
    namespace = kubernetes_namespace_v1.this.metadata[0].name
    labels    = local.labels
  }

  spec {
    replicas = var.replicas

    selector {
      match_labels = local.selector
    }

    strategy {
      type = "RollingUpdate"
      rolling_update {
        max_unavailable = "0"
        max_surge       = "1"
      }
    }

    template {
      metadata {
        labels = local.labels
      }

      spec {
        service_account_name = kubernetes_service_account_v1.this.metadata[0].name
        priority_class_name  = var.priority_class_name != "" ? var.priority_class_name : null

        # On-demand nodes only: a spot reclaim must never take the admission path down.
        # NotIn also matches nodes that do not carry the label at all.
        affinity {
          node_affinity {
            required_during_scheduling_ignored_during_execution {
              node_selector_term {
                match_expressions {
                  key      = "karpenter.sh/capacity-type"
                  operator = "NotIn"
                  values   = local.spot_node_labels["karpenter.sh/capacity-type"]
                }
                match_expressions {
                  key      = "eks.amazonaws.com/capacityType"
                  operator = "NotIn"
                  values   = local.spot_node_labels["eks.amazonaws.com/capacityType"]
                }
                match_expressions {
                  key      = "cloud.google.com/gke-spot"
                  operator = "NotIn"
                  values   = local.spot_node_labels["cloud.google.com/gke-spot"]
                }
                match_expressions {
                  key      = "cloud.google.com/gke-preemptible"
                  operator = "NotIn"
                  values   = local.spot_node_labels["cloud.google.com/gke-preemptible"]
                }
                match_expressions {
                  key      = "kubernetes.azure.com/scalesetpriority"
                  operator = "NotIn"
                  values   = local.spot_node_labels["kubernetes.azure.com/scalesetpriority"]
                }
              }
            }
          }
        }

        topology_spread_constraint {
          max_skew           = 1
          topology_key       = "topology.kubernetes.io/zone"
          when_unsatisfiable = "ScheduleAnyway"
          label_selector {
            match_labels = local.selector
          }
        }

        topology_spread_constraint {
          max_skew           = 1
          topology_key       = "kubernetes.io/hostname"
          when_unsatisfiable = "ScheduleAnyway"
          label_selector {
            match_labels = local.selector
          }
        }

        security_context {
          run_as_non_root = true
          run_as_user     = 65532
          run_as_group    = 65532
          fs_group        = 65532
          seccomp_profile {
            type = "RuntimeDefault"
          }
        }

        container {
          name  = "webhook"
          image = var.image
          args = concat(
            ["webhook", "--cert", "/tls/tls.crt", "--key", "/tls/tls.key",
            "--host", "0.0.0.0", "--port", tostring(local.container_port), "--cloud", var.cloud],
            var.policies_config_map != "" ? ["--policies", "/policies"] : [],
            var.client_ca_secret != "" ? ["--client-ca", "${local.client_ca_dir}/ca.crt"] : [],
          )

          port {
            name           = "https"
            container_port = local.container_port
          }

          readiness_probe {
            http_get {
              path   = "/readyz"
              port   = local.container_port
              scheme = "HTTPS"
            }
            period_seconds    = 5
            failure_threshold = 2
          }

          liveness_probe {
            http_get {
              path   = "/healthz"
              port   = local.container_port
              scheme = "HTTPS"
            }
            initial_delay_seconds = 5
            period_seconds        = 10
            failure_threshold     = 3
          }

          resources {
            requests = var.resources.requests
            limits   = var.resources.limits
          }

          security_context {
            run_as_non_root            = true
            read_only_root_filesystem  = true
            allow_privilege_escalation = false
            capabilities {
              drop = ["ALL"]
            }
          }

          volume_mount {
            name       = "tls"
            mount_path = "/tls"
            read_only  = true
          }

          volume_mount {
            name       = "tmp"
            mount_path = "/tmp"
          }

          dynamic "volume_mount" {
            for_each = var.policies_config_map != "" ? [1] : []
            content {
              name       = "policies"
              mount_path = "/policies"
              read_only  = true
            }
          }

          dynamic "volume_mount" {
            for_each = var.client_ca_secret != "" ? [1] : []
            content {
              name       = "client-ca"
              mount_path = local.client_ca_dir
              read_only  = true
            }
          }
        }

        volume {
          name = "tls"
          secret {
            secret_name = local.tls_secret
          }
        }

        volume {
          name = "tmp"
          empty_dir {
            size_limit = "16Mi"
          }
        }

        dynamic "volume" {
          for_each = var.policies_config_map != "" ? [var.policies_config_map] : []
          content {
            name = "policies"
            config_map {
              name = volume.value
            }
          }
        }

        dynamic "volume" {
          for_each = var.client_ca_secret != "" ? [var.client_ca_secret] : []
          content {
            name = "client-ca"
            secret {
              secret_name = volume.value
              items {
                key  = "ca.crt"
                path = "ca.crt"
              }
            }
          }
        }
      }
    }
  }

  depends_on = [kubernetes_manifest.certificate]
}

resource "kubernetes_pod_disruption_budget_v1" "this" {
  metadata {
    name      = var.name
    namespace = kubernetes_namespace_v1.this.metadata[0].name
    labels    = local.labels
  }

  spec {
    max_unavailable = "1"
    selector {
      match_labels = local.selector
    }
  }
}

resource "kubernetes_service_v1" "this" {
  metadata {
    name      = var.name
    namespace = kubernetes_namespace_v1.this.metadata[0].name
    labels    = local.labels
  }

  spec {
    selector = local.selector
    port {
      name        = "https"
      port        = 443
      target_port = local.container_port
    }
  }
}

# ------------------------------------------------------------------------------ network policy
#
# Only the API server calls the webhook. A mutating webhook sees objects before the API server
# validates them, so a pod able to post reviews to the Service could feed it anything and tie it
# up: ingress to the webhook port is admitted only from var.api_server_cidrs and from namespaces
# labelled var.api_server_namespace_labels. The kubelet's probes come from the node, which
# NetworkPolicy always admits.

resource "kubernetes_network_policy_v1" "this" {
  count = var.network_policy_enabled ? 1 : 0

  metadata {
    name      = var.name
    namespace = kubernetes_namespace_v1.this.metadata[0].name
    labels    = local.labels
  }

  spec {
    pod_selector {
      match_labels = local.selector
    }
    policy_types = ["Ingress"]

    ingress {
      ports {
        port     = tostring(local.container_port)
        protocol = "TCP"
      }

      dynamic "from" {
        for_each = var.api_server_cidrs
        content {
          ip_block {
            cidr = from.value
          }
        }
      }

      dynamic "from" {
        for_each = length(var.api_server_namespace_labels) > 0 ? [var.api_server_namespace_labels] : []
        content {
          namespace_selector {
            match_labels = from.value
          }
        }
      }
    }
  }

  lifecycle {
    precondition {
      condition     = length(var.api_server_cidrs) > 0 || length(var.api_server_namespace_labels) > 0
      error_message = "The NetworkPolicy would admit nobody: set api_server_cidrs (or api_server_namespace_labels), or network_policy_enabled = false."
    }
  }
}

# ------------------------------------------------------------------------------ webhooks
#
# Each configuration has two entries with the same rules: the default one (failurePolicy
# var.failure_policy, Ignore unless changed) for every namespace, and a fail-closed one (Fail)
# only for namespaces labelled var.fail_closed_label=true. A namespace is matched by exactly one.
# The fail-closed entries call /validate/fail-closed and /mutate/fail-closed, so the webhook
# itself denies what it cannot judge in time there instead of allowing it with a warning.
# cert-manager's CA injector fills caBundle, hence ignore_changes.

resource "kubernetes_validating_webhook_configuration_v1" "this" {
  metadata {
    name   = "${var.name}-validate"
    labels = local.labels
    annotations = {
      "cert-manager.io/inject-ca-from" = local.inject_ca_from
    }
  }

  webhook {
    name                      = "validate.gpuwarden.io"
    admission_review_versions = ["v1"]
    failure_policy            = var.failure_policy
    match_policy              = "Equivalent"
    side_effects              = "NoneOnDryRun"
    timeout_seconds           = 3

    client_config {
      service {
        namespace = kubernetes_namespace_v1.this.metadata[0].name
        name      = kubernetes_service_v1.this.metadata[0].name
        path      = "/validate"
        port      = 443
      }
    }

    namespace_selector {
      match_expressions {
        key      = "kubernetes.io/metadata.name"
        operator = "NotIn"
        values   = local.excluded_namespaces
      }
      match_expressions {
        key      = var.fail_closed_label
        operator = "NotIn"
        values   = ["true"]
      }
    }

    rule {
      api_groups   = [""]
      api_versions = ["v1"]
      resources    = ["pods"]
      operations   = ["CREATE", "UPDATE"]
      scope        = "Namespaced"
    }
    rule {
      api_groups   = ["apps"]
      api_versions = ["v1"]
      resources    = ["deployments", "statefulsets", "daemonsets", "replicasets"]
      operations   = ["CREATE", "UPDATE"]
      scope        = "Namespaced"
    }
    rule {
      api_groups   = ["batch"]
      api_versions = ["v1"]
      resources    = ["jobs", "cronjobs"]
      operations   = ["CREATE", "UPDATE"]
      scope        = "Namespaced"
    }
    dynamic "rule" {
      for_each = var.workload_kinds
      content {
        api_groups   = [rule.value.api_group]
        api_versions = rule.value.api_versions
        resources    = rule.value.resources
        operations   = ["CREATE", "UPDATE"]
        scope        = "*"
      }
    }
  }

  webhook {
    name                      = "validate-fail-closed.gpuwarden.io"
    admission_review_versions = ["v1"]
    failure_policy            = "Fail"
    match_policy              = "Equivalent"
    side_effects              = "NoneOnDryRun"
    timeout_seconds           = 3

    client_config {
      service {
        namespace = kubernetes_namespace_v1.this.metadata[0].name
        name      = kubernetes_service_v1.this.metadata[0].name
        path      = "/validate/fail-closed"
        port      = 443
      }
    }

    namespace_selector {
      match_expressions {
        key      = "kubernetes.io/metadata.name"
        operator = "NotIn"
        values   = local.excluded_namespaces
      }
      match_expressions {
        key      = var.fail_closed_label
        operator = "In"
        values   = ["true"]
      }
    }

    rule {
      api_groups   = [""]
      api_versions = ["v1"]
      resources    = ["pods"]
      operations   = ["CREATE", "UPDATE"]
      scope        = "Namespaced"
    }
    rule {
      api_groups   = ["apps"]
      api_versions = ["v1"]
      resources    = ["deployments", "statefulsets", "daemonsets", "replicasets"]
      operations   = ["CREATE", "UPDATE"]
      scope        = "Namespaced"
    }
    rule {
      api_groups   = ["batch"]
      api_versions = ["v1"]
      resources    = ["jobs", "cronjobs"]
      operations   = ["CREATE", "UPDATE"]
      scope        = "Namespaced"
    }
    dynamic "rule" {
      for_each = var.workload_kinds
      content {
        api_groups   = [rule.value.api_group]
        api_versions = rule.value.api_versions
        resources    = rule.value.resources
        operations   = ["CREATE", "UPDATE"]
        scope        = "*"
      }
    }
  }

  lifecycle {
    ignore_changes = [webhook[0].client_config[0].ca_bundle, webhook[1].client_config[0].ca_bundle]
  }

  depends_on = [kubernetes_deployment_v1.this]
}

# Pods are mutated on CREATE only (their spec is immutable); controller templates on CREATE
# and UPDATE; the custom kinds of var.workload_kinds on CREATE (most training jobs' replica
# templates are immutable once created).
resource "kubernetes_mutating_webhook_configuration_v1" "this" {
  metadata {
    name   = "${var.name}-mutate"
    labels = local.labels
    annotations = {
      "cert-manager.io/inject-ca-from" = local.inject_ca_from
    }
  }

  webhook {
    name                      = "mutate.gpuwarden.io"
    admission_review_versions = ["v1"]
    failure_policy            = var.failure_policy
    match_policy              = "Equivalent"
    side_effects              = "NoneOnDryRun"
    timeout_seconds           = 2
    reinvocation_policy       = "Never"

    client_config {
      service {
        namespace = kubernetes_namespace_v1.this.metadata[0].name
        name      = kubernetes_service_v1.this.metadata[0].name
        path      = "/mutate"
        port      = 443
      }
    }

    namespace_selector {
      match_expressions {
        key      = "kubernetes.io/metadata.name"
        operator = "NotIn"
        values   = local.excluded_namespaces
      }
      match_expressions {
        key      = var.fail_closed_label
        operator = "NotIn"
        values   = ["true"]
      }
    }

    rule {
      api_groups   = [""]
      api_versions = ["v1"]
      resources    = ["pods"]
      operations   = ["CREATE"]
      scope        = "Namespaced"
    }
    rule {
      api_groups   = ["apps"]
      api_versions = ["v1"]
      resources    = ["deployments", "statefulsets", "daemonsets", "replicasets"]
      operations   = ["CREATE", "UPDATE"]
      scope        = "Namespaced"
    }
    rule {
      api_groups   = ["batch"]
      api_versions = ["v1"]
      resources    = ["jobs", "cronjobs"]
      operations   = ["CREATE", "UPDATE"]
      scope        = "Namespaced"
    }
    dynamic "rule" {
      for_each = var.workload_kinds
      content {
        api_groups   = [rule.value.api_group]
        api_versions = rule.value.api_versions
        resources    = rule.value.resources
        operations   = ["CREATE"]
        scope        = "*"
      }
    }
  }

  webhook {
    name                      = "mutate-fail-closed.gpuwarden.io"
    admission_review_versions = ["v1"]
    failure_policy            = "Fail"
    match_policy              = "Equivalent"
    side_effects              = "NoneOnDryRun"
    timeout_seconds           = 2
    reinvocation_policy       = "Never"

    client_config {
      service {
        namespace = kubernetes_namespace_v1.this.metadata[0].name
        name      = kubernetes_service_v1.this.metadata[0].name
        path      = "/mutate/fail-closed"
        port      = 443
      }
    }

    namespace_selector {
      match_expressions {
        key      = "kubernetes.io/metadata.name"
        operator = "NotIn"
        values   = local.excluded_namespaces
      }
      match_expressions {
        key      = var.fail_closed_label
        operator = "In"
        values   = ["true"]
      }
    }

    rule {
      api_groups   = [""]
      api_versions = ["v1"]
      resources    = ["pods"]
      operations   = ["CREATE"]
      scope        = "Namespaced"
    }
    rule {
      api_groups   = ["apps"]
      api_versions = ["v1"]
      resources    = ["deployments", "statefulsets", "daemonsets", "replicasets"]
      operations   = ["CREATE", "UPDATE"]
      scope        = "Namespaced"
    }
    rule {
      api_groups   = ["batch"]
      api_versions = ["v1"]
      resources    = ["jobs", "cronjobs"]
      operations   = ["CREATE", "UPDATE"]
      scope        = "Namespaced"
    }
    dynamic "rule" {
      for_each = var.workload_kinds
      content {
        api_groups   = [rule.value.api_group]
        api_versions = rule.value.api_versions
        resources    = rule.value.resources
        operations   = ["CREATE"]
        scope        = "*"
      }
    }
  }

  lifecycle {
    ignore_changes = [webhook[0].client_config[0].ca_bundle, webhook[1].client_config[0].ca_bundle]
  }

  depends_on = [kubernetes_deployment_v1.this]
}

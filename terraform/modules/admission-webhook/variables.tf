variable "namespace" {
  description = "Namespace the webhook runs in (created by this module; always exempt from the webhook)."
  type        = string
  default     = "gpuwarden"
}

variable "name" {
  description = "Base name of the webhook's Kubernetes objects."
  type        = string
  default     = "gpuwarden-webhook"
}

variable "image" {
  description = "gpuwarden container image, pinned by tag or digest."
  type        = string
  default     = "ghcr.io/gpuwarden/gpuwarden:0.1.0"
}

variable "replicas" {
  description = "Webhook replicas. At least 3, so a node drain or a zone loss never leaves it unavailable."
  type        = number
  default     = 3

  validation {
    condition     = var.replicas >= 3
    error_message = "replicas must be at least 3."
  }
}

variable "cloud" {
  description = "Cloud whose spot label the mutating webhook writes: aws | eks | gke | azure."
  type        = string
  default     = "aws"

  validation {
    condition     = contains(["aws", "eks", "gke", "azure"], var.cloud)
    error_message = "cloud must be one of aws, eks, gke, azure."
  }
}

variable "failure_policy" {
  description = "failurePolicy of the default webhook entries. Ignore: an unavailable webhook never blocks the cluster."
  type        = string
  default     = "Ignore"

  validation {
    condition     = contains(["Ignore", "Fail"], var.failure_policy)
    error_message = "failure_policy must be Ignore or Fail."
  }
}

variable "fail_closed_label" {
  description = "Namespaces carrying this label with value \"true\" opt in to the fail-closed (failurePolicy Fail) entries."
  type        = string
  default     = "gpuwarden.io/fail-closed"
}

variable "excluded_namespaces" {
  description = "Namespaces never sent to the webhook, besides the system ones and its own."
  type        = list(string)
  default     = []
}

variable "policies_config_map" {
  description = "Optional ConfigMap (in var.namespace) holding policy files, mounted at /policies."
  type        = string
  default     = ""
}

variable "resources" {
  description = "Container resource requests and limits."
  type = object({
    requests = map(string)
    limits   = map(string)
  })
  default = {
    requests = { cpu = "100m", memory = "128Mi" }
    limits   = { cpu = "1", memory = "256Mi" }
  }
}

variable "priority_class_name" {
  description = "PriorityClass for the webhook pods (empty: none)."
  type        = string
  default     = ""
}

variable "network_policy_enabled" {
  description = "Create a NetworkPolicy admitting ingress to the webhook port only from the API server (api_server_cidrs, api_server_namespace_labels). Turn off only where another control does this."
  type        = bool
  default     = true
}

variable "api_server_cidrs" {
  description = "Source CIDRs of the API server's calls to the webhook: the control plane's addresses as seen by pods (EKS: the VPC subnets of the control-plane ENIs; GKE private clusters: the master CIDR block; self-managed: the control-plane nodes). Required (with api_server_namespace_labels as the alternative) while network_policy_enabled."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for cidr in var.api_server_cidrs : can(cidrhost(cidr, 0))])
    error_message = "api_server_cidrs must hold CIDR blocks such as 10.0.0.0/16."
  }
}

variable "api_server_namespace_labels" {
  description = "Labels of namespaces whose pods may also call the webhook port (an API server running as pods, e.g. a virtual cluster). Empty: none."
  type        = map(string)
  default     = {}
}

variable "client_ca_secret" {
  description = "Optional Secret (in var.namespace) whose ca.crt signs the API server's client certificate: the webhook then refuses admission calls without one (--client-ca). The API server must be configured to present it (AdmissionConfiguration kubeConfigFile); managed control planes usually cannot. Empty: off."
  type        = string
  default     = ""
}

variable "workload_kinds" {
  description = <<-EOT
    Custom resources judged at admission besides Pods and the apps/batch controllers, so the
    custom resource itself is judged at `kubectl apply`, not its child pods later: one entry per
    API group with its plural resource names. The defaults are the kinds gpuwarden reads
    (engine/sources/kubernetes/crd_kinds.py and the Karpenter NodePool); a kind listed here that
    gpuwarden does not read is answered `unknown` when it asks for accelerators.
  EOT
  type = list(object({
    api_group    = string
    api_versions = list(string)
    resources    = list(string)
  }))
  default = [
    { api_group = "kubeflow.org", api_versions = ["*"], resources = ["pytorchjobs", "tfjobs", "mpijobs", "paddlejobs", "xgboostjobs", "jaxjobs", "mxjobs"] },
    { api_group = "trainer.kubeflow.org", api_versions = ["*"], resources = ["trainjobs"] },
    { api_group = "ray.io", api_versions = ["*"], resources = ["rayclusters", "rayjobs", "rayservices"] },
    { api_group = "leaderworkerset.x-k8s.io", api_versions = ["*"], resources = ["leaderworkersets"] },
    { api_group = "jobset.x-k8s.io", api_versions = ["*"], resources = ["jobsets"] },
    { api_group = "batch.volcano.sh", api_versions = ["*"], resources = ["jobs"] },
    { api_group = "serving.kserve.io", api_versions = ["*"], resources = ["inferenceservices", "llminferenceservices"] },
    { api_group = "sparkoperator.k8s.io", api_versions = ["*"], resources = ["sparkapplications"] },
    { api_group = "karpenter.sh", api_versions = ["*"], resources = ["nodepools"] },
  ]

  validation {
    condition = alltrue([for k in var.workload_kinds : k.api_group != "" && k.api_group != "*" &&
    !contains(k.resources, "*") && length(k.resources) > 0])
    error_message = "workload_kinds: name each API group and its resources (no \"*\", no core group)."
  }
}

variable "inventory_kinds" {
  description = "Kinds the Rego policies declare in rego.inventory (Gatekeeper's data.inventory, docs/rego.md): the webhook lists them, so it needs list/watch on each. One entry per API group (\"\" for the core group) with its plural resource names."
  type = list(object({
    api_group = string
    resources = list(string)
  }))
  default = []
  validation {
    condition     = alltrue([for kind in var.inventory_kinds : !contains(kind.resources, "*") && kind.api_group != "*" && !contains(kind.resources, "secrets")])
    error_message = "inventory_kinds names resources one by one, never *, and never secrets."
  }
}

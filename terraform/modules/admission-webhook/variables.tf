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

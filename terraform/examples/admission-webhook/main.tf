# Install the gpuwarden admission webhook into the cluster of the current kubeconfig context.
# Prerequisite: cert-manager (its CRDs must exist before `terraform plan`, as kubernetes_manifest
# reads them at plan time).

terraform {
  required_version = ">= 1.5"

  required_providers {
    kubernetes = {
      source  = "hashicorp/kubernetes"
      version = ">= 2.23"
    }
  }
}

provider "kubernetes" {
  config_path    = "~/.kube/config"
  config_context = var.kube_context
}

variable "kube_context" {
  description = "kubeconfig context of the target cluster."
  type        = string
  default     = null
}

module "gpuwarden_webhook" {
  source = "../../modules/admission-webhook"

  namespace           = "gpuwarden"
  image               = "ghcr.io/gpuwarden/gpuwarden:0.1.0"
  replicas            = 3
  cloud               = "eks"
  failure_policy      = "Ignore"
  excluded_namespaces = ["cert-manager", "karpenter"]
  api_server_cidrs    = ["10.0.0.0/16"] # the cluster VPC: EKS control-plane ENIs live there
}

output "fail_closed_label" {
  description = "kubectl label namespace <ns> <label>=true to make admission fail closed there."
  value       = module.gpuwarden_webhook.fail_closed_label
}

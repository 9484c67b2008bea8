output "namespace" {
  description = "Namespace the webhook runs in."
  value       = kubernetes_namespace_v1.this.metadata[0].name
}

output "service_name" {
  description = "Service fronting the webhook (port 443)."
  value       = kubernetes_service_v1.this.metadata[0].name
}

output "validating_webhook_configuration" {
  description = "Name of the ValidatingWebhookConfiguration."
  value       = kubernetes_validating_webhook_configuration_v1.this.metadata[0].name
}

output "mutating_webhook_configuration" {
  description = "Name of the MutatingWebhookConfiguration."
  value       = kubernetes_mutating_webhook_configuration_v1.this.metadata[0].name
}

output "fail_closed_label" {
  description = "Label a namespace with this key and value \"true\" to make the webhook fail closed for it."
  value       = var.fail_closed_label
}

output "state_machine_arn" {
  description = "The fan-out state machine; start an execution by hand with input {}."
  value       = aws_sfn_state_machine.this.arn
}

output "schedule_arn" {
  description = "The EventBridge Scheduler schedule starting the fan-out."
  value       = aws_scheduler_schedule.this.arn
}

output "items" {
  description = "The invocations of one run: one event per (account, region)."
  value       = local.items
}

output "role_arns" {
  description = "Distinct member roles, for the scheduled-enforcement module's role_arns."
  value       = distinct([for target in var.targets : target.role_arn])
}

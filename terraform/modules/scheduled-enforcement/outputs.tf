output "function_name" {
  description = "Name of the gpuwarden function."
  value       = aws_lambda_function.this.function_name
}

output "function_arn" {
  description = "ARN of the gpuwarden function (the fan-out module invokes it)."
  value       = aws_lambda_function.this.arn
}

output "function_role_arn" {
  description = "Execution role of the function: member accounts' scanning roles must trust it."
  value       = aws_iam_role.function.arn
}

output "schedule_arn" {
  description = "ARN of the EventBridge Scheduler schedule (null without create_schedule)."
  value       = var.create_schedule ? aws_scheduler_schedule.this[0].arn : null
}

output "report_bucket" {
  description = "Bucket the reports and audit logs are written to."
  value       = aws_s3_bucket.reports.id
}

output "report_prefix" {
  description = "Key prefix of the reports: <prefix>/<yyyy>/<mm>/<dd>/<run-id>.json."
  value       = var.report_prefix
}

output "log_group_name" {
  description = "CloudWatch log group of the function (one JSON object per line)."
  value       = aws_cloudwatch_log_group.function.name
}

output "member_role_policy_json" {
  description = "The scan policy (read-only, plus the enabled remediations when enforce is true) to attach to each member account's role listed in role_arns."
  value       = data.aws_iam_policy_document.scan.json
}

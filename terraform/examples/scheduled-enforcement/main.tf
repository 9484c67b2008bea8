# gpuwarden scheduled enforcement in one account, with an optional fan-out over member accounts.
#
#   scripts/build-lambda.sh                      # → dist/gpuwarden-lambda.zip
#   terraform init && terraform apply            # dry-run: read-only role, reports only
#   terraform apply -var enforce=true            # stop off-hours/idle GPUs (never production)

terraform {
  required_version = ">= 1.5"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.40"
    }
  }
}

provider "aws" {
  region = var.region
}

variable "region" {
  description = "Region the function runs in (and scans, without member_accounts)."
  type        = string
  default     = "us-east-1"
}

variable "enforce" {
  description = "Apply remediations; default dry-run."
  type        = bool
  default     = false
}

variable "member_accounts" {
  description = "Other accounts to scan through the fan-out: their scanning role (trusting the function's role) and regions."
  type = list(object({
    account_id = string
    role_arn   = string
    regions    = list(string)
  }))
  default = []
}

variable "alarm_topic_arn" {
  description = "SNS topic for run errors (null: no alarm)."
  type        = string
  default     = null
}

locals {
  fan_out = length(var.member_accounts) > 0
}

module "gpuwarden" {
  source = "../../modules/scheduled-enforcement"

  name         = "gpuwarden-enforcement"
  package_path = "${path.root}/../../../dist/gpuwarden-lambda.zip"

  enforce             = var.enforce
  remediation_actions = ["stop", "snapshot-before-stop"]
  max_actions         = 5
  policies            = ["builtin"]
  regions             = [var.region]
  role_arns           = [for account in var.member_accounts : account.role_arn]

  # Hourly at :30 on weekdays, read in the team's own time zone; with fan-out the state
  # machine's schedule replaces this one.
  create_schedule              = !local.fan_out
  schedule_expression          = "cron(30 * ? * MON-FRI *)"
  schedule_expression_timezone = "Europe/Berlin"

  report_encryption  = "AES256"
  log_retention_days = 30
  alarm_actions      = var.alarm_topic_arn == null ? [] : [var.alarm_topic_arn]

  tags = {
    team        = "platform"
    project     = "gpuwarden"
    cost-center = "finops"
  }
}

module "fan_out" {
  source = "../../modules/fan-out"
  count  = local.fan_out ? 1 : 0

  name                         = "gpuwarden-fan-out"
  function_arn                 = module.gpuwarden.function_arn
  targets                      = var.member_accounts
  max_concurrency              = 10
  event_overrides              = { max_actions = 3 }
  schedule_expression          = "cron(30 * ? * MON-FRI *)"
  schedule_expression_timezone = "Europe/Berlin"
}

output "report_location" {
  description = "Where the reports land."
  value       = "s3://${module.gpuwarden.report_bucket}/${module.gpuwarden.report_prefix}/"
}

output "member_role_policy_json" {
  description = "Attach to each member account's scanning role."
  value       = module.gpuwarden.member_role_policy_json
}

output "function_role_arn" {
  description = "Member roles trust this principal."
  value       = module.gpuwarden.function_role_arn
}

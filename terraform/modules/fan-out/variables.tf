variable "name" {
  description = "Name of the state machine, its roles, schedule and log group."
  type        = string
  default     = "gpuwarden-fan-out"

  validation {
    condition     = can(regex("^[A-Za-z0-9_-]{1,48}$", var.name))
    error_message = "name: 1-48 letters, digits, - or _."
  }
}

variable "function_arn" {
  description = "The gpuwarden function (module scheduled-enforcement, with create_schedule = false)."
  type        = string
}

variable "targets" {
  description = "Accounts to scan: the role the function assumes in each and its regions. One invocation per (account, region). Empty with organization."
  type = list(object({
    account_id = string
    role_arn   = string
    regions    = list(string)
  }))
  default = []

  validation {
    condition     = alltrue([for t in var.targets : length(t.regions) > 0])
    error_message = "targets: each with at least one region."
  }

  validation {
    condition     = alltrue([for t in var.targets : can(regex("^arn:aws[a-z-]*:iam::${t.account_id}:role/", t.role_arn))])
    error_message = "targets: each role_arn must be an IAM role of its account_id."
  }
}

variable "organization" {
  description = "Instead of targets: every ACTIVE account of the AWS Organization, listed at each run by the function itself ({\"discover\": \"organization\"}; deploy it with organization_role_name), scanned in these regions."
  type = object({
    regions = list(string)
  })
  default = null

  validation {
    condition     = var.organization == null || try(length(var.organization.regions) > 0 && length(var.organization.regions) <= 64, false)
    error_message = "organization: 1 to 64 regions."
  }
}

variable "event_overrides" {
  description = "Fields added to every invocation's event, e.g. { max_actions = 3 } or { mode = \"dry-run\" }."
  type        = any
  default     = {}

  validation {
    condition     = length(setsubtract(keys(var.event_overrides), ["mode", "policies", "max_actions"])) == 0
    error_message = "event_overrides: only mode, policies, max_actions (regions and role_arn come from targets)."
  }
}

variable "max_concurrency" {
  description = "Most (account, region) invocations running at once: bounds API load and Lambda concurrency."
  type        = number
  default     = 10

  validation {
    condition     = var.max_concurrency >= 1 && var.max_concurrency <= 1000
    error_message = "max_concurrency must be between 1 and 1000."
  }
}

variable "tolerated_failure_percentage" {
  description = "Share of failed invocations (0-100) the run tolerates before it is marked failed; the others always run to the end."
  type        = number
  default     = 100

  validation {
    condition     = var.tolerated_failure_percentage >= 0 && var.tolerated_failure_percentage <= 100
    error_message = "tolerated_failure_percentage must be between 0 and 100."
  }
}

variable "schedule_expression" {
  description = "EventBridge Scheduler expression for the whole fan-out."
  type        = string
  default     = "cron(30 * * * ? *)"
}

variable "schedule_kms_key_arn" {
  description = "Customer managed KMS key encrypting the schedule's target input (null: an AWS owned key)."
  type        = string
  default     = null
}

variable "schedule_expression_timezone" {
  description = "IANA time zone of the cron expression."
  type        = string
  default     = "UTC"
}

variable "schedule_enabled" {
  description = "Schedule state: true ENABLED, false DISABLED."
  type        = bool
  default     = true
}

variable "log_retention_days" {
  description = "Retention of the state machine's log group."
  type        = number
  default     = 30
}

variable "log_level" {
  description = "Step Functions log level: ALL, ERROR, FATAL or OFF."
  type        = string
  default     = "ERROR"

  validation {
    condition     = contains(["ALL", "ERROR", "FATAL", "OFF"], var.log_level)
    error_message = "log_level must be ALL, ERROR, FATAL or OFF."
  }
}

variable "log_execution_data" {
  description = "Include each state's input and output (account ids, role ARNs, run summaries) in the logs."
  type        = bool
  default     = false
}

variable "tracing_enabled" {
  description = "AWS X-Ray tracing of the state machine."
  type        = bool
  default     = false
}

variable "log_kms_key_arn" {
  description = "KMS key for the state machine's log group (null: CloudWatch Logs' own encryption)."
  type        = string
  default     = null
}

variable "permissions_boundary_arn" {
  description = "Permissions boundary attached to the roles this module creates."
  type        = string
  default     = null
}

variable "tags" {
  description = "Tags for every resource the module creates."
  type        = map(string)
  default     = {}
}

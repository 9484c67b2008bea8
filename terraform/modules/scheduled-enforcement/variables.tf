variable "name" {
  description = "Name of the function, its roles, schedule and log group."
  type        = string
  default     = "gpuwarden-enforcement"

  validation {
    condition     = can(regex("^[A-Za-z0-9_-]{1,48}$", var.name))
    error_message = "name: 1-48 letters, digits, - or _ (it prefixes role names)."
  }
}

variable "package_path" {
  description = "Deployment zip built by scripts/build-lambda.sh (arm64, python3.12)."
  type        = string
}

variable "memory_size" {
  description = "Function memory in MiB (CPU grows with it; 1024 scans a few thousand resources in seconds)."
  type        = number
  default     = 1024

  validation {
    condition     = var.memory_size >= 256 && var.memory_size <= 10240
    error_message = "memory_size must be between 256 and 10240 MiB."
  }
}

variable "timeout" {
  description = "Function timeout in seconds."
  type        = number
  default     = 300

  validation {
    condition     = var.timeout >= 30 && var.timeout <= 900
    error_message = "timeout must be between 30 and 900 seconds."
  }
}

variable "reserved_concurrency" {
  description = "Reserved concurrency of the function (-1: unreserved). With the fan-out, at least its max_concurrency."
  type        = number
  default     = -1
}

variable "lambda_kms_key_arn" {
  description = "KMS key encrypting the function's environment variables (null: the AWS managed key)."
  type        = string
  default     = null
}

variable "code_signing_config_arn" {
  description = "Lambda code signing configuration the deployment zip must satisfy (null: none)."
  type        = string
  default     = null
}

variable "dead_letter_target_arn" {
  description = "SQS queue or SNS topic receiving events whose invocation failed (null: none)."
  type        = string
  default     = null
}

variable "enforce" {
  description = "Apply remediations (stop, scale to zero, tag). false: dry-run only, and the role gets read-only permissions."
  type        = bool
  default     = false
}

variable "remediation_actions" {
  description = "Mutating actions the role may perform when enforce is true. The built-in pack needs stop (gpu-off-hours-shutdown, gpu-idle); snapshot-before-stop snapshots volumes tagged gpuwarden:snapshot-before-stop=true first; mark-violation only for your own policies that use it with runtime: deny."
  type        = set(string)
  default     = ["stop", "snapshot-before-stop"]

  validation {
    condition     = length(setsubtract(var.remediation_actions, ["stop", "snapshot-before-stop", "mark-violation"])) == 0
    error_message = "remediation_actions: each one of stop, snapshot-before-stop, mark-violation."
  }
}

variable "policies" {
  description = "Policy files or directories inside the package (relative to its root), or \"builtin\"."
  type        = list(string)
  default     = ["builtin"]
}

variable "regions" {
  description = "Regions to scan (\"all\" for every enabled one). Empty: the function's own region."
  type        = list(string)
  default     = []
}

variable "role_arns" {
  description = "Roles to assume, one per account to scan (the function may assume these and no others). Empty: the function's own account."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for arn in var.role_arns : can(regex("^arn:aws[a-z-]*:iam::[0-9]{12}:role/", arn))])
    error_message = "role_arns: IAM role ARNs (arn:aws:iam::123456789012:role/NAME)."
  }
}

variable "organization_role_name" {
  description = "Scan the whole AWS Organization: the role (name, optionally behind a path) assumed in every ACTIVE member account, e.g. \"gpuwarden-scan\". Deploy the function in the management account or a delegated administrator account. Null: role_arns, or the function's own account."
  type        = string
  default     = null

  validation {
    condition     = var.organization_role_name == null || can(regex("^([A-Za-z0-9+=,.@_-]{1,64}/){0,8}[A-Za-z0-9+=,.@_-]{1,64}$", var.organization_role_name))
    error_message = "organization_role_name: an IAM role name (letters, digits, +=,.@_-), optionally behind a path."
  }
}

variable "max_actions" {
  description = "Blast radius: the most changes one run may make."
  type        = number
  default     = 10

  validation {
    condition     = var.max_actions >= 0 && floor(var.max_actions) == var.max_actions
    error_message = "max_actions must be a whole number, 0 or more."
  }
}

variable "create_schedule" {
  description = "Create the EventBridge Scheduler schedule. false when the fan-out module invokes the function instead."
  type        = bool
  default     = true
}

variable "schedule_enabled" {
  description = "Schedule state: true ENABLED, false DISABLED (kept, not firing)."
  type        = bool
  default     = true
}

variable "schedule_expression" {
  description = "EventBridge Scheduler expression: cron(...), rate(...) or at(...). Default: hourly at :30."
  type        = string
  default     = "cron(30 * * * ? *)"

  validation {
    condition     = can(regex("^(cron|rate|at)\\(.+\\)$", var.schedule_expression))
    error_message = "schedule_expression must be cron(...), rate(...) or at(...)."
  }
}

variable "schedule_kms_key_arn" {
  description = "Customer managed KMS key encrypting the schedule's target input (null: an AWS owned key)."
  type        = string
  default     = null
}

variable "schedule_expression_timezone" {
  description = "IANA time zone the cron expression is read in (e.g. Europe/Berlin). Off-hours decisions themselves use each resource's own schedule."
  type        = string
  default     = "UTC"
}

variable "report_bucket_name" {
  description = "Name of the reports bucket to create. null: a generated name starting with the function name."
  type        = string
  default     = null
}

variable "report_prefix" {
  description = "Key prefix of reports: <prefix>/<yyyy>/<mm>/<dd>/<run-id>.json (and .audit.jsonl)."
  type        = string
  default     = "gpuwarden"

  validation {
    condition     = can(regex("^[A-Za-z0-9!_.*'()-]+(/[A-Za-z0-9!_.*'()-]+)*$", var.report_prefix))
    error_message = "report_prefix: one or more path segments, no leading or trailing slash."
  }
}

variable "report_encryption" {
  description = "Server-side encryption of the reports bucket: AES256 (S3 managed keys) or aws:kms."
  type        = string
  default     = "AES256"

  validation {
    condition     = contains(["AES256", "aws:kms"], var.report_encryption)
    error_message = "report_encryption must be AES256 or aws:kms."
  }
}

variable "kms_key_arn" {
  description = "Customer managed KMS key for the reports (with report_encryption = aws:kms). null: the AWS managed aws/s3 key."
  type        = string
  default     = null
}

variable "report_retention_days" {
  description = "Days a report stays current before it expires (then kept noncurrent_version_retention_days as a noncurrent version)."
  type        = number
  default     = 365
}

variable "noncurrent_version_retention_days" {
  description = "Days a replaced or expired report version is kept."
  type        = number
  default     = 30
}

variable "force_destroy_bucket" {
  description = "Let terraform destroy the reports bucket with reports in it."
  type        = bool
  default     = false
}

variable "log_retention_days" {
  description = "CloudWatch Logs retention of the function's log group."
  type        = number
  default     = 30

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days must be a retention CloudWatch Logs accepts (1, 3, 5, 7, 14, 30, 60, 90, ...)."
  }
}

variable "log_kms_key_arn" {
  description = "KMS key encrypting the log group (its key policy must allow logs.<region>.amazonaws.com). null: CloudWatch Logs' own encryption."
  type        = string
  default     = null
}

variable "managed_tag_key" {
  description = "When set, mutating permissions need this tag with value \"true\" on the resource (opt-in enforcement, e.g. gpuwarden-managed)."
  type        = string
  default     = null
}

variable "permissions_boundary_arn" {
  description = "Permissions boundary attached to the roles this module creates."
  type        = string
  default     = null
}

variable "alarm_actions" {
  description = "SNS topic ARNs notified when a run logs an error or the function fails. Empty: no alarm."
  type        = list(string)
  default     = []
}

variable "tags" {
  description = "Tags for every resource the module creates."
  type        = map(string)
  default     = {}
}

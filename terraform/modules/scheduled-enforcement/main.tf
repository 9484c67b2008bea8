# gpuwarden scheduled enforcement: a Lambda function on an EventBridge Scheduler schedule that
# scans AWS, reports to S3 and (only with enforce = true) remediates within a blast radius.

locals {
  environment = merge(
    {
      GPUWARDEN_MODE          = var.enforce ? "enforce" : "dry-run"
      GPUWARDEN_ALLOW_ENFORCE = var.enforce ? "true" : "false"
      GPUWARDEN_POLICIES      = join(",", var.policies)
      GPUWARDEN_MAX_ACTIONS   = tostring(var.max_actions)
      GPUWARDEN_REPORT_BUCKET = aws_s3_bucket.reports.bucket
      GPUWARDEN_REPORT_PREFIX = var.report_prefix
      GPUWARDEN_REPORT_SSE    = var.report_encryption
    },
    length(var.regions) > 0 ? { GPUWARDEN_REGIONS = join(",", var.regions) } : {},
    length(var.role_arns) > 0 ? { GPUWARDEN_ROLE_ARNS = join(",", var.role_arns) } : {},
    var.organization_role_name != null ? { GPUWARDEN_ORGANIZATION_ROLE = var.organization_role_name } : {},
    var.report_encryption == "aws:kms" && var.kms_key_arn != null ? { GPUWARDEN_REPORT_KMS_KEY_ID = var.kms_key_arn } : {},
  )

  # EventBridge Scheduler fills these in at each invocation (its context attributes); the
  # handler uses them for the run id and its logs. Mode, policies, regions come from the
  # environment above.
  schedule_input = jsonencode({
    source         = "gpuwarden.schedule"
    schedule_arn   = "<aws.scheduler.schedule-arn>"
    scheduled_time = "<aws.scheduler.scheduled-time>"
    execution_id   = "<aws.scheduler.execution-id>"
    attempt_number = "<aws.scheduler.attempt-number>"
  })
}

# ------------------------------------------------------------------------------------ reports

resource "aws_s3_bucket" "reports" {
  bucket        = var.report_bucket_name
  bucket_prefix = var.report_bucket_name == null ? "${lower(var.name)}-reports-" : null
  force_destroy = var.force_destroy_bucket
  tags          = var.tags
}

resource "aws_s3_bucket_ownership_controls" "reports" {
  bucket = aws_s3_bucket.reports.id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_public_access_block" "reports" {
  bucket                  = aws_s3_bucket.reports.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_versioning" "reports" {
  bucket = aws_s3_bucket.reports.id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "reports" {
  bucket = aws_s3_bucket.reports.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = var.report_encryption
      kms_master_key_id = var.report_encryption == "aws:kms" ? var.kms_key_arn : null
    }
    bucket_key_enabled = var.report_encryption == "aws:kms"
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "reports" {
  bucket = aws_s3_bucket.reports.id

  rule {
    id     = "expire-reports"
    status = "Enabled"
    filter {
      prefix = "${var.report_prefix}/"
    }
    expiration {
      days = var.report_retention_days
    }
    noncurrent_version_expiration {
      noncurrent_days = var.noncurrent_version_retention_days
    }
  }

  rule {
    id     = "abort-incomplete-uploads"
    status = "Enabled"
    filter {}
    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }

  depends_on = [aws_s3_bucket_versioning.reports]
}

data "aws_iam_policy_document" "reports_bucket" {
  statement {
    sid     = "DenyInsecureTransport"
    effect  = "Deny"
    actions = ["s3:*"]
    resources = [
      aws_s3_bucket.reports.arn,
      "${aws_s3_bucket.reports.arn}/*",
    ]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_policy" "reports" {
  bucket = aws_s3_bucket.reports.id
  policy = data.aws_iam_policy_document.reports_bucket.json

  depends_on = [aws_s3_bucket_public_access_block.reports]
}

# ------------------------------------------------------------------------------------ logs

resource "aws_cloudwatch_log_group" "function" {
  name              = "/aws/lambda/${var.name}"
  retention_in_days = var.log_retention_days
  kms_key_id        = var.log_kms_key_arn
  tags              = var.tags
}

# Every log line is one JSON object; a run's problems are logged at level "error".
resource "aws_cloudwatch_log_metric_filter" "run_errors" {
  name           = "${var.name}-run-errors"
  log_group_name = aws_cloudwatch_log_group.function.name
  pattern        = "{ $.level = \"error\" }"

  metric_transformation {
    name          = "RunErrors"
    namespace     = "gpuwarden"
    value         = "1"
    default_value = "0"
    dimensions    = {}
  }
}

resource "aws_cloudwatch_metric_alarm" "run_errors" {
  count               = length(var.alarm_actions) > 0 ? 1 : 0
  alarm_name          = "${var.name}-run-errors"
  alarm_description   = "gpuwarden logged an error (bad event, unreadable region, failed remediation or report upload)."
  namespace           = "gpuwarden"
  metric_name         = "RunErrors"
  statistic           = "Sum"
  period              = 3600
  evaluation_periods  = 1
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "function_errors" {
  count               = length(var.alarm_actions) > 0 ? 1 : 0
  alarm_name          = "${var.name}-function-errors"
  alarm_description   = "The gpuwarden function failed (timeout, crash)."
  namespace           = "AWS/Lambda"
  metric_name         = "Errors"
  dimensions          = { FunctionName = aws_lambda_function.this.function_name }
  statistic           = "Sum"
  period              = 3600
  evaluation_periods  = 1
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  tags                = var.tags
}

# ------------------------------------------------------------------------------------ function

resource "aws_lambda_function" "this" {
  function_name    = var.name
  description      = "gpuwarden: GPU spend guardrails (${var.enforce ? "enforce" : "dry-run"})"
  role             = aws_iam_role.function.arn
  handler          = "engine.lambda_handler.handler"
  runtime          = "python3.12"
  architectures    = ["arm64"]
  filename         = var.package_path
  source_code_hash = filebase64sha256(var.package_path)
  memory_size      = var.memory_size
  timeout          = var.timeout
  kms_key_arn      = var.lambda_kms_key_arn

  reserved_concurrent_executions = var.reserved_concurrency
  code_signing_config_arn        = var.code_signing_config_arn

  environment {
    variables = local.environment
  }

  dynamic "dead_letter_config" {
    for_each = var.dead_letter_target_arn == null ? [] : [var.dead_letter_target_arn]
    content {
      target_arn = dead_letter_config.value
    }
  }

  logging_config {
    log_format = "Text" # each line is already a JSON object
    log_group  = aws_cloudwatch_log_group.function.name
  }

  tags = var.tags

  depends_on = [aws_iam_role_policy.function, aws_cloudwatch_log_group.function]
}

# A run is not retried by Lambda: a retry would scan again and could act on a changed estate.
resource "aws_lambda_function_event_invoke_config" "this" {
  function_name                = aws_lambda_function.this.function_name
  maximum_retry_attempts       = 0
  maximum_event_age_in_seconds = 3600
}

# ------------------------------------------------------------------------------------ schedule

resource "aws_scheduler_schedule" "this" {
  count       = var.create_schedule ? 1 : 0
  name        = var.name
  description = "gpuwarden ${var.enforce ? "enforcement" : "dry-run scan"}"
  group_name  = "default"
  state       = var.schedule_enabled ? "ENABLED" : "DISABLED"

  schedule_expression          = var.schedule_expression
  schedule_expression_timezone = var.schedule_expression_timezone
  kms_key_arn                  = var.schedule_kms_key_arn

  flexible_time_window {
    mode = "OFF"
  }

  target {
    arn      = aws_lambda_function.this.arn
    role_arn = aws_iam_role.scheduler[0].arn
    input    = local.schedule_input

    # Scheduler retries only when it cannot hand the event to Lambda (throttling), never a run.
    retry_policy {
      maximum_event_age_in_seconds = 900
      maximum_retry_attempts       = 3
    }
  }
}

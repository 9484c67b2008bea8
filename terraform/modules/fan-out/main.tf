# Fan-out past one account: one Step Functions execution per schedule tick, whose distributed
# map invokes the gpuwarden function once per (account, region) with
# {"regions": [region], "role_arn": ..., "account": ...}, at most max_concurrency at a time.
# Each invocation writes its own report; the execution shows which targets failed.
#
# With var.organization the targets are not listed here: the first state asks the function
# ({"discover": "organization"}, the same account discovery as `scan --organization`) at each
# run, so accounts joining or leaving the organization need no apply.

data "aws_partition" "current" {}
data "aws_caller_identity" "current" {}
data "aws_region" "current" {}

locals {
  items = flatten([
    for target in var.targets : [
      for region in target.regions : merge(var.event_overrides, {
        account  = target.account_id
        role_arn = target.role_arn
        regions  = [region]
      })
    ]
  ])

  # Built from the name: the role's policy needs it before the state machine exists.
  state_machine_arn = "arn:${data.aws_partition.current.partition}:states:${data.aws_region.current.name}:${data.aws_caller_identity.current.account_id}:stateMachine:${var.name}"
  execution_arns    = "arn:${data.aws_partition.current.partition}:states:${data.aws_region.current.name}:${data.aws_caller_identity.current.account_id}:execution:${var.name}/*"

  lambda_invoke = "arn:${data.aws_partition.current.partition}:states:::lambda:invoke"
  lambda_retry = [{
    ErrorEquals     = ["Lambda.ServiceException", "Lambda.AWSLambdaException", "Lambda.SdkClientException", "Lambda.TooManyRequestsException"]
    IntervalSeconds = 5
    MaxAttempts     = 3
    BackoffRate     = 2
    JitterStrategy  = "FULL"
  }]

  listed_targets = {
    Type       = "Pass"
    Result     = local.items
    ResultPath = "$.targets"
    Next       = "ScanEachTarget"
  }

  # The function lists the organization's accounts; each of its events gets event_overrides.
  discovered_targets = {
    Type       = "Task"
    Resource   = local.lambda_invoke
    Parameters = { FunctionName = var.function_arn, Payload = { discover = "organization", regions = try(var.organization.regions, []) } }
    ResultSelector = {
      "targets.$" = "$.Payload.targets"
      overrides   = var.event_overrides
    }
    Retry = local.lambda_retry
    Next  = "ScanEachTarget"
  }

  merge_overrides = {
    ItemSelector = { "event.$" = "States.JsonMerge($$.Map.Item.Value, $.overrides, false)" }
  }

  definition = jsonencode({
    Comment = "gpuwarden: one scan per (account, region)"
    StartAt = "Targets"
    States = {
      # (a tuple indexed, not a conditional: the two states are objects of different shapes)
      Targets = [local.listed_targets, local.discovered_targets][var.organization == null ? 0 : 1]
      ScanEachTarget = merge([{}, local.merge_overrides][var.organization == null ? 0 : 1], {
        Type      = "Map"
        Label     = "ScanEachTarget"
        ItemsPath = "$.targets"
        ItemProcessor = {
          ProcessorConfig = { Mode = "DISTRIBUTED", ExecutionType = "STANDARD" }
          StartAt         = "Scan"
          States = {
            Scan = {
              Type       = "Task"
              Resource   = local.lambda_invoke
              Parameters = { FunctionName = var.function_arn, "Payload.$" = var.organization == null ? "$" : "$.event" }
              OutputPath = "$.Payload"
              Retry      = local.lambda_retry
              Next       = "Rejected?"
            }
            # The function answers a bad event with {"error": ...} instead of failing.
            "Rejected?" = {
              Type    = "Choice"
              Choices = [{ Variable = "$.error", IsPresent = true, Next = "Rejected" }]
              Default = "Done"
            }
            Rejected = { Type = "Fail", Error = "gpuwarden.EventRejected", Cause = "the function rejected its event; see its log" }
            Done     = { Type = "Succeed" }
          }
        }
        MaxConcurrency             = var.max_concurrency
        ToleratedFailurePercentage = var.tolerated_failure_percentage
        ResultPath                 = null
        End                        = true
      })
    }
  })
}

resource "aws_cloudwatch_log_group" "state_machine" {
  name              = "/aws/vendedlogs/states/${var.name}"
  retention_in_days = var.log_retention_days
  kms_key_id        = var.log_kms_key_arn
  tags              = var.tags
}

# ------------------------------------------------------------------------------------ roles

data "aws_iam_policy_document" "states_trust" {
  statement {
    effect  = "Allow"
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["states.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
  }
}

data "aws_iam_policy_document" "state_machine" {
  statement {
    sid       = "InvokeGpuwarden"
    effect    = "Allow"
    actions   = ["lambda:InvokeFunction"]
    resources = [var.function_arn, "${var.function_arn}:*"]
  }

  # A distributed map runs its iterations as child executions of this state machine.
  statement {
    sid       = "RunChildExecutions"
    effect    = "Allow"
    actions   = ["states:StartExecution"]
    resources = [local.state_machine_arn]
  }

  statement {
    sid       = "TrackChildExecutions"
    effect    = "Allow"
    actions   = ["states:DescribeExecution", "states:StopExecution"]
    resources = [local.execution_arns]
  }

  dynamic "statement" {
    for_each = var.tracing_enabled ? ["xray"] : []
    content {
      sid       = "Trace"
      effect    = "Allow"
      actions   = ["xray:GetSamplingRules", "xray:GetSamplingTargets", "xray:PutTelemetryRecords", "xray:PutTraceSegments"]
      resources = ["*"]
    }
  }

  # Step Functions sets up log delivery with this role. The log-delivery actions are
  # permission-only (IAM accepts no resource but "*"): they are held to this region. The
  # resource-policy and log-group actions are scoped to the state machine's own log group.
  statement {
    sid    = "DeliverLogs"
    effect = "Allow"
    actions = [
      "logs:CreateLogDelivery",
      "logs:DeleteLogDelivery",
      "logs:GetLogDelivery",
      "logs:ListLogDeliveries",
      "logs:UpdateLogDelivery",
    ]
    resources = ["*"]
    condition {
      test     = "StringEquals"
      variable = "aws:RequestedRegion"
      values   = [data.aws_region.current.name]
    }
  }

  statement {
    sid    = "LogGroupPolicy"
    effect = "Allow"
    actions = [
      "logs:DescribeLogGroups",
      "logs:DescribeResourcePolicies",
      "logs:PutResourcePolicy",
    ]
    resources = [
      aws_cloudwatch_log_group.state_machine.arn,
      "${aws_cloudwatch_log_group.state_machine.arn}:*",
    ]
  }
}

resource "aws_iam_role" "state_machine" {
  name                 = "${var.name}-states"
  description          = "gpuwarden fan-out state machine"
  assume_role_policy   = data.aws_iam_policy_document.states_trust.json
  permissions_boundary = var.permissions_boundary_arn
  tags                 = var.tags
}

resource "aws_iam_role_policy" "state_machine" {
  name   = "fan-out"
  role   = aws_iam_role.state_machine.id
  policy = data.aws_iam_policy_document.state_machine.json
}

resource "aws_sfn_state_machine" "this" {
  name       = var.name
  type       = "STANDARD"
  role_arn   = aws_iam_role.state_machine.arn
  definition = local.definition

  logging_configuration {
    log_destination        = "${aws_cloudwatch_log_group.state_machine.arn}:*"
    include_execution_data = var.log_execution_data
    level                  = var.log_level
  }

  tracing_configuration {
    enabled = var.tracing_enabled
  }

  lifecycle {
    precondition {
      condition     = (length(var.targets) > 0) != (var.organization != null)
      error_message = "Give targets or organization (exactly one of them)."
    }
  }

  tags = var.tags

  depends_on = [aws_iam_role_policy.state_machine]
}

# ------------------------------------------------------------------------------------ schedule

data "aws_iam_policy_document" "scheduler_trust" {
  statement {
    effect  = "Allow"
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["scheduler.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
  }
}

data "aws_iam_policy_document" "scheduler" {
  statement {
    sid       = "StartFanOut"
    effect    = "Allow"
    actions   = ["states:StartExecution"]
    resources = [aws_sfn_state_machine.this.arn]
  }
}

resource "aws_iam_role" "scheduler" {
  name                 = "${var.name}-scheduler"
  description          = "EventBridge Scheduler starting ${var.name}"
  assume_role_policy   = data.aws_iam_policy_document.scheduler_trust.json
  permissions_boundary = var.permissions_boundary_arn
  tags                 = var.tags
}

resource "aws_iam_role_policy" "scheduler" {
  name   = "start"
  role   = aws_iam_role.scheduler.id
  policy = data.aws_iam_policy_document.scheduler.json
}

resource "aws_scheduler_schedule" "this" {
  name        = var.name
  description = var.organization == null ? "gpuwarden fan-out over ${length(local.items)} (account, region) targets" : "gpuwarden fan-out over the organization's accounts"
  group_name  = "default"
  state       = var.schedule_enabled ? "ENABLED" : "DISABLED"

  schedule_expression          = var.schedule_expression
  schedule_expression_timezone = var.schedule_expression_timezone
  kms_key_arn                  = var.schedule_kms_key_arn

  flexible_time_window {
    mode = "OFF"
  }

  target {
    arn      = aws_sfn_state_machine.this.arn
    role_arn = aws_iam_role.scheduler.arn
    input    = jsonencode({})

    retry_policy {
      maximum_event_age_in_seconds = 900
      maximum_retry_attempts       = 3
    }
  }
}

# Least privilege for the scan and its remediations.
#
# The actions are those the code declares next to its calls: the read-only ones of each AWS
# inventory section (engine/sources/aws/inventory.py) and of discovery, the fresh reads and the
# mutating ones, by remediation and tag key, of remediations/aws_actions.py.
# tests/test_iam_permissions.py holds this file to exactly those, and the declarations to the
# calls a scan and an enforcement really make: change the code and this file together.
#
# Read-only: listed one by one, no "*" actions. These APIs have no resource-level permissions,
# so their resource is "*".
#
# Mutating: only when var.enforce is true, only the remediations in var.remediation_actions,
# only on resources whose env/environment tag is not prod/production (IAM's second guard: the
# engine never plans a change on production), tag writes limited to gpuwarden's own keys.
# The same scan document serves the roles of member accounts (output member_role_policy_json):
# resource ARNs leave the account open, and a role only ever acts in its own account.
#
# Whole organization (var.organization_role_name): the function's own role lists the accounts
# (organization_actions, engine/sources/aws/organization.py) and may assume that one role name
# in any account; the member roles' trust policies decide which accounts let it in.

locals {
  read_only_actions = [
    "autoscaling:DescribeAutoScalingGroups",
    "autoscaling:DescribeLaunchConfigurations",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeInstances",
    "ec2:DescribeLaunchTemplateVersions",
    "ec2:DescribeLaunchTemplates",
    "ec2:DescribeRegions",
    "ec2:DescribeSpotPriceHistory",
    "ec2:DescribeTags",
    "ec2:DescribeVolumes",
    "ec2:GetEbsEncryptionByDefault",
    "eks:DescribeNodegroup",
    "eks:ListClusters",
    "eks:ListNodegroups",
    "kms:ListAliases",
    "sagemaker:DescribeEndpoint",
    "sagemaker:DescribeEndpointConfig",
    "sagemaker:DescribeNotebookInstance",
    "sagemaker:DescribeTrainingJob",
    "sagemaker:ListEndpoints",
    "sagemaker:ListNotebookInstances",
    "sagemaker:ListTags",
    "sagemaker:ListTrainingJobs",
  ]

  # Listing the organization's accounts: the function's own role only, never member roles.
  organization_actions = ["organizations:ListAccounts"]

  p = data.aws_partition.current.partition

  # One entry per statement: which remediation needs it, its actions, resources, and the tag
  # keys it may write (empty: it writes none).
  mutating_statements = [
    {
      sid         = "StopInstances"
      remediation = "stop"
      actions     = ["ec2:StopInstances"]
      resources   = ["arn:${local.p}:ec2:*:*:instance/*"]
      tag_keys    = []
    },
    {
      sid         = "MarkAndResumeStoppedInstances"
      remediation = "stop"
      actions     = ["ec2:CreateTags", "ec2:DeleteTags", "ec2:StartInstances"]
      resources   = ["arn:${local.p}:ec2:*:*:instance/*"]
      tag_keys    = ["gpuwarden:resume-schedule", "gpuwarden:stopped-by"]
    },
    {
      sid         = "ScaleAutoScalingGroupsToZero"
      remediation = "stop"
      actions     = ["autoscaling:CreateOrUpdateTags", "autoscaling:DeleteTags", "autoscaling:UpdateAutoScalingGroup"]
      resources   = ["arn:${local.p}:autoscaling:*:*:autoScalingGroup:*:autoScalingGroupName/*"]
      tag_keys    = ["gpuwarden:previous-size", "gpuwarden:resume-schedule", "gpuwarden:stopped-by"]
    },
    {
      sid         = "ScaleNodeGroupsToZeroAndBack"
      remediation = "stop"
      actions     = ["eks:TagResource", "eks:UntagResource", "eks:UpdateNodegroupConfig"]
      resources   = ["arn:${local.p}:eks:*:*:nodegroup/*/*/*"]
      tag_keys    = ["gpuwarden:previous-size", "gpuwarden:resume-schedule", "gpuwarden:stopped-by"]
    },
    {
      sid         = "StopNotebookInstances"
      remediation = "stop"
      actions     = ["sagemaker:StopNotebookInstance"]
      resources   = ["arn:${local.p}:sagemaker:*:*:notebook-instance/*"]
      tag_keys    = []
    },
    {
      sid         = "MarkAndResumeStoppedNotebookInstances"
      remediation = "stop"
      actions     = ["sagemaker:AddTags", "sagemaker:DeleteTags", "sagemaker:StartNotebookInstance"]
      resources   = ["arn:${local.p}:sagemaker:*:*:notebook-instance/*"]
      tag_keys    = ["gpuwarden:resume-schedule", "gpuwarden:stopped-by"]
    },
    {
      sid         = "SnapshotVolumesBeforeStop"
      remediation = "snapshot-before-stop"
      actions     = ["ec2:CreateSnapshot"]
      resources   = ["arn:${local.p}:ec2:*:*:volume/*", "arn:${local.p}:ec2:*::snapshot/*"]
      tag_keys    = []
    },
    {
      sid         = "TagNewSnapshots"
      remediation = "snapshot-before-stop"
      actions     = ["ec2:CreateTags"]
      resources   = ["arn:${local.p}:ec2:*::snapshot/*"]
      tag_keys    = ["gpuwarden:snapshot-of"]
    },
    {
      sid         = "MarkEc2Violations"
      remediation = "mark-violation"
      actions     = ["ec2:CreateTags"]
      resources   = ["arn:${local.p}:ec2:*:*:instance/*", "arn:${local.p}:ec2:*:*:volume/*", "arn:${local.p}:ec2:*:*:launch-template/*"]
      tag_keys    = ["gpuwarden:violation"]
    },
    {
      sid         = "MarkAutoScalingGroupViolations"
      remediation = "mark-violation"
      actions     = ["autoscaling:CreateOrUpdateTags"]
      resources   = ["arn:${local.p}:autoscaling:*:*:autoScalingGroup:*:autoScalingGroupName/*"]
      tag_keys    = ["gpuwarden:violation"]
    },
    {
      sid         = "MarkNodeGroupViolations"
      remediation = "mark-violation"
      actions     = ["eks:TagResource"]
      resources   = ["arn:${local.p}:eks:*:*:nodegroup/*/*/*"]
      tag_keys    = ["gpuwarden:violation"]
    },
    {
      sid         = "MarkSageMakerViolations"
      remediation = "mark-violation"
      actions     = ["sagemaker:AddTags"]
      resources   = ["arn:${local.p}:sagemaker:*:*:notebook-instance/*", "arn:${local.p}:sagemaker:*:*:training-job/*", "arn:${local.p}:sagemaker:*:*:endpoint/*"]
      tag_keys    = ["gpuwarden:violation"]
    },
  ]

  # Dry-run deployments get none of them.
  enabled_mutating_statements = var.enforce ? [
    for statement in local.mutating_statements : statement
    if contains(var.remediation_actions, statement.remediation)
  ] : []

  production_values = ["prod", "production"]
}

data "aws_partition" "current" {}
data "aws_caller_identity" "current" {}
data "aws_region" "current" {}

# What a scanning role needs, in this account or a member account.
data "aws_iam_policy_document" "scan" {
  statement {
    sid       = "ReadInventory"
    effect    = "Allow"
    actions   = local.read_only_actions
    resources = ["*"]
  }

  dynamic "statement" {
    for_each = local.enabled_mutating_statements
    content {
      sid       = statement.value.sid
      effect    = "Allow"
      actions   = statement.value.actions
      resources = statement.value.resources

      # Never production: IAM compares condition key names without case, values ignoring it.
      condition {
        test     = "StringNotEqualsIgnoreCase"
        variable = "aws:ResourceTag/env"
        values   = local.production_values
      }
      condition {
        test     = "StringNotEqualsIgnoreCase"
        variable = "aws:ResourceTag/environment"
        values   = local.production_values
      }

      dynamic "condition" {
        for_each = length(statement.value.tag_keys) > 0 ? [statement.value.tag_keys] : []
        content {
          test     = "ForAllValues:StringEquals"
          variable = "aws:TagKeys"
          values   = condition.value
        }
      }

      dynamic "condition" {
        for_each = statement.value.sid == "TagNewSnapshots" ? ["CreateSnapshot"] : []
        content {
          test     = "StringEquals"
          variable = "ec2:CreateAction"
          values   = [condition.value]
        }
      }

      dynamic "condition" {
        for_each = var.managed_tag_key != null && statement.value.sid != "TagNewSnapshots" ? [var.managed_tag_key] : []
        content {
          test     = "StringEqualsIgnoreCase"
          variable = "aws:ResourceTag/${condition.value}"
          values   = ["true"]
        }
      }
    }
  }
}

# The function's own role: the scan, plus its logs, its reports and the member roles.
data "aws_iam_policy_document" "function" {
  source_policy_documents = [data.aws_iam_policy_document.scan.json]

  statement {
    sid       = "WriteOwnLogs"
    effect    = "Allow"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.function.arn}:*"]
  }

  statement {
    sid       = "WriteReports"
    effect    = "Allow"
    actions   = ["s3:PutObject"]
    resources = ["${aws_s3_bucket.reports.arn}/${var.report_prefix}/*"]
  }

  # The run history (<report_prefix>/history/, GPUWARDEN_HISTORY's default) is read back for
  # notifications: "new" is new since the last recorded run.
  statement {
    sid       = "ReadRunHistory"
    effect    = "Allow"
    actions   = ["s3:GetObject"]
    resources = ["${aws_s3_bucket.reports.arn}/${var.report_prefix}/history/*"]
  }

  statement {
    sid       = "ListRunHistory"
    effect    = "Allow"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.reports.arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${var.report_prefix}/history/*"]
    }
  }

  dynamic "statement" {
    for_each = var.report_encryption == "aws:kms" && var.kms_key_arn != null ? [var.kms_key_arn] : []
    content {
      sid       = "EncryptReports"
      effect    = "Allow"
      actions   = ["kms:GenerateDataKey"]
      resources = [statement.value]
    }
  }

  dynamic "statement" {
    for_each = var.dead_letter_target_arn == null ? [] : [var.dead_letter_target_arn]
    content {
      sid       = "DeadLetter"
      effect    = "Allow"
      actions   = [startswith(split(":", statement.value)[2], "sqs") ? "sqs:SendMessage" : "sns:Publish"]
      resources = [statement.value]
    }
  }

  dynamic "statement" {
    for_each = length(var.role_arns) > 0 ? [var.role_arns] : []
    content {
      sid       = "AssumeMemberRoles"
      effect    = "Allow"
      actions   = ["sts:AssumeRole"]
      resources = statement.value
    }
  }

  dynamic "statement" {
    for_each = var.organization_role_name != null ? [local.organization_actions] : []
    content {
      sid       = "ListOrganizationAccounts"
      effect    = "Allow"
      actions   = statement.value
      resources = ["*"]
    }
  }

  dynamic "statement" {
    for_each = var.organization_role_name != null ? [var.organization_role_name] : []
    content {
      sid       = "AssumeOrganizationRoles"
      effect    = "Allow"
      actions   = ["sts:AssumeRole"]
      resources = ["arn:${local.p}:iam::*:role/${statement.value}"]
    }
  }
}

data "aws_iam_policy_document" "lambda_trust" {
  statement {
    effect  = "Allow"
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["lambda.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "function" {
  name                 = "${var.name}-function"
  description          = "gpuwarden scheduled enforcement (${var.enforce ? "enforce" : "dry-run"})"
  assume_role_policy   = data.aws_iam_policy_document.lambda_trust.json
  permissions_boundary = var.permissions_boundary_arn
  tags                 = var.tags
}

resource "aws_iam_role_policy" "function" {
  name   = "gpuwarden"
  role   = aws_iam_role.function.id
  policy = data.aws_iam_policy_document.function.json
}

# EventBridge Scheduler's role: invoke this one function, for schedules of this account only.
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
    sid       = "InvokeGpuwarden"
    effect    = "Allow"
    actions   = ["lambda:InvokeFunction"]
    resources = [aws_lambda_function.this.arn]
  }
}

resource "aws_iam_role" "scheduler" {
  count                = var.create_schedule ? 1 : 0
  name                 = "${var.name}-scheduler"
  description          = "EventBridge Scheduler invoking ${var.name}"
  assume_role_policy   = data.aws_iam_policy_document.scheduler_trust.json
  permissions_boundary = var.permissions_boundary_arn
  tags                 = var.tags
}

resource "aws_iam_role_policy" "scheduler" {
  count  = var.create_schedule ? 1 : 0
  name   = "invoke"
  role   = aws_iam_role.scheduler[0].id
  policy = data.aws_iam_policy_document.scheduler.json
}

# The workers: an Auto Scaling group of spot instances (several types,
# capacity-optimized, capacity rebalancing) from a launch template with the
# same user_data, instance role and security group as the ventilator, sized by
# AWS on the ventilator's backlog (docs/fleet.md, "A fleet that sizes itself"):
#
# * target tracking on Backlog per in-service instance (metric math), the
#   target being the tasks one instance computes at once;
# * a wake-up step policy: tasks wait and the group is empty -> number_of_worker
#   (target tracking cannot scale out from zero instances);
# * a job-ended step policy: the ventilator's last JobActive = 0, or nothing
#   published for job_silence_minutes (the ventilator killed or never
#   started) -> min size;
# * a termination lifecycle hook: scale-in waits until the worker has drained
#   (it completes the action itself, see worker/lifecycle.py), or the timeout.
#
# number_of_worker is the desired size `terraform apply` sets when it creates
# the group; later applies leave the size the policies chose (ignore_changes).
# 0 turns the group off (min = max = 0), so no worker runs.  Instances the
# group starts install package_spec and start their workers at boot: with
# autoscale, nothing else would (a precondition refuses a group that would
# idle).

locals {
  worker_group_name    = "${var.fleet_name}-workers"
  drain_hook_name      = "${var.fleet_name}-drain"
  cloudwatch_namespace = "mlm-pipeline/${var.fleet_name}"
  worker_types         = length(var.worker_instance_types) > 0 ? var.worker_instance_types : [var.worker_instance_type]

  # number_of_worker = 0: the group is off. autoscale = false: a fixed group of number_of_worker.
  autoscale       = var.autoscale && var.number_of_worker > 0
  worker_max_size = local.autoscale ? max(var.worker_max_size, var.number_of_worker) : var.number_of_worker
  worker_min_size = local.autoscale ? min(var.worker_min_size, var.number_of_worker) : var.number_of_worker
  # null: as autoscale (var.autoscale, so a group turned off with number_of_worker = 0 asks nothing more).
  start_workers_on_boot = coalesce(var.start_workers_on_boot, var.autoscale)
  # What the group may launch must agree with worker_instance_type: --processes and the scaling target
  # come from its vCPUs, the AMI from its architecture.
  worker_vcpus = { for t, d in data.aws_ec2_instance_type.worker_types : t => d.default_vcpus }
  worker_archs = { for t, d in data.aws_ec2_instance_type.worker_types : t => sort(d.supported_architectures) }
  types_disagreeing = [for t in local.worker_types : t if(
    local.worker_vcpus[t] != data.aws_ec2_instance_type.worker.default_vcpus ||
    local.worker_archs[t] != sort(data.aws_ec2_instance_type.worker.supported_architectures)
  )]

  # Backlog (pending + leased tasks) one instance takes: one task per worker process, times the setting.
  target_backlog_per_instance = module.fleet.effective_worker_processes * var.scaling_tasks_per_process
}

data "aws_caller_identity" "current" {}

resource "aws_launch_template" "worker" {
  name_prefix   = "${var.fleet_name}-worker-"
  description   = "mlm-pipeline workers of fleet ${var.fleet_name}"
  image_id      = data.aws_ami.ubuntu[local.arch.worker].id
  instance_type = var.worker_instance_type
  key_name      = local.key_name
  user_data     = base64encode(module.fleet.worker_user_data)

  iam_instance_profile {
    name = aws_iam_instance_profile.worker.name
  }

  network_interfaces {
    associate_public_ip_address = var.associate_public_ip
    security_groups             = [aws_security_group.fleet.id]
    delete_on_termination       = true
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required" # IMDSv2 only
    http_put_response_hop_limit = 1
  }

  block_device_mappings {
    device_name = data.aws_ami.ubuntu[local.arch.worker].root_device_name
    ebs {
      volume_type           = "gp3"
      volume_size           = var.volume_size
      encrypted             = true
      delete_on_termination = true
    }
  }

  tag_specifications {
    resource_type = "instance"
    tags          = module.fleet.worker_group_tags
  }
  tag_specifications {
    resource_type = "volume"
    tags          = module.fleet.worker_group_tags
  }
}

resource "aws_autoscaling_group" "worker" {
  name                = local.worker_group_name
  min_size            = local.worker_min_size
  max_size            = local.worker_max_size
  desired_capacity    = var.number_of_worker
  vpc_zone_identifier = local.worker_subnet_ids
  capacity_rebalance  = var.capacity_rebalance
  health_check_type   = "EC2"
  # Target tracking divides by GroupInServiceInstances; the wake-up alarm reads GroupDesiredCapacity.
  enabled_metrics     = ["GroupInServiceInstances", "GroupDesiredCapacity"]
  metrics_granularity = "1Minute"
  # Spot capacity may be short: do not hold `terraform apply` hostage to it.
  wait_for_capacity_timeout = "0"

  mixed_instances_policy {
    instances_distribution {
      on_demand_base_capacity                  = var.on_demand_base_capacity
      on_demand_percentage_above_base_capacity = var.use_spot ? 0 : 100
      spot_allocation_strategy                 = var.spot_allocation_strategy
      spot_max_price                           = var.spot_max_price == null ? "" : var.spot_max_price
    }
    launch_template {
      launch_template_specification {
        launch_template_id = aws_launch_template.worker.id
        version            = aws_launch_template.worker.latest_version
      }
      dynamic "override" {
        for_each = local.worker_types
        content {
          instance_type = override.value
        }
      }
    }
  }

  # On the group from its creation, so no instance ever terminates undrained.
  initial_lifecycle_hook {
    name                 = local.drain_hook_name
    lifecycle_transition = "autoscaling:EC2_INSTANCE_TERMINATING"
    heartbeat_timeout    = var.drain_timeout_seconds
    default_result       = "CONTINUE"
  }

  dynamic "tag" {
    for_each = merge(module.fleet.common_tags, { Role = "worker" })
    content {
      key                 = tag.key
      value               = tag.value
      propagate_at_launch = false # instances get theirs from the launch template
    }
  }

  lifecycle {
    # The policies own the size once the group exists: an apply during a job must not reset it.
    ignore_changes = [desired_capacity]

    precondition {
      condition     = var.worker_min_size <= var.worker_max_size
      error_message = "worker_min_size must not exceed worker_max_size."
    }
    precondition {
      condition     = !local.autoscale || (var.package_spec != null && local.start_workers_on_boot)
      error_message = "autoscale = true: the instances the group starts must install and start their workers on their own. Set package_spec (a pip requirement they can install: a version on your index, a git URL, or the release's sdist URL, see docs/fleet.md) and leave start_workers_on_boot unset or true; or set autoscale = false for a fixed group set up by Ansible."
    }
    # The compiled kernels make the package's wheels platform-specific: a wheel of another architecture is
    # refused by pip on every instance the group starts (the sdist builds on each, docs/fleet.md).
    precondition {
      condition     = !endswith(coalesce(var.package_spec, "-"), ".whl") || endswith(coalesce(var.package_spec, "-"), "-none-any.whl") || endswith(coalesce(var.package_spec, "-"), local.arch.worker == "arm64" ? "_aarch64.whl" : "_x86_64.whl")
      error_message = "package_spec is a wheel for another platform than the workers' (${local.arch.worker}): pip refuses it there. Give the release's sdist (mlm_pipeline-X.Y.Z.tar.gz), which each instance builds, or a wheel of their architecture and Python."
    }
    precondition {
      condition     = length(local.types_disagreeing) == 0
      error_message = "worker_instance_types must have the vCPUs and architecture of worker_instance_type (${data.aws_ec2_instance_type.worker.default_vcpus} vCPUs, ${join("/", data.aws_ec2_instance_type.worker.supported_architectures)}): ${join(", ", local.types_disagreeing)} differ."
    }
  }
}

# ---------------------------------------------------------------- scaling on the ventilator's backlog

resource "aws_autoscaling_policy" "backlog" {
  count = local.autoscale ? 1 : 0

  name                      = "${var.fleet_name}-backlog-per-instance"
  autoscaling_group_name    = aws_autoscaling_group.worker.name
  policy_type               = "TargetTrackingScaling"
  estimated_instance_warmup = var.worker_warmup_seconds

  target_tracking_configuration {
    target_value = local.target_backlog_per_instance

    customized_metric_specification {
      metrics {
        id          = "backlog"
        return_data = false
        metric_stat {
          metric {
            namespace   = local.cloudwatch_namespace
            metric_name = "Backlog"
          }
          stat = "Average"
        }
      }
      metrics {
        id          = "instances"
        return_data = false
        metric_stat {
          metric {
            namespace   = "AWS/AutoScaling"
            metric_name = "GroupInServiceInstances"
            dimensions {
              name  = "AutoScalingGroupName"
              value = aws_autoscaling_group.worker.name
            }
          }
          stat = "Average"
        }
      }
      metrics {
        id          = "per_instance"
        label       = "Backlog per in-service instance"
        expression  = "backlog / instances"
        return_data = true
      }
    }
  }
}

resource "aws_autoscaling_policy" "wake" {
  count = local.autoscale ? 1 : 0

  name                   = "${var.fleet_name}-wake-on-backlog"
  autoscaling_group_name = aws_autoscaling_group.worker.name
  policy_type            = "StepScaling"
  adjustment_type        = "ExactCapacity"

  step_adjustment {
    metric_interval_lower_bound = 0
    scaling_adjustment          = var.number_of_worker
  }
}

resource "aws_cloudwatch_metric_alarm" "work_waiting" {
  count = local.autoscale ? 1 : 0

  alarm_name          = "${var.fleet_name}-work-waiting-no-workers"
  alarm_description   = "Tasks wait and the workers' group is empty: start number_of_worker workers."
  comparison_operator = "GreaterThanOrEqualToThreshold"
  threshold           = 1
  evaluation_periods  = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_autoscaling_policy.wake[0].arn]

  metric_query {
    id          = "waiting"
    expression  = "IF(backlog > 0 AND desired == 0, 1, 0)"
    label       = "Tasks wait, no worker"
    return_data = true
  }
  metric_query {
    id = "backlog"
    metric {
      namespace   = local.cloudwatch_namespace
      metric_name = "Backlog"
      period      = 60
      stat        = "Maximum"
    }
  }
  metric_query {
    id = "desired"
    metric {
      namespace   = "AWS/AutoScaling"
      metric_name = "GroupDesiredCapacity"
      dimensions  = { AutoScalingGroupName = aws_autoscaling_group.worker.name }
      period      = 60
      stat        = "Maximum"
    }
  }
}

resource "aws_autoscaling_policy" "job_ended" {
  count = local.autoscale ? 1 : 0

  name                   = "${var.fleet_name}-job-ended"
  autoscaling_group_name = aws_autoscaling_group.worker.name
  policy_type            = "StepScaling"
  adjustment_type        = "ExactCapacity"

  step_adjustment {
    metric_interval_upper_bound = 0
    scaling_adjustment          = local.worker_min_size
  }
}

resource "aws_cloudwatch_metric_alarm" "job_ended" {
  count = local.autoscale ? 1 : 0

  alarm_name          = "${var.fleet_name}-job-ended"
  alarm_description   = "The ventilator stopped (its last JobActive is 0): the workers' group goes to its minimum."
  namespace           = local.cloudwatch_namespace
  metric_name         = "JobActive"
  statistic           = "Minimum"
  period              = 60
  evaluation_periods  = 1
  comparison_operator = "LessThanThreshold"
  threshold           = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_autoscaling_policy.job_ended[0].arn]
}

# Nothing published for job_silence_minutes: the ventilator was killed (no last JobActive = 0), its instance is
# gone, or no job was started; the group goes to its minimum all the same.  Missing data breaches here.
resource "aws_cloudwatch_metric_alarm" "ventilator_silent" {
  count = local.autoscale ? 1 : 0

  alarm_name          = "${var.fleet_name}-ventilator-silent"
  alarm_description   = "No backlog published for ${var.job_silence_minutes} minutes: the workers' group goes to its minimum."
  namespace           = local.cloudwatch_namespace
  metric_name         = "JobActive"
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = var.job_silence_minutes
  datapoints_to_alarm = var.job_silence_minutes
  comparison_operator = "LessThanThreshold"
  threshold           = 1
  treat_missing_data  = "breaching"
  alarm_actions       = [aws_autoscaling_policy.job_ended[0].arn]
}

# ---------------------------------------------------------------- what each instance role may do for this

resource "aws_iam_role_policy" "backlog" {
  name = "publish-backlog-metrics"
  role = aws_iam_role.ventilator.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid       = "PublishBacklogToTheFleetNamespaceOnly"
        Effect    = "Allow"
        Action    = ["cloudwatch:PutMetricData"]
        Resource  = ["*"] # PutMetricData takes no resource; the namespace condition limits it
        Condition = { StringEquals = { "cloudwatch:namespace" = local.cloudwatch_namespace } }
      },
    ]
  })
}

resource "aws_iam_role_policy" "drain" {
  name = "drain-hook-and-leave-the-group"
  role = aws_iam_role.worker.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid    = "CompleteTheDrainHookAndLeaveThisGroupOnly"
        Effect = "Allow"
        # TerminateInstanceInAutoScalingGroup: a worker drained on a rebalance recommendation leaves at once
        Action   = ["autoscaling:CompleteLifecycleAction", "autoscaling:TerminateInstanceInAutoScalingGroup"]
        Resource = ["arn:${data.aws_partition.current.partition}:autoscaling:${var.region}:${data.aws_caller_identity.current.account_id}:autoScalingGroup:*:autoScalingGroupName/${local.worker_group_name}"]
      },
    ]
  })
}

# The group's running instances when Terraform last looked, for the outputs and the static inventory.
data "aws_instances" "workers" {
  instance_tags = {
    Fleet = var.fleet_name
    Role  = "worker"
  }
  filter {
    name   = "tag:aws:autoscaling:groupName"
    values = [local.worker_group_name]
  }
  instance_state_names = ["running"]

  depends_on = [aws_autoscaling_group.worker]
}

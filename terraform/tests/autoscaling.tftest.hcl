# terraform test of the workers' Auto Scaling group (autoscaling.tf) with a
# mocked hashicorp/aws provider: no AWS account, but the provider's own schema
# and the whole root module's wiring. Run from terraform/ with the provider
# installed (terraform init; offline: terraform init -plugin-dir=DIR):
#   terraform test -filter=tests/autoscaling.tftest.hcl
# (tests/variables.tftest.hcl runs against variables.tf alone, see docs/fleet.md.)

mock_provider "aws" {
  # Alarm actions must look like ARNs; the mock's random strings do not.
  mock_resource "aws_autoscaling_policy" {
    defaults = { arn = "arn:aws:autoscaling:us-east-1:123456789012:scalingPolicy:0-0-0:autoScalingGroupName/mlm-workers:policyName/mock" }
  }
  override_data {
    target = data.aws_ec2_instance_type.worker
    values = { default_vcpus = 8, supported_architectures = ["x86_64"] }
  }
  override_data {
    target = data.aws_ec2_instance_type.worker_types
    values = { default_vcpus = 8, supported_architectures = ["x86_64"] }
  }
  override_data {
    target = data.aws_ec2_instance_type.ventilator
    values = { default_vcpus = 2, supported_architectures = ["x86_64"] }
  }
  override_data {
    target = data.aws_availability_zones.available
    values = { names = ["us-east-1a", "us-east-1b"] }
  }
  override_data {
    target = data.aws_iam_policy_document.assume_ec2
    values = { json = "{\"Version\":\"2012-10-17\",\"Statement\":[]}" }
  }
  override_data {
    target = data.aws_ami.ubuntu
    values = { id = "ami-mock", root_device_name = "/dev/sda1" }
  }
  override_data {
    target = data.aws_partition.current
    values = { partition = "aws" }
  }
  override_data {
    target = data.aws_caller_identity.current
    values = { account_id = "123456789012" }
  }
  override_data {
    target = data.aws_instances.workers
    values = { ids = [], private_ips = [], public_ips = [] }
  }
}

variables {
  bucket_name  = "my-bert-shards"
  admin_cidrs  = ["203.0.113.7/32"]
  package_spec = "mlm-pipeline==0.1.0"
}

run "group_of_spot_workers" {
  command = apply

  assert {
    condition     = aws_autoscaling_group.worker.desired_capacity == 2 && aws_autoscaling_group.worker.min_size == 0 && aws_autoscaling_group.worker.max_size == 20
    error_message = "number_of_worker is the desired size, between worker_min_size (0) and worker_max_size (20)"
  }
  assert {
    condition     = aws_autoscaling_group.worker.capacity_rebalance == true
    error_message = "capacity rebalancing is on"
  }
  assert {
    condition = (
      aws_autoscaling_group.worker.mixed_instances_policy[0].instances_distribution[0].on_demand_base_capacity == 0 &&
      aws_autoscaling_group.worker.mixed_instances_policy[0].instances_distribution[0].on_demand_percentage_above_base_capacity == 0 &&
      aws_autoscaling_group.worker.mixed_instances_policy[0].instances_distribution[0].spot_allocation_strategy == "price-capacity-optimized"
    )
    error_message = "spot by default, price-capacity-optimized, an on-demand base of 0"
  }
  assert {
    condition     = [for o in aws_autoscaling_group.worker.mixed_instances_policy[0].launch_template[0].override : o.instance_type] == ["c6i.2xlarge", "c6a.2xlarge", "c7i.2xlarge", "c5.2xlarge"]
    error_message = "several instance types (mixed instances policy)"
  }
  assert {
    condition     = aws_autoscaling_group.worker.mixed_instances_policy[0].launch_template[0].launch_template_specification[0].launch_template_id == aws_launch_template.worker.id
    error_message = "the group launches from the workers' launch template"
  }
  assert {
    condition     = length(aws_subnet.fleet) == 2 && aws_autoscaling_group.worker.vpc_zone_identifier == toset(aws_subnet.fleet[*].id)
    error_message = "the workers spread over a subnet in each zone"
  }
  assert {
    condition     = [for s in aws_subnet.fleet : s.availability_zone] == ["us-east-1a", "us-east-1b"] && aws_instance.ventilator.subnet_id == aws_subnet.fleet[0].id
    error_message = "one subnet per available zone; the ventilator in the first"
  }
  assert {
    condition     = length(aws_route_table_association.fleet) == 2
    error_message = "every subnet routes to the internet gateway"
  }
  assert {
    condition     = strcontains(module.fleet.worker_user_data, "mlm-pipeline==0.1.0") && strcontains(module.fleet.worker_user_data, "systemctl")
    error_message = "group instances install the package at boot"
  }
  assert {
    condition     = aws_autoscaling_group.worker.enabled_metrics == toset(["GroupInServiceInstances", "GroupDesiredCapacity"])
    error_message = "the group publishes the metrics its policies read"
  }
}

run "same_user_data_role_and_group_as_before" {
  command = apply

  assert {
    condition     = base64decode(aws_launch_template.worker.user_data) == module.fleet.worker_user_data
    error_message = "the launch template carries the fleet's worker user_data"
  }
  assert {
    condition     = strcontains(module.fleet.worker_user_data, "--processes 8 --spot-watch --lifecycle-hook mlm-drain --autoscaling-group mlm-workers")
    error_message = "workers watch IMDS and complete the drain hook of their group"
  }
  assert {
    condition     = aws_launch_template.worker.iam_instance_profile[0].name == aws_iam_instance_profile.worker.name && aws_instance.ventilator.iam_instance_profile == aws_iam_instance_profile.ventilator.name
    error_message = "workers and the ventilator each have their own instance role"
  }
  assert {
    condition     = aws_iam_instance_profile.worker.role == aws_iam_role.worker.name && aws_iam_instance_profile.ventilator.role == aws_iam_role.ventilator.name
    error_message = "each profile holds its own role"
  }
  assert {
    condition     = aws_launch_template.worker.network_interfaces[0].security_groups == toset([aws_security_group.fleet.id])
    error_message = "the fleet's security group, and only it"
  }
  assert {
    condition     = aws_launch_template.worker.metadata_options[0].http_tokens == "required"
    error_message = "IMDSv2 only"
  }
  assert {
    condition     = aws_launch_template.worker.block_device_mappings[0].ebs[0].encrypted == "true"
    error_message = "encrypted root volumes"
  }
  assert {
    condition     = !contains(keys(aws_launch_template.worker.tag_specifications[0].tags), "Name") && aws_launch_template.worker.tag_specifications[0].tags.Role == "worker" && aws_launch_template.worker.tag_specifications[0].tags.MlmLifecycleHook == "mlm-drain"
    error_message = "group instances are tagged Role=worker with their drain hook, without a shared Name"
  }
}

run "drain_hook_on_scale_in" {
  command = apply

  assert {
    condition = length([for h in aws_autoscaling_group.worker.initial_lifecycle_hook : h if(
      h.name == "mlm-drain" && h.lifecycle_transition == "autoscaling:EC2_INSTANCE_TERMINATING" &&
      h.default_result == "CONTINUE" && h.heartbeat_timeout == 300
    )]) == 1
    error_message = "a termination lifecycle hook on the group from its creation"
  }
  assert {
    condition     = strcontains(aws_iam_role_policy.drain.policy, "autoscaling:CompleteLifecycleAction") && strcontains(aws_iam_role_policy.drain.policy, "autoScalingGroupName/mlm-workers")
    error_message = "the workers' role may complete the hook of this group only"
  }
  assert {
    condition     = aws_iam_role_policy.drain.role == aws_iam_role.worker.id && aws_iam_role_policy.backlog.role == aws_iam_role.ventilator.id
    error_message = "the drain hook on the workers' role, the backlog metrics on the ventilator's"
  }
  assert {
    condition     = !strcontains(aws_iam_role_policy.drain.policy, "PutMetricData") && !strcontains(aws_iam_role_policy.backlog.policy, "autoscaling:")
    error_message = "neither role holds the other's permissions"
  }
}

run "scaling_policies_wired_to_the_backlog" {
  command = apply

  assert {
    condition     = aws_autoscaling_policy.backlog[0].policy_type == "TargetTrackingScaling" && aws_autoscaling_policy.backlog[0].autoscaling_group_name == aws_autoscaling_group.worker.name
    error_message = "target tracking on the workers' group"
  }
  assert {
    condition     = aws_autoscaling_policy.backlog[0].target_tracking_configuration[0].target_value == 8
    error_message = "target: one task per worker process (8 vCPUs, 8 processes)"
  }
  assert {
    condition = [for m in aws_autoscaling_policy.backlog[0].target_tracking_configuration[0].customized_metric_specification[0].metrics :
    m.expression if m.return_data] == ["backlog / instances"]
    error_message = "the policy tracks backlog / instances"
  }
  assert {
    condition = { for m in aws_autoscaling_policy.backlog[0].target_tracking_configuration[0].customized_metric_specification[0].metrics :
      m.id => "${m.metric_stat[0].metric[0].namespace} ${m.metric_stat[0].metric[0].metric_name}" if !m.return_data } == {
      backlog = "mlm-pipeline/mlm Backlog", instances = "AWS/AutoScaling GroupInServiceInstances"
    }
    error_message = "Backlog from the ventilator's namespace, in-service instances from the group's metrics"
  }
  assert {
    condition     = strcontains(output.commands.ventilator, "--cloudwatch-namespace mlm-pipeline/mlm --cloudwatch-region us-east-1")
    error_message = "the ventilator publishes to the namespace the policies read"
  }
  assert {
    condition     = aws_cloudwatch_metric_alarm.job_ended[0].metric_name == "JobActive" && aws_cloudwatch_metric_alarm.job_ended[0].namespace == "mlm-pipeline/mlm" && aws_cloudwatch_metric_alarm.job_ended[0].alarm_actions == toset([aws_autoscaling_policy.job_ended[0].arn])
    error_message = "the job-ended alarm drives the job-ended policy"
  }
  assert {
    condition     = aws_autoscaling_policy.job_ended[0].adjustment_type == "ExactCapacity" && [for a in aws_autoscaling_policy.job_ended[0].step_adjustment : a.scaling_adjustment] == [0]
    error_message = "at the job's end the group goes to its minimum"
  }
  assert {
    condition = (
      aws_cloudwatch_metric_alarm.ventilator_silent[0].metric_name == "JobActive" &&
      aws_cloudwatch_metric_alarm.ventilator_silent[0].treat_missing_data == "breaching" &&
      aws_cloudwatch_metric_alarm.ventilator_silent[0].evaluation_periods == 15 &&
      aws_cloudwatch_metric_alarm.ventilator_silent[0].alarm_actions == toset([aws_autoscaling_policy.job_ended[0].arn])
    )
    error_message = "nothing published for job_silence_minutes (missing data breaches) takes the group to its minimum too"
  }
  assert {
    condition     = aws_cloudwatch_metric_alarm.work_waiting[0].alarm_actions == toset([aws_autoscaling_policy.wake[0].arn]) && [for a in aws_autoscaling_policy.wake[0].step_adjustment : a.scaling_adjustment] == [2]
    error_message = "tasks waiting on an empty group wake it to number_of_worker"
  }
}

run "no_public_ports" {
  command = apply

  assert {
    condition     = alltrue([for r in aws_vpc_security_group_ingress_rule.pipeline : r.referenced_security_group_id == aws_security_group.fleet.id && r.cidr_ipv4 == null && r.cidr_ipv6 == null])
    error_message = "the pipeline ports only from the fleet's own group"
  }
  assert {
    condition     = alltrue([for r in aws_vpc_security_group_ingress_rule.ssh : r.from_port == 22 && contains(var.admin_cidrs, r.cidr_ipv4)])
    error_message = "ssh only from admin_cidrs"
  }
  assert {
    condition     = length(aws_vpc_security_group_ingress_rule.metrics) == 0
    error_message = "no metrics port unless asked"
  }
}

run "zero_workers_is_no_worker" {
  command = apply
  variables {
    number_of_worker = 0
  }
  assert {
    condition     = aws_autoscaling_group.worker.max_size == 0 && aws_autoscaling_group.worker.min_size == 0
    error_message = "number_of_worker = 0 leaves no worker running, and none can start (AWS holds the desired size within min and max)"
  }
  assert {
    condition     = length(aws_autoscaling_policy.backlog) + length(aws_autoscaling_policy.wake) + length(aws_cloudwatch_metric_alarm.work_waiting) == 0
    error_message = "nothing scales a group that is off"
  }
}

run "fixed_on_demand_group" {
  command = apply
  variables {
    autoscale        = false
    use_spot         = false
    number_of_worker = 5
  }
  assert {
    condition     = aws_autoscaling_group.worker.min_size == 5 && aws_autoscaling_group.worker.max_size == 5 && length(aws_autoscaling_policy.backlog) == 0
    error_message = "autoscale = false: a fixed group of number_of_worker"
  }
  assert {
    condition     = aws_autoscaling_group.worker.mixed_instances_policy[0].instances_distribution[0].on_demand_percentage_above_base_capacity == 100
    error_message = "use_spot = false: on-demand"
  }
  assert {
    condition     = !strcontains(output.commands.ventilator, "--cloudwatch-namespace")
    error_message = "no backlog publishing without scaling"
  }
}

run "min_above_max_is_refused" {
  command = plan
  variables {
    worker_min_size = 30
    worker_max_size = 10
  }
  expect_failures = [aws_autoscaling_group.worker]
}

run "apply_during_a_job_keeps_the_groups_size" {
  command = apply
  variables {
    number_of_worker = 7
  }
  assert {
    condition     = aws_autoscaling_group.worker.desired_capacity == 2
    error_message = "ignore_changes: the size the policies chose (here the first apply's 2) survives a later apply"
  }
  assert {
    condition     = [for a in aws_autoscaling_policy.wake[0].step_adjustment : a.scaling_adjustment] == [7]
    error_message = "the rest of the change applies"
  }
}

run "autoscale_without_a_package_source_is_refused" {
  command = plan
  variables {
    package_spec = null
  }
  expect_failures = [aws_autoscaling_group.worker]
}

run "autoscale_with_workers_not_started_on_boot_is_refused" {
  command = plan
  variables {
    start_workers_on_boot = false
  }
  expect_failures = [aws_autoscaling_group.worker]
}

run "fixed_group_needs_no_package_source" {
  command = plan
  variables {
    autoscale    = false
    package_spec = null
  }
  assert {
    condition     = length(aws_autoscaling_policy.backlog) == 0
    error_message = "a fixed group, set up by Ansible"
  }
}

run "instance_types_of_other_vcpus_are_refused" {
  command = plan
  override_data {
    target = data.aws_ec2_instance_type.worker_types
    values = { default_vcpus = 4, supported_architectures = ["x86_64"] }
  }
  expect_failures = [aws_autoscaling_group.worker]
}

run "instance_types_of_another_architecture_are_refused" {
  command = plan
  override_data {
    target = data.aws_ec2_instance_type.worker_types
    values = { default_vcpus = 8, supported_architectures = ["arm64"] }
  }
  expect_failures = [aws_autoscaling_group.worker]
}

run "a_wheel_of_another_architecture_is_refused" {
  command = plan
  variables {
    package_spec = "https://example.com/mlm_pipeline-0.1.0-cp312-cp312-linux_x86_64.whl"
  }
  override_data {
    target = data.aws_ec2_instance_type.worker
    values = { default_vcpus = 8, supported_architectures = ["arm64"] }
  }
  override_data {
    target = data.aws_ec2_instance_type.worker_types
    values = { default_vcpus = 8, supported_architectures = ["arm64"] }
  }
  expect_failures = [aws_autoscaling_group.worker]
}

run "the_sdist_installs_on_any_architecture" {
  command = plan
  variables {
    package_spec = "https://example.com/mlm_pipeline-0.1.0.tar.gz"
  }
  override_data {
    target = data.aws_ec2_instance_type.worker
    values = { default_vcpus = 8, supported_architectures = ["arm64"] }
  }
  override_data {
    target = data.aws_ec2_instance_type.worker_types
    values = { default_vcpus = 8, supported_architectures = ["arm64"] }
  }
  assert {
    condition     = contains(yamldecode(module.fleet.worker_user_data).packages, "gcc")
    error_message = "the instances get a compiler for the kernels"
  }
}

run "more_zones_than_the_vpc_holds_are_refused" {
  command = plan
  variables {
    vpc_cidr           = "10.42.0.0/23"
    availability_zones = ["us-east-1a", "us-east-1b", "us-east-1c"]
  }
  expect_failures = [aws_subnet.fleet]
}

output "ventilator_name" {
  description = "Name tag of the ventilator instance."
  value       = local.ventilator_name
}

output "worker_names" {
  description = "Name tags of the worker instances, by index."
  value       = local.worker_names
}

output "common_tags" {
  description = "Tags on every resource (provider default_tags)."
  value       = local.common_tags
}

output "ventilator_tags" {
  description = "Tags of the ventilator instance (Role = ventilator)."
  value       = local.ventilator_tags
}

output "worker_tags" {
  description = "Tags of each worker instance (Role = worker)."
  value       = local.worker_tags
}

output "worker_group_tags" {
  description = "Tags of the instances the workers' Auto Scaling group starts (Role = worker, no Name)."
  value       = local.worker_group_tags
}

output "effective_worker_processes" {
  description = "Worker processes per worker host after resolving 0 = one per vCPU."
  value       = local.effective_worker_processes
}

output "total_worker_processes" {
  description = "Worker processes in the whole fleet."
  value       = local.total_worker_processes
}

output "output_uri" {
  description = "Where the shards go: s3://bucket/prefix."
  value       = local.output_uri
}

output "s3_policy_json" {
  description = "Instance role policy: write only below the output prefix (plus read of an s3:// corpus)."
  value       = jsonencode(local.s3_policy)
}

output "ventilator_user_data" {
  description = "cloud-init user_data of the ventilator instance."
  value       = "#cloud-config\n${yamlencode(local.ventilator_cloud_config)}"
}

output "worker_user_data" {
  description = "cloud-init user_data of the worker instances."
  value       = "#cloud-config\n${yamlencode(local.worker_cloud_config)}"
}

output "starts_workers_on_boot" {
  description = "Whether the worker user_data enables and starts mlm-worker@1."
  value       = local.start_workers
}

output "ventilator_command" {
  description = "Command line that starts the job on the ventilator host (it also starts the sink)."
  value       = local.ventilator_command_full

  precondition {
    condition     = var.ventilator_port != var.sink_port
    error_message = "ventilator_port and sink_port must differ."
  }
  precondition {
    condition     = var.metrics_port == 0 || length(setintersection([var.metrics_port, var.metrics_port + 1], [var.ventilator_port, var.sink_port])) == 0
    error_message = "metrics_port and metrics_port + 1 must differ from ventilator_port and sink_port."
  }
}

output "worker_command" {
  description = "Command line that starts one worker host's processes by hand."
  value       = local.worker_command
}

output "inventory" {
  description = "Static Ansible inventory (YAML) in the same shape as the aws_ec2 dynamic one."
  value       = yamlencode(local.inventory)
}

output "venv" {
  description = "Path of the virtualenv on the instances."
  value       = local.venv
}

output "aws_ec2_inventory" {
  description = "amazon.aws.aws_ec2 inventory configuration (YAML) selecting this fleet by its tags."
  value       = yamlencode(local.aws_ec2_inventory)
}

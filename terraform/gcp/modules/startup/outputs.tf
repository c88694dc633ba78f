output "metric_type" {
  value       = local.metric_type
  description = "The Cloud Monitoring metric the ventilator writes (--cloud-monitoring-prefix + /backlog) and the autoscaler reads."
}

output "output_uri" {
  value = local.output_uri
}

output "data_uri" {
  value = local.data_uri
}

output "worker_labels" {
  value = local.worker_labels
}

output "ventilator_labels" {
  value = local.ventilator_labels
}

output "worker_command" {
  value = local.worker_command
}

output "ventilator_command" {
  value = local.ventilator_command
}

output "worker_startup_script" {
  value = local.worker_startup_script
  precondition {
    condition     = !startswith(var.package_spec, "gs://") || startswith(var.package_spec, local.job_prefix_uri)
    error_message = "package_spec in the bucket must be below the job's prefix (${local.job_prefix_uri}): the VMs' service accounts may read nothing else."
  }
}

output "worker_shutdown_script" {
  value = local.worker_shutdown_script
}

output "ventilator_startup_script" {
  value = local.ventilator_startup_script
  precondition {
    condition     = !local.vocab_in_bucket || startswith(coalesce(var.vocab_file, "-"), local.job_prefix_uri)
    error_message = "vocab_file in the bucket must be below the job's prefix (${local.job_prefix_uri}): the ventilator's service account may read nothing else."
  }
}

output "ventilator_internal_ip" {
  value = google_compute_address.ventilator.address
}

output "worker_group" {
  value = google_compute_region_instance_group_manager.workers.name
}

output "backlog_metric" {
  value       = module.startup.metric_type
  description = "What the ventilator writes and the autoscaler reads."
}

output "output_uri" {
  value = module.startup.output_uri
}

output "data_uri" {
  value = module.startup.data_uri
}

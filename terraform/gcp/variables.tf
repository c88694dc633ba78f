variable "project" {
  type        = string
  description = "The Google Cloud project."
}

variable "region" {
  type        = string
  default     = "us-central1"
  description = "The region: the workers' group spreads over its zones."
}

variable "zones" {
  type        = list(string)
  default     = []
  description = "Zones of the workers' group (empty: every zone of the region Google offers, which Spot capacity likes)."
}

variable "fleet_name" {
  type    = string
  default = "mlm"
}

variable "package_spec" {
  type        = string
  description = "What every VM installs at boot, pinned: the release's sdist (or a wheel of the VMs' platform) below the job's prefix in the bucket, 'gs://BUCKET/PREFIX/dist/mlm_pipeline-0.1.0.tar.gz', or a pin on your own index. An update needs no new image."
}

variable "bucket_name" {
  type        = string
  description = "The bucket of the corpus and the output (it must exist, with uniform bucket-level access)."
}

variable "bucket_prefix" {
  type        = string
  description = "The job's prefix: <prefix>/corpus is read, <prefix>/out written. The service accounts may touch nothing else."
}

variable "worker_machine_type" {
  type    = string
  default = "c3-standard-8"
}

variable "ventilator_machine_type" {
  type    = string
  default = "n2-standard-4"
}

variable "image" {
  type        = string
  default     = "projects/debian-cloud/global/images/family/debian-12"
  description = "The VMs' boot image: a stock one (the startup script installs the pinned release)."
}

variable "min_workers" {
  type    = number
  default = 0
}

variable "max_workers" {
  type    = number
  default = 100
}

variable "tasks_per_worker" {
  type        = number
  default     = 8
  description = "The autoscaler's single_instance_assignment: backlog tasks one worker VM should have in hand (about its processes)."
  validation {
    condition     = var.tasks_per_worker > 0
    error_message = "tasks_per_worker must be positive."
  }
}

variable "worker_processes" {
  type    = number
  default = 0
}

variable "network_cidr" {
  type    = string
  default = "10.20.0.0/20"
}

variable "ventilator_port" {
  type    = number
  default = 5557
}

variable "sink_port" {
  type    = number
  default = 5558
}

variable "metrics_port" {
  type    = number
  default = 9101
}

variable "ssh_through_iap" {
  type        = bool
  default     = true
  description = "Let Identity-Aware Proxy's range reach port 22 (Ansible and gcloud compute ssh --tunnel-through-iap); no VM has an external address."
}

variable "vocab_file" {
  type    = string
  default = null
}

variable "job_args" {
  type    = list(string)
  default = []
}

variable "instance_hourly_price" {
  type        = number
  default     = null
  description = "A worker VM's hourly price, for the summary's cost (docs/fleet.md)."
}

variable "fleet_name" {
  type        = string
  description = "Name of the fleet: the prefix of every resource, the label the inventory keys on, and part of the metric type."
  validation {
    condition     = can(regex("^[a-z][-a-z0-9]{0,30}$", var.fleet_name))
    error_message = "fleet_name: lower-case letters, digits and dashes, starting with a letter (Google's resource names)."
  }
}

variable "project" {
  type        = string
  description = "The Google Cloud project (the backlog metric is written to it)."
}

variable "package_spec" {
  type        = string
  description = "What pip installs on every VM, pinned: the release's source distribution in the job's bucket ('gs://BUCKET/PREFIX/dist/mlm_pipeline-0.1.0.tar.gz', copied first, built on the VM), a wheel of the VMs' own platform there, or a pin on your package index ('mlm-pipeline[gcs,gcp]==0.1.0')."
  validation {
    condition     = can(regex("==[0-9]", var.package_spec)) || can(regex("\\.(whl|tar\\.gz)$", var.package_spec))
    error_message = "package_spec must pin a version (name==X.Y.Z) or name a file of the release (.tar.gz or .whl): a VM started later must install what the others run."
  }
}

variable "bucket_name" {
  type = string
}

variable "bucket_prefix" {
  type        = string
  description = "The job's prefix in the bucket: the corpus below <prefix>/corpus, the output below <prefix>/out."
}

variable "ventilator_address" {
  type        = string
  default     = null
  description = "The ventilator's internal address (null: the ventilator's own scripts)."
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

variable "worker_processes" {
  type        = number
  default     = 0
  description = "Worker processes per VM (0: one per vCPU, counted on the VM)."
}

variable "notice_drain_seconds" {
  type        = number
  default     = 25
  description = "How long a worker finishes its task after a notice or the shutdown script before handing it back (a Spot VM has 30 s)."
}

variable "job_args" {
  type        = list(string)
  default     = []
  description = "The job's own flags for the ventilator (--objective, --word-segmenter jieba, ...)."
  validation {
    # They are written into the unit's `bash -c '...'` as they are: nothing there may need quoting.
    condition     = alltrue([for arg in var.job_args : can(regex("^[-A-Za-z0-9_.,:/=@+]+$", arg))])
    error_message = "job_args: each argument may hold only letters, digits and - _ . , : / = @ + (no spaces, quotes, $ or %), as it is written into the unit's command line unquoted."
  }
}

variable "vocab_file" {
  type    = string
  default = null
}

variable "instance_hourly_price" {
  type    = number
  default = null
}

variable "install_dir" {
  type    = string
  default = "/opt/mlm-pipeline"
}

variable "service_user" {
  type    = string
  default = "mlm"
}

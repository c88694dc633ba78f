# Inputs of the provider-free part of the fleet: everything here is plain
# values, so `terraform test` can run this module without any provider.
# The root module (../../) validates what users type; the checks here guard the
# module's own contract.

variable "project" {
  description = "Value of the Project tag on every resource; the Ansible aws_ec2 inventory filters on it."
  type        = string
  default     = "mlm-pipeline"
}

variable "fleet_name" {
  description = "Short name of this fleet; prefixes resource names and is the Fleet tag."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,19}$", var.fleet_name))
    error_message = "fleet_name must be 1-20 characters of lowercase letters, digits and '-', starting with a letter."
  }
}

variable "number_of_worker" {
  description = "How many worker instances."
  type        = number

  validation {
    condition     = var.number_of_worker >= 0 && floor(var.number_of_worker) == var.number_of_worker
    error_message = "number_of_worker must be a whole number >= 0."
  }
}

variable "worker_processes" {
  description = "Worker processes per worker host (mlm-worker --processes); 0 means one per vCPU of the worker instance type."
  type        = number
  default     = 0

  validation {
    condition     = var.worker_processes >= 0 && floor(var.worker_processes) == var.worker_processes
    error_message = "worker_processes must be a whole number >= 0 (0 = one per vCPU)."
  }
}

variable "worker_vcpus" {
  description = "vCPUs of the worker instance type (from the aws_ec2_instance_type data source); used when worker_processes is 0."
  type        = number
  default     = null
}

variable "ventilator_port" {
  description = "Task port of the ventilator (mlm-ventilator --vport)."
  type        = number
  default     = 5557

  validation {
    condition     = var.ventilator_port >= 1024 && var.ventilator_port <= 65535
    error_message = "ventilator_port must be in 1024-65535."
  }
}

variable "sink_port" {
  description = "Port of the sink (mlm-ventilator --sink-port)."
  type        = number
  default     = 5558

  validation {
    condition     = var.sink_port >= 1024 && var.sink_port <= 65535
    error_message = "sink_port must be in 1024-65535."
  }
}

variable "metrics_port" {
  description = "Prometheus metrics of the ventilator on this port and of its sink on the next one; 0 = none."
  type        = number
  default     = 0

  validation {
    condition     = var.metrics_port == 0 || (var.metrics_port >= 1024 && var.metrics_port <= 65534)
    error_message = "metrics_port must be 0 or in 1024-65534."
  }
}

variable "bucket_name" {
  description = "S3 bucket that receives the shards."
  type        = string
}

variable "bucket_prefix" {
  description = "Key prefix inside the bucket (no leading or trailing '/' needed); the instance role may write only below it."
  type        = string
  default     = "mlm"
}

variable "package_spec" {
  description = "pip requirement installed by cloud-init (a version pin, a git URL, an sdist URL); null = install nothing at boot (use ansible init.yaml)."
  type        = string
  default     = null
}

variable "pip_extra_args" {
  description = "Extra arguments for pip install at boot (e.g. [\"--index-url\", \"https://pypi.example.org/simple\"])."
  type        = list(string)
  default     = []
}

variable "start_workers_on_boot" {
  description = "If true (and package_spec is set), cloud-init enables and starts the worker service pointed at the ventilator's private address."
  type        = bool
  default     = false
}

variable "install_dir" {
  description = "Where the virtualenv lives on the instances (venv in <install_dir>/venv)."
  type        = string
  default     = "/opt/mlm"
}

variable "service_user" {
  description = "Unprivileged system user that runs the pipeline processes."
  type        = string
  default     = "mlm"
}

variable "ssh_user" {
  description = "Login user of the AMI (Ubuntu: ubuntu)."
  type        = string
  default     = "ubuntu"
}

variable "data_dir" {
  description = "Corpus location given to the ventilator (--data): a directory on the ventilator host or an s3:// URI."
  type        = string
  default     = "/data/corpus"
}

variable "vocab_file" {
  description = "Vocabulary file on the ventilator host (--vocab-file); null = the ventilator's default."
  type        = string
  default     = null
}

variable "job_args" {
  description = "Extra job flags for the ventilator, e.g. { dupe-factor = \"5\", max-seq-length = \"128\" }."
  type        = map(string)
  default     = {}
}

variable "ventilator_private_ip" {
  description = "Private address of the ventilator instance (what the workers connect to); null before it exists."
  type        = string
  default     = null
}

variable "ventilator_public_ip" {
  description = "Public address of the ventilator instance (for ssh/Ansible); null if it has none."
  type        = string
  default     = null
}

variable "workers" {
  description = "Addresses of the worker instances, in index order (for the rendered inventory)."
  type = list(object({
    public_ip  = optional(string)
    private_ip = string
  }))
  default = []
}

variable "extra_tags" {
  description = "Additional tags on every resource."
  type        = map(string)
  default     = {}
}

variable "partition" {
  description = "AWS partition for ARNs (aws, aws-cn, aws-us-gov); the root module passes data.aws_partition."
  type        = string
  default     = "aws"
}

variable "region" {
  description = "AWS region of the fleet (for the rendered aws_ec2 inventory configuration)."
  type        = string
  default     = "us-east-1"
}

variable "spot_watch" {
  description = "Workers watch IMDSv2 for spot interruption notices, rebalance recommendations and scale-in (mlm-worker --spot-watch), and drain on any of them."
  type        = bool
  default     = false
}

variable "autoscaling_group_name" {
  description = "Name of the workers' Auto Scaling group (with lifecycle_hook_name: the worker completes the hook's action after draining); null = fixed instances."
  type        = string
  default     = null
}

variable "lifecycle_hook_name" {
  description = "Termination lifecycle hook of the workers' group whose action a drained worker completes; null = none."
  type        = string
  default     = null

  validation {
    condition     = var.lifecycle_hook_name == null || can(regex("^[A-Za-z0-9._-]{1,255}$", var.lifecycle_hook_name))
    error_message = "lifecycle_hook_name must be 1-255 letters, digits, '.', '_' or '-' (or null)."
  }
}

variable "cloudwatch_namespace" {
  description = "CloudWatch namespace the ventilator publishes its backlog to (--cloudwatch-namespace); null = none."
  type        = string
  default     = null
}

variable "instance_hourly_price" {
  description = "USD per worker instance-hour for the cost in the sink's summary (--instance-hourly-price); null = hours only."
  type        = number
  default     = null
}

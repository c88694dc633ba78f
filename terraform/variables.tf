# Inputs of the fleet. Required: bucket_name and admin_cidrs (see
# terraform.tfvars.example). Everything else has a default.
# This file must stay provider-free (only variable blocks): tests copy it
# alone into a scratch module and run tests/variables.tftest.hcl against it.

# ---------------------------------------------------------------- where

variable "region" {
  description = "AWS region of the fleet."
  type        = string
  default     = "us-east-1"

  validation {
    condition     = can(regex("^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-[0-9]+$", var.region))
    error_message = "region must be an AWS region name such as \"us-east-1\" or \"eu-west-3\"."
  }
}

variable "availability_zone" {
  description = "Availability zone of the ventilator's subnet (the first one this module creates); null = the first of availability_zones. Ignored when subnet_id is set."
  type        = string
  default     = null

  validation {
    condition     = var.availability_zone == null || can(regex("^[a-z]{2}(-gov)?-[a-z]+-[0-9]+[a-z]$", var.availability_zone))
    error_message = "availability_zone must be a zone name such as \"us-east-1a\" (or null for the first available zone)."
  }
}

variable "availability_zones" {
  description = "Zones of the subnets this module creates (one /24 each): the workers' group spreads over them, so a spot shortage in one zone does not stop the job. Empty = the region's first three available zones (as many as vpc_cidr holds). Ignored when subnet_id is set."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for z in var.availability_zones : can(regex("^[a-z]{2}(-gov)?-[a-z]+-[0-9]+[a-z]$", z))])
    error_message = "availability_zones must be zone names such as [\"us-east-1a\", \"us-east-1b\"]."
  }
}

variable "worker_subnet_ids" {
  description = "With subnet_id: more existing subnets (other zones, same VPC) for the workers' group; the ventilator stays in subnet_id."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for s in var.worker_subnet_ids : can(regex("^subnet-[0-9a-f]{8,17}$", s))])
    error_message = "worker_subnet_ids must look like [\"subnet-0123456789abcdef0\"]."
  }
}

variable "subnet_id" {
  description = "Existing subnet to put the fleet in; null = create a VPC, a public subnet, an internet gateway and an S3 gateway endpoint."
  type        = string
  default     = null

  validation {
    condition     = var.subnet_id == null || can(regex("^subnet-[0-9a-f]{8,17}$", var.subnet_id))
    error_message = "subnet_id must look like \"subnet-0123456789abcdef0\" (or null to create a VPC)."
  }
}

variable "vpc_cidr" {
  description = "CIDR of the VPC created when subnet_id is null (one /24 subnet per zone: a /23 holds two zones, a /22 or larger three)."
  type        = string
  default     = "10.42.0.0/16"

  validation {
    condition     = can(cidrhost(var.vpc_cidr, 0)) && tonumber(split("/", var.vpc_cidr)[1]) >= 16 && tonumber(split("/", var.vpc_cidr)[1]) <= 23
    error_message = "vpc_cidr must be an IPv4 CIDR from /16 to /23, e.g. \"10.42.0.0/16\"."
  }
}

variable "associate_public_ip" {
  description = "Give the instances public addresses (needed to ssh from a laptop without a bastion or VPN)."
  type        = bool
  default     = true
}

# ---------------------------------------------------------------- what

variable "fleet_name" {
  description = "Short name of the fleet: prefixes resource names and is the Fleet tag the Ansible inventory filters on."
  type        = string
  default     = "mlm"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,19}$", var.fleet_name))
    error_message = "fleet_name must be 1-20 characters of lowercase letters, digits and '-', starting with a letter."
  }
}

variable "number_of_worker" {
  description = "Desired size of the workers' Auto Scaling group: what `terraform apply` sets (and what a job starting on an empty group wakes it to); the backlog policies move it between worker_min_size and worker_max_size. 0 = no worker at all (min = max = 0)."
  type        = number
  default     = 2

  validation {
    condition     = var.number_of_worker >= 0 && var.number_of_worker <= 500 && floor(var.number_of_worker) == var.number_of_worker
    error_message = "number_of_worker must be a whole number from 0 to 500."
  }
}

variable "worker_instance_type" {
  description = "EC2 instance type of the workers (tokenizing is CPU-bound: compute-optimised types fit)."
  type        = string
  default     = "c6i.2xlarge"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[a-z0-9]+$", var.worker_instance_type))
    error_message = "worker_instance_type must be an EC2 instance type such as \"c6i.2xlarge\"."
  }
}

variable "ventilator_instance_type" {
  description = "EC2 instance type of the ventilator/sink instance."
  type        = string
  default     = "m6i.large"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[a-z0-9]+$", var.ventilator_instance_type))
    error_message = "ventilator_instance_type must be an EC2 instance type such as \"m6i.large\"."
  }
}

variable "volume_size" {
  description = "Root volume size of each worker, in GiB."
  type        = number
  default     = 30

  validation {
    condition     = var.volume_size >= 10 && var.volume_size <= 16384 && floor(var.volume_size) == var.volume_size
    error_message = "volume_size must be a whole number of GiB from 10 to 16384."
  }
}

variable "ventilator_volume_size" {
  description = "Root volume size of the ventilator, in GiB (it holds the corpus when --data is a local directory)."
  type        = number
  default     = 100

  validation {
    condition     = var.ventilator_volume_size >= 10 && var.ventilator_volume_size <= 16384 && floor(var.ventilator_volume_size) == var.ventilator_volume_size
    error_message = "ventilator_volume_size must be a whole number of GiB from 10 to 16384."
  }
}

variable "ubuntu_release" {
  description = "Ubuntu LTS release of the AMI, looked up by name (Canonical's owner id), newest image first."
  type        = string
  default     = "24.04"

  validation {
    condition     = can(regex("^[0-9]{2}\\.04$", var.ubuntu_release)) && tonumber(split(".", var.ubuntu_release)[0]) % 2 == 0
    error_message = "ubuntu_release must be an LTS release such as \"24.04\" (even year, .04)."
  }
}

variable "use_spot" {
  description = "Run the workers above on_demand_base_capacity as spot instances (the ventilator stays on-demand: it holds the job's state)."
  type        = bool
  default     = true
}

variable "worker_instance_types" {
  description = "Instance types the workers' group may use (mixed instances policy; more types, more spot pools). Use types of the same vCPU count as worker_instance_type: processes per host and the scaling target come from it. Empty = worker_instance_type only."
  type        = list(string)
  default     = ["c6i.2xlarge", "c6a.2xlarge", "c7i.2xlarge", "c5.2xlarge"]

  validation {
    condition     = alltrue([for t in var.worker_instance_types : can(regex("^[a-z][a-z0-9-]*\\.[a-z0-9]+$", t))])
    error_message = "worker_instance_types must be EC2 instance types such as \"c6i.2xlarge\"."
  }
}

variable "spot_allocation_strategy" {
  description = "How the group picks spot pools. price-capacity-optimized (AWS's advice since 2022): the cheapest of the pools least likely to be interrupted; capacity-optimized ignores price; lowest-price ignores interruptions (each costs a drain and a redone task)."
  type        = string
  default     = "price-capacity-optimized"

  validation {
    condition     = contains(["capacity-optimized", "capacity-optimized-prioritized", "price-capacity-optimized", "lowest-price"], var.spot_allocation_strategy)
    error_message = "spot_allocation_strategy must be capacity-optimized, capacity-optimized-prioritized, price-capacity-optimized or lowest-price."
  }
}

variable "on_demand_base_capacity" {
  description = "Workers that are always on-demand, whatever use_spot says (the rest is spot)."
  type        = number
  default     = 0

  validation {
    condition     = var.on_demand_base_capacity >= 0 && floor(var.on_demand_base_capacity) == var.on_demand_base_capacity
    error_message = "on_demand_base_capacity must be a whole number >= 0."
  }
}

variable "capacity_rebalance" {
  description = "Let the group replace a spot worker that got a rebalance recommendation before it is interrupted (the worker drains on the recommendation)."
  type        = bool
  default     = true
}

variable "worker_min_size" {
  description = "Smallest size of the workers' group; it goes back there when a job ends (0 = nothing runs, nothing is billed between jobs)."
  type        = number
  default     = 0

  validation {
    condition     = var.worker_min_size >= 0 && floor(var.worker_min_size) == var.worker_min_size
    error_message = "worker_min_size must be a whole number >= 0."
  }
}

variable "worker_max_size" {
  description = "Largest size of the workers' group, whatever the backlog (at least number_of_worker)."
  type        = number
  default     = 20

  validation {
    condition     = var.worker_max_size >= 1 && var.worker_max_size <= 500 && floor(var.worker_max_size) == var.worker_max_size
    error_message = "worker_max_size must be a whole number from 1 to 500."
  }
}

variable "autoscale" {
  description = "Size the workers' group on the ventilator's backlog (the ventilator publishes it to CloudWatch). false = a fixed group of number_of_worker."
  type        = bool
  default     = true
}

variable "scaling_tasks_per_process" {
  description = "Target of the backlog policy: tasks (waiting + being computed) per worker process, so per instance this times its processes. 1 = as many instances as keep every task busy."
  type        = number
  default     = 1

  validation {
    condition     = var.scaling_tasks_per_process > 0 && var.scaling_tasks_per_process <= 100
    error_message = "scaling_tasks_per_process must be more than 0 and at most 100."
  }
}

variable "worker_warmup_seconds" {
  description = "Seconds from launch until a new worker computes (boot, cloud-init, pip): the policy does not count it before."
  type        = number
  default     = 300

  validation {
    condition     = var.worker_warmup_seconds >= 0 && var.worker_warmup_seconds <= 3600
    error_message = "worker_warmup_seconds must be from 0 to 3600."
  }
}

variable "job_silence_minutes" {
  description = "The workers' group goes to worker_min_size when the ventilator has published no backlog for this many minutes (killed, its instance gone, or never started), not only when it says the job ended."
  type        = number
  default     = 15

  validation {
    condition     = var.job_silence_minutes >= 2 && var.job_silence_minutes <= 1440 && floor(var.job_silence_minutes) == var.job_silence_minutes
    error_message = "job_silence_minutes must be a whole number of minutes from 2 to 1440."
  }
}

variable "drain_timeout_seconds" {
  description = "Heartbeat timeout of the termination lifecycle hook: how long scale-in waits for a worker to drain (it completes the hook itself when done)."
  type        = number
  default     = 300

  validation {
    condition     = var.drain_timeout_seconds >= 30 && var.drain_timeout_seconds <= 7200
    error_message = "drain_timeout_seconds must be from 30 to 7200 (the lifecycle hook's limits)."
  }
}

variable "instance_hourly_price" {
  description = "USD per worker instance-hour (e.g. the spot price of worker_instance_type): the sink's summary then gives the job's cost. null = hours only."
  type        = number
  default     = null

  validation {
    condition     = var.instance_hourly_price == null || try(var.instance_hourly_price >= 0, false)
    error_message = "instance_hourly_price must be a number of USD >= 0, or null."
  }
}

variable "spot_max_price" {
  description = "Maximum hourly spot price in USD, as a string (null = up to the on-demand price)."
  type        = string
  default     = null

  validation {
    condition     = var.spot_max_price == null || can(regex("^[0-9]+(\\.[0-9]+)?$", var.spot_max_price))
    error_message = "spot_max_price must be a decimal number of USD such as \"0.25\", or null."
  }
}

# ---------------------------------------------------------------- access

variable "key_name" {
  description = "Existing EC2 key pair for ssh (set this or ssh_public_key)."
  type        = string
  default     = null
}

variable "ssh_public_key" {
  description = "Public key (OpenSSH format) to create a key pair from (set this or key_name)."
  type        = string
  default     = null

  validation {
    condition     = var.ssh_public_key == null || can(regex("^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp[0-9]+) [A-Za-z0-9+/=]+", var.ssh_public_key))
    error_message = "ssh_public_key must be an OpenSSH public key line (ssh-ed25519 AAAA..., ssh-rsa AAAA...)."
  }
}

variable "admin_cidrs" {
  description = "CIDRs allowed to ssh to the instances (your own address as x.x.x.x/32). Nothing else reaches the instances from outside."
  type        = list(string)

  validation {
    condition     = alltrue([for c in var.admin_cidrs : can(cidrhost(c, 0))])
    error_message = "admin_cidrs must be a list of CIDRs such as [\"203.0.113.7/32\"]."
  }
  validation {
    condition     = !anytrue([for c in var.admin_cidrs : endswith(c, "/0")])
    error_message = "admin_cidrs must not open ssh to the whole internet (/0): use your own address, e.g. \"203.0.113.7/32\"."
  }
}

# ---------------------------------------------------------------- output

variable "bucket_name" {
  description = "S3 bucket for the shards (created when create_bucket is true, else it must exist)."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.bucket_name)) && !can(regex("\\.\\.|^[0-9.]+$", var.bucket_name))
    error_message = "bucket_name must be a valid S3 bucket name: 3-63 characters of lowercase letters, digits, '.' and '-', starting and ending with a letter or digit."
  }
}

variable "bucket_prefix" {
  description = "Key prefix of this job's output inside the bucket; the instance role can write only below it."
  type        = string
  default     = "mlm"

  validation {
    condition     = can(regex("^/*([A-Za-z0-9!_.*'()-]+/)*[A-Za-z0-9!_.*'()-]*/*$", var.bucket_prefix))
    error_message = "bucket_prefix must be a key prefix such as \"bert/run1\" (letters, digits, !_.*'()- and '/')."
  }
}

variable "create_bucket" {
  description = "Create the bucket (public access blocked, owner-enforced, encrypted)."
  type        = bool
  default     = false
}

variable "force_destroy_bucket" {
  description = "Let `terraform destroy` delete a bucket this module created even if it holds shards."
  type        = bool
  default     = false
}

# ---------------------------------------------------------------- software and job

variable "worker_processes" {
  description = "Worker processes per worker host (mlm-worker --processes); 0 = one per vCPU of worker_instance_type."
  type        = number
  default     = 0

  validation {
    condition     = var.worker_processes >= 0 && var.worker_processes <= 512 && floor(var.worker_processes) == var.worker_processes
    error_message = "worker_processes must be a whole number from 0 (= one per vCPU) to 512."
  }
}

variable "package_spec" {
  description = "pip requirement that cloud-init installs into /opt/mlm/venv (e.g. \"git+https://github.com/ORG/mlm-pipeline.git@v0.1.0\" or the URL of the release's sdist, which each instance builds; a wheel only of the workers' architecture and Python); null = leave it to ansible init.yaml, which only a fixed group (autoscale = false) can wait for: autoscale = true refuses null."
  type        = string
  default     = null
}

variable "pip_extra_args" {
  description = "Extra pip install arguments for cloud-init, e.g. [\"--index-url\", \"https://pypi.example.org/simple\"]."
  type        = list(string)
  default     = []
}

variable "start_workers_on_boot" {
  description = "cloud-init starts the worker service (pointed at the ventilator) as soon as the package is installed: a new worker joins with no manual step. Needs package_spec. null = as autoscale (an instance the group starts must work on its own: autoscale refuses false)."
  type        = bool
  default     = null
}

variable "ventilator_port" {
  description = "Ventilator task port (--vport), open only inside the fleet's security group."
  type        = number
  default     = 5557

  validation {
    condition     = var.ventilator_port >= 1024 && var.ventilator_port <= 65535 && var.ventilator_port != 22
    error_message = "ventilator_port must be in 1024-65535."
  }
}

variable "sink_port" {
  description = "Sink port (--sink-port), open only inside the fleet's security group. Must differ from ventilator_port."
  type        = number
  default     = 5558

  validation {
    condition     = var.sink_port >= 1024 && var.sink_port <= 65535
    error_message = "sink_port must be in 1024-65535 (and differ from ventilator_port)."
  }
}

variable "metrics_port" {
  description = "Prometheus metrics of the ventilator on this port (--metrics-port) and of its sink on the next one (--sink-metrics-port); 0 = no metrics. Reachable only from monitoring_cidrs."
  type        = number
  default     = 0

  validation {
    condition     = var.metrics_port == 0 || (var.metrics_port >= 1024 && var.metrics_port <= 65534)
    error_message = "metrics_port must be 0 (no metrics) or in 1024-65534 (the sink's metrics use the next port)."
  }
}

variable "monitoring_cidrs" {
  description = "CIDRs of your Prometheus, allowed to scrape the metrics ports (plain HTTP, no authentication). Empty: reach them through an ssh tunnel."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.monitoring_cidrs : can(cidrhost(c, 0))])
    error_message = "monitoring_cidrs must be a list of CIDRs such as [\"10.0.0.0/16\"]."
  }
  validation {
    condition     = !anytrue([for c in var.monitoring_cidrs : endswith(c, "/0")])
    error_message = "monitoring_cidrs must not open the metrics to the whole internet (/0)."
  }
}

variable "data_dir" {
  description = "Corpus for the ventilator (--data): a directory on the ventilator instance or an s3:// URI (the role then gets read-only access to it)."
  type        = string
  default     = "/data/corpus"

  validation {
    condition     = startswith(var.data_dir, "/") || can(regex("^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$", var.data_dir))
    error_message = "data_dir must be an absolute path on the ventilator or an s3://bucket/prefix URI."
  }
}

variable "vocab_file" {
  description = "Vocabulary file on the ventilator instance (--vocab-file); null = the ventilator's default."
  type        = string
  default     = null
}

variable "job_args" {
  description = "Extra ventilator job flags without the leading --, e.g. { dupe-factor = \"5\", max-seq-length = \"128\" }."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for k, v in var.job_args : can(regex("^[a-z][a-z0-9-]*$", k)) && can(regex("^[A-Za-z0-9._:/=+-]+$", v))])
    error_message = "job_args keys must be flag names like \"dupe-factor\" and values plain words/numbers (no spaces or shell characters)."
  }
}

variable "tags" {
  description = "Extra tags on every resource (Project, Fleet, Role, Name are set by the module)."
  type        = map(string)
  default     = {}

  validation {
    condition     = length(setintersection(keys(var.tags), ["Project", "Fleet", "Role", "Name", "ManagedBy"])) == 0
    error_message = "tags must not set Project, Fleet, Role, Name or ManagedBy: the Ansible inventory relies on the module's values."
  }
}

# The EC2 fleet of mlm-pipeline: one ventilator/sink instance and the
# workers' Auto Scaling group (autoscaling.tf), a security group that keeps the pipeline
# ports inside the fleet, an instance role that can write only below the
# output prefix, and (optionally) the VPC and the bucket.
#
# Names, tags, the IAM policy, user_data, command lines and the inventory come
# from ./modules/fleet_config, which needs no provider and is covered by
# `terraform test` there.

module "fleet" {
  source = "./modules/fleet_config"

  fleet_name             = var.fleet_name
  region                 = var.region
  partition              = data.aws_partition.current.partition
  number_of_worker       = var.number_of_worker
  worker_processes       = var.worker_processes
  worker_vcpus           = data.aws_ec2_instance_type.worker.default_vcpus
  ventilator_port        = var.ventilator_port
  sink_port              = var.sink_port
  metrics_port           = var.metrics_port
  bucket_name            = var.bucket_name
  bucket_prefix          = var.bucket_prefix
  package_spec           = var.package_spec
  pip_extra_args         = var.pip_extra_args
  start_workers_on_boot  = local.start_workers_on_boot
  data_dir               = var.data_dir
  vocab_file             = var.vocab_file
  job_args               = var.job_args
  extra_tags             = var.tags
  spot_watch             = true
  autoscaling_group_name = local.worker_group_name
  lifecycle_hook_name    = local.drain_hook_name
  cloudwatch_namespace   = local.autoscale ? local.cloudwatch_namespace : null
  instance_hourly_price  = var.instance_hourly_price

  # Only the worker user_data and the inventory depend on these: the
  # ventilator's own user_data and tags do not, so there is no cycle.
  ventilator_private_ip = aws_instance.ventilator.private_ip
  ventilator_public_ip  = aws_instance.ventilator.public_ip
  # The group's instances when Terraform last looked (the aws_ec2 inventory sees them as they come and go).
  workers = [for i, ip in data.aws_instances.workers.private_ips : {
    private_ip = ip
    public_ip  = try(data.aws_instances.workers.public_ips[i], null)
  }]
}

data "aws_partition" "current" {}

data "aws_availability_zones" "available" {
  state = "available"
}

# ---------------------------------------------------------------- AMI: current Ubuntu LTS, by name

data "aws_ec2_instance_type" "worker" {
  instance_type = var.worker_instance_type
}

# Every type the group may launch: they must agree with worker_instance_type (autoscaling.tf's precondition).
data "aws_ec2_instance_type" "worker_types" {
  for_each      = toset(local.worker_types)
  instance_type = each.key
}

data "aws_ec2_instance_type" "ventilator" {
  instance_type = var.ventilator_instance_type
}

locals {
  # Graviton types get the arm64 image, the others amd64.
  arch = {
    worker     = contains(data.aws_ec2_instance_type.worker.supported_architectures, "arm64") ? "arm64" : "amd64"
    ventilator = contains(data.aws_ec2_instance_type.ventilator.supported_architectures, "arm64") ? "arm64" : "amd64"
  }
}

data "aws_ami" "ubuntu" {
  for_each = toset(values(local.arch))

  most_recent = true
  owners      = ["099720109477"] # Canonical

  filter {
    name   = "name"
    values = ["ubuntu/images/hvm-ssd*/ubuntu-*-${var.ubuntu_release}-${each.key}-server-*"]
  }
  filter {
    name   = "architecture"
    values = [each.key == "arm64" ? "arm64" : "x86_64"]
  }
  filter {
    name   = "virtualization-type"
    values = ["hvm"]
  }
  filter {
    name   = "root-device-type"
    values = ["ebs"]
  }
}

# ---------------------------------------------------------------- network (optional VPC)

locals {
  create_vpc = var.subnet_id == null
  # One /24 per zone: as many as vpc_cidr holds.
  subnet_capacity = pow(2, 24 - tonumber(split("/", var.vpc_cidr)[1]))
  zone_choice = distinct(concat(
    var.availability_zone == null ? [] : [var.availability_zone],
    length(var.availability_zones) > 0 ? var.availability_zones : slice(data.aws_availability_zones.available.names, 0, min(3, length(data.aws_availability_zones.available.names))),
  ))
  zones = length(var.availability_zones) > 0 ? local.zone_choice : slice(local.zone_choice, 0, min(length(local.zone_choice), local.subnet_capacity))
  # The ventilator's subnet; the workers' group spreads over all of them.
  subnet_id         = local.create_vpc ? aws_subnet.fleet[0].id : var.subnet_id
  worker_subnet_ids = local.create_vpc ? aws_subnet.fleet[*].id : distinct(concat([var.subnet_id], var.worker_subnet_ids))
  vpc_id            = local.create_vpc ? aws_vpc.fleet[0].id : data.aws_subnet.given[0].vpc_id
}

data "aws_subnet" "given" {
  count = local.create_vpc ? 0 : 1
  id    = var.subnet_id
}

resource "aws_vpc" "fleet" {
  count = local.create_vpc ? 1 : 0

  cidr_block           = var.vpc_cidr
  enable_dns_support   = true
  enable_dns_hostnames = true
  tags                 = { Name = "${var.fleet_name}-vpc" }
}

resource "aws_internet_gateway" "fleet" {
  count = local.create_vpc ? 1 : 0

  vpc_id = aws_vpc.fleet[0].id
  tags   = { Name = "${var.fleet_name}-igw" }
}

resource "aws_subnet" "fleet" {
  count = local.create_vpc ? length(local.zones) : 0

  vpc_id                  = aws_vpc.fleet[0].id
  cidr_block              = cidrsubnet(var.vpc_cidr, 24 - tonumber(split("/", var.vpc_cidr)[1]), count.index)
  availability_zone       = local.zones[count.index]
  map_public_ip_on_launch = var.associate_public_ip
  tags                    = { Name = "${var.fleet_name}-subnet-${local.zones[count.index]}" }

  lifecycle {
    precondition {
      condition     = length(local.zones) <= local.subnet_capacity
      error_message = "availability_zones lists more zones than vpc_cidr holds /24 subnets: use a larger vpc_cidr (a /22 holds four)."
    }
  }
}

resource "aws_route_table" "fleet" {
  count = local.create_vpc ? 1 : 0

  vpc_id = aws_vpc.fleet[0].id
  route {
    cidr_block = "0.0.0.0/0"
    gateway_id = aws_internet_gateway.fleet[0].id
  }
  tags = { Name = "${var.fleet_name}-rt" }
}

resource "aws_route_table_association" "fleet" {
  count = local.create_vpc ? length(local.zones) : 0

  subnet_id      = aws_subnet.fleet[count.index].id
  route_table_id = aws_route_table.fleet[0].id
}

# S3 traffic stays inside AWS (no NAT, no data transfer charge).
resource "aws_vpc_endpoint" "s3" {
  count = local.create_vpc ? 1 : 0

  vpc_id            = aws_vpc.fleet[0].id
  service_name      = "com.amazonaws.${var.region}.s3"
  vpc_endpoint_type = "Gateway"
  route_table_ids   = [aws_route_table.fleet[0].id]
  tags              = { Name = "${var.fleet_name}-s3" }
}

# ---------------------------------------------------------------- security group

resource "aws_security_group" "fleet" {
  name_prefix = "${var.fleet_name}-fleet-"
  description = "mlm-pipeline fleet ${var.fleet_name}: pipeline ports inside the group, ssh from admin_cidrs"
  vpc_id      = local.vpc_id
  tags        = { Name = "${var.fleet_name}-fleet" }

  lifecycle {
    create_before_destroy = true
  }
}

# ssh only from the admin CIDRs.
resource "aws_vpc_security_group_ingress_rule" "ssh" {
  for_each = toset(var.admin_cidrs)

  security_group_id = aws_security_group.fleet.id
  description       = "ssh from admin ${each.value}"
  ip_protocol       = "tcp"
  from_port         = 22
  to_port           = 22
  cidr_ipv4         = strcontains(each.value, ":") ? null : each.value
  cidr_ipv6         = strcontains(each.value, ":") ? each.value : null
}

# The ventilator and sink ports only from members of the same group.
resource "aws_vpc_security_group_ingress_rule" "pipeline" {
  for_each = {
    ventilator = var.ventilator_port
    sink       = var.sink_port
  }

  security_group_id            = aws_security_group.fleet.id
  description                  = "${each.key} port from the fleet only"
  ip_protocol                  = "tcp"
  from_port                    = each.value
  to_port                      = each.value
  referenced_security_group_id = aws_security_group.fleet.id
}

# The ventilator's and sink's Prometheus metrics only from the monitoring CIDRs.
resource "aws_vpc_security_group_ingress_rule" "metrics" {
  for_each = var.metrics_port == 0 ? {} : {
    for pair in setproduct(var.monitoring_cidrs, [var.metrics_port, var.metrics_port + 1]) :
    "${pair[0]} ${pair[1]}" => { cidr = pair[0], port = pair[1] }
  }

  security_group_id = aws_security_group.fleet.id
  description       = "metrics port ${each.value.port} from ${each.value.cidr}"
  ip_protocol       = "tcp"
  from_port         = each.value.port
  to_port           = each.value.port
  cidr_ipv4         = strcontains(each.value.cidr, ":") ? null : each.value.cidr
  cidr_ipv6         = strcontains(each.value.cidr, ":") ? each.value.cidr : null
}

# Out: apt/pip at boot, S3, and the workers' connections to the ventilator/sink.
resource "aws_vpc_security_group_egress_rule" "all" {
  security_group_id = aws_security_group.fleet.id
  description       = "all outbound"
  ip_protocol       = "-1"
  cidr_ipv4         = "0.0.0.0/0"
}

# ---------------------------------------------------------------- IAM: instance roles, no access keys
# One role per side, each with only what it uses: both read the corpus and write below the output prefix
# (the ventilator its manifest and summary, the workers their shards); the ventilator publishes the backlog,
# the workers complete their drain hook and leave the group (autoscaling.tf).

data "aws_iam_policy_document" "assume_ec2" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "ventilator" {
  name_prefix        = "${var.fleet_name}-ventilator-"
  description        = "mlm-pipeline fleet ${var.fleet_name}, ventilator/sink: manifest below ${module.fleet.output_uri}"
  assume_role_policy = data.aws_iam_policy_document.assume_ec2.json
}

resource "aws_iam_role" "worker" {
  name_prefix        = "${var.fleet_name}-worker-"
  description        = "mlm-pipeline fleet ${var.fleet_name}, workers: shards below ${module.fleet.output_uri}"
  assume_role_policy = data.aws_iam_policy_document.assume_ec2.json
}

resource "aws_iam_role_policy" "shards" {
  for_each = { ventilator = aws_iam_role.ventilator.id, worker = aws_iam_role.worker.id }

  name   = "write-shards-under-prefix"
  role   = each.value
  policy = module.fleet.s3_policy_json
}

resource "aws_iam_instance_profile" "ventilator" {
  name_prefix = "${var.fleet_name}-ventilator-"
  role        = aws_iam_role.ventilator.name
}

resource "aws_iam_instance_profile" "worker" {
  name_prefix = "${var.fleet_name}-worker-"
  role        = aws_iam_role.worker.name
}

# ---------------------------------------------------------------- S3 bucket (optional)

resource "aws_s3_bucket" "shards" {
  count = var.create_bucket ? 1 : 0

  bucket        = var.bucket_name
  force_destroy = var.force_destroy_bucket
}

resource "aws_s3_bucket_public_access_block" "shards" {
  count = var.create_bucket ? 1 : 0

  bucket                  = aws_s3_bucket.shards[0].id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_ownership_controls" "shards" {
  count = var.create_bucket ? 1 : 0

  bucket = aws_s3_bucket.shards[0].id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "shards" {
  count = var.create_bucket ? 1 : 0

  bucket = aws_s3_bucket.shards[0].id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "AES256"
    }
  }
}

# A worker killed mid-upload leaves an unfinished multipart upload: it never
# becomes an object (the shard is redone under the same key), but its parts
# are billed until aborted.
resource "aws_s3_bucket_lifecycle_configuration" "shards" {
  count = var.create_bucket ? 1 : 0

  bucket = aws_s3_bucket.shards[0].id
  rule {
    id     = "abort-incomplete-multipart-uploads"
    status = "Enabled"
    filter {}
    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }
}

# ---------------------------------------------------------------- ssh key (optional)

resource "aws_key_pair" "fleet" {
  count = var.ssh_public_key == null ? 0 : 1

  key_name_prefix = "${var.fleet_name}-"
  public_key      = var.ssh_public_key
}

locals {
  key_name = var.ssh_public_key == null ? var.key_name : aws_key_pair.fleet[0].key_name
}

# ---------------------------------------------------------------- instances

resource "aws_instance" "ventilator" {
  ami                         = data.aws_ami.ubuntu[local.arch.ventilator].id
  instance_type               = var.ventilator_instance_type
  subnet_id                   = local.subnet_id
  vpc_security_group_ids      = [aws_security_group.fleet.id]
  iam_instance_profile        = aws_iam_instance_profile.ventilator.name
  key_name                    = local.key_name
  associate_public_ip_address = var.associate_public_ip
  user_data                   = module.fleet.ventilator_user_data

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required" # IMDSv2 only
    http_put_response_hop_limit = 1
  }

  root_block_device {
    volume_type           = "gp3"
    volume_size           = var.ventilator_volume_size
    encrypted             = true
    delete_on_termination = true
  }

  tags = module.fleet.ventilator_tags

  lifecycle {
    # A newer Ubuntu image must not replace a running fleet.
    ignore_changes = [ami]

    precondition {
      condition     = !(var.key_name != null && var.ssh_public_key != null)
      error_message = "Set key_name (an existing key pair) or ssh_public_key (a new one), not both."
    }
    precondition {
      condition     = var.ventilator_port != var.sink_port
      error_message = "ventilator_port and sink_port must differ."
    }
    precondition {
      condition     = var.metrics_port == 0 || length(setintersection([var.metrics_port, var.metrics_port + 1], [var.ventilator_port, var.sink_port])) == 0
      error_message = "metrics_port and metrics_port + 1 must differ from ventilator_port and sink_port."
    }
  }
}

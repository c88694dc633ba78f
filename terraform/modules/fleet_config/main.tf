# Provider-free logic of the fleet: names, tags, derived settings, the S3
# policy document, cloud-init user_data, command lines and the static Ansible
# inventory. No resources and no providers: `terraform test` runs it offline.

locals {
  venv = "${var.install_dir}/venv"

  # ---- names and tags (the Ansible aws_ec2 inventory keys on Project, Fleet and Role)
  ventilator_name = "${var.fleet_name}-ventilator"
  worker_names    = [for i in range(var.number_of_worker) : format("%s-worker-%03d", var.fleet_name, i)]

  common_tags = merge(var.extra_tags, {
    Project   = var.project
    Fleet     = var.fleet_name
    ManagedBy = "terraform"
  })
  # Job settings ride along as tags, so the aws_ec2 inventory hands them to
  # the playbooks (compose) without a separate variables file.
  job_tags = {
    MlmOutput          = local.output_uri
    MlmData            = var.data_dir
    MlmVport           = tostring(var.ventilator_port)
    MlmSinkPort        = tostring(var.sink_port)
    MlmWorkerProcesses = tostring(local.effective_worker_processes)
  }
  ventilator_tags = merge(local.common_tags, local.job_tags, {
    Name = local.ventilator_name
    Role = "ventilator"
  })
  worker_tags = [for i, name in local.worker_names : merge(local.common_tags, local.job_tags, {
    Name        = name
    Role        = "worker"
    WorkerIndex = tostring(i)
  })]
  # Instances the Auto Scaling group starts: no Name (it would be the same on all; the inventory names them
  # by instance id), and the drain hook for Ansible to pass on.
  worker_group_tags = merge(local.common_tags, local.job_tags, { Role = "worker" },
  var.lifecycle_hook_name == null ? {} : { MlmLifecycleHook = var.lifecycle_hook_name })

  # ---- derived settings
  effective_worker_processes = var.worker_processes > 0 ? var.worker_processes : max(1, coalesce(var.worker_vcpus, 1))
  total_worker_processes     = var.number_of_worker * local.effective_worker_processes

  bucket_prefix = trim(var.bucket_prefix, "/")
  output_uri    = local.bucket_prefix == "" ? "s3://${var.bucket_name}" : "s3://${var.bucket_name}/${local.bucket_prefix}"
  vserver       = var.ventilator_private_ip

  # An s3:// corpus gets read-only access in the instance policy.
  data_on_s3     = startswith(var.data_dir, "s3://")
  data_s3_parts  = local.data_on_s3 ? regex("^s3://([^/]+)/*(.*)$", var.data_dir) : ["", ""]
  data_s3_bucket = local.data_s3_parts[0]
  data_s3_prefix = trim(local.data_s3_parts[1], "/")

  # ---- IAM: write (and read back) only below the output prefix; list only that prefix.
  output_object_arn    = local.bucket_prefix == "" ? "arn:${var.partition}:s3:::${var.bucket_name}/*" : "arn:${var.partition}:s3:::${var.bucket_name}/${local.bucket_prefix}/*"
  output_list_prefixes = local.bucket_prefix == "" ? ["*"] : [local.bucket_prefix, "${local.bucket_prefix}/*"]
  s3_policy = {
    Version = "2012-10-17"
    Statement = concat(
      [
        {
          Sid      = "ShardsUnderOutputPrefix"
          Effect   = "Allow"
          Action   = ["s3:PutObject", "s3:GetObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"]
          Resource = [local.output_object_arn]
        },
        {
          Sid       = "ListOutputPrefixOnly"
          Effect    = "Allow"
          Action    = ["s3:ListBucket"]
          Resource  = ["arn:${var.partition}:s3:::${var.bucket_name}"]
          Condition = { StringLike = { "s3:prefix" = local.output_list_prefixes } }
        },
      ],
      [for statement in [
        {
          Sid      = "ReadCorpus"
          Effect   = "Allow"
          Action   = ["s3:GetObject"]
          Resource = [local.data_s3_prefix == "" ? "arn:${var.partition}:s3:::${local.data_s3_bucket}/*" : "arn:${var.partition}:s3:::${local.data_s3_bucket}/${local.data_s3_prefix}/*"]
        },
        {
          Sid       = "ListCorpus"
          Effect    = "Allow"
          Action    = ["s3:ListBucket"]
          Resource  = ["arn:${var.partition}:s3:::${local.data_s3_bucket}"]
          Condition = { StringLike = { "s3:prefix" = local.data_s3_prefix == "" ? ["*"] : [local.data_s3_prefix, "${local.data_s3_prefix}/*"] } }
        },
      ] : statement if local.data_on_s3],
    )
  }

  # ---- command lines
  job_flags = join("", [for k in sort(keys(var.job_args)) : " --${k} ${var.job_args[k]}"])
  ventilator_command = join(" ", compact([
    "${local.venv}/bin/mlm-ventilator",
    "--data ${var.data_dir}",
    "--output ${local.output_uri}",
    "--vport ${var.ventilator_port}",
    "--sink-port ${var.sink_port}",
    var.metrics_port == 0 ? "" : "--metrics-port ${var.metrics_port} --sink-metrics-port ${var.metrics_port + 1}",
    var.vocab_file == null ? "" : "--vocab-file ${var.vocab_file}",
    var.cloudwatch_namespace == null ? "" : "--cloudwatch-namespace ${var.cloudwatch_namespace} --cloudwatch-region ${var.region}",
    var.instance_hourly_price == null ? "" : "--instance-hourly-price ${var.instance_hourly_price}",
  ]))
  ventilator_command_full = "${local.ventilator_command}${local.job_flags}"
  # Spot watch and the drain hook (workers of an Auto Scaling group): see docs/fleet.md.
  worker_watch_args = join("", [
    var.spot_watch ? " --spot-watch" : "",
    var.spot_watch && var.lifecycle_hook_name != null && var.autoscaling_group_name != null ? " --lifecycle-hook ${var.lifecycle_hook_name} --autoscaling-group ${var.autoscaling_group_name}" : "",
  ])
  worker_command = "${local.venv}/bin/mlm-worker --ventilator ${coalesce(local.vserver, "VENTILATOR_PRIVATE_IP")}:${var.ventilator_port} --processes ${local.effective_worker_processes}${local.worker_watch_args}"

  # ---- cloud-init
  worker_unit = templatefile("${path.module}/templates/mlm-worker@.service.tftpl", {
    user      = var.service_user
    venv      = local.venv
    vserver   = coalesce(local.vserver, "VENTILATOR_PRIVATE_IP")
    vport     = var.ventilator_port
    processes = local.effective_worker_processes
    extra     = local.worker_watch_args
  })

  install_runcmd = concat(
    [
      ["mkdir", "-p", var.install_dir],
      ["python3", "-m", "venv", local.venv],
    ],
    [for spec in compact([var.package_spec]) : concat(["${local.venv}/bin/pip", "install", "--upgrade"], var.pip_extra_args, [spec])],
  )

  base_cloud_config = {
    package_update = true
    # gcc and the headers build the compiled kernels when pip builds the package from source on the instance
    # (an sdist, a git URL); without them the numpy code runs, several times slower at dupe factor 10.
    packages = ["python3", "python3-venv", "python3-pip", "python3-dev", "gcc"]
    users = [
      "default",
      {
        name           = var.service_user
        system         = true
        shell          = "/usr/sbin/nologin"
        homedir        = var.install_dir
        no_create_home = true
      },
    ]
  }

  start_workers = var.start_workers_on_boot && var.package_spec != null && local.vserver != null

  ventilator_cloud_config = merge(local.base_cloud_config, {
    runcmd = concat(local.install_runcmd, [for d in [var.data_dir] : ["mkdir", "-p", d] if !local.data_on_s3])
  })

  worker_cloud_config = merge(local.base_cloud_config, {
    write_files = [
      {
        path        = "/etc/systemd/system/mlm-worker@.service"
        permissions = "0644"
        owner       = "root:root"
        content     = local.worker_unit
      },
    ]
    runcmd = concat(
      local.install_runcmd,
      [["systemctl", "daemon-reload"]],
      [for unit in ["mlm-worker@1.service"] : ["systemctl", "enable", "--now", unit] if local.start_workers],
    )
  })

  # ---- static inventory, same shape as the aws_ec2 one (groups ventilator/worker)
  inventory = {
    all = {
      vars = {
        ansible_user         = var.ssh_user
        mlm_fleet_name       = var.fleet_name
        mlm_install_dir      = var.install_dir
        vport                = var.ventilator_port
        mlm_sink_port        = var.sink_port
        mlm_output           = local.output_uri
        mlm_data             = var.data_dir
        mlm_worker_processes = local.effective_worker_processes
      }
      children = {
        ventilator = {
          hosts = { for ip in compact([var.ventilator_private_ip]) : local.ventilator_name => {
            ansible_host        = coalesce(var.ventilator_public_ip, ip)
            mlm_private_address = ip
          } }
        }
        worker = {
          hosts = { for i, w in var.workers : format("%s-worker-%03d", var.fleet_name, i) => {
            ansible_host        = coalesce(w.public_ip, w.private_ip)
            mlm_private_address = w.private_ip
          } }
        }
      }
    }
  }

  # ---- dynamic inventory: amazon.aws.aws_ec2 configuration keyed on the tags above.
  # ansible/inventory/aws_ec2.yml is this, rendered with the defaults (a test compares them).
  aws_ec2_inventory = {
    plugin  = "amazon.aws.aws_ec2"
    regions = [var.region]
    filters = {
      "tag:Project"         = var.project
      "tag:Fleet"           = var.fleet_name
      "instance-state-name" = "running"
    }
    # Workers of the Auto Scaling group carry no Name: they are named by instance id.
    hostnames = ["tag:Name", "instance-id"]
    compose = {
      ansible_host         = "public_ip_address | default(private_ip_address, true)"
      mlm_private_address  = "private_ip_address"
      ansible_user         = "'${var.ssh_user}'"
      vport                = "tags.MlmVport | default(5557) | int"
      mlm_sink_port        = "tags.MlmSinkPort | default(5558) | int"
      mlm_output           = "tags.MlmOutput | default('')"
      mlm_data             = "tags.MlmData | default('')"
      mlm_worker_processes = "tags.MlmWorkerProcesses | default(0) | int"
      # Workers the group started: working.yaml keeps their spot watch and drain hook.
      mlm_autoscaling_group = "tags['aws:autoscaling:groupName'] | default('')"
      mlm_lifecycle_hook    = "tags.MlmLifecycleHook | default('')"
    }
    groups = {
      ventilator = "tags.Role == 'ventilator'"
      worker     = "tags.Role == 'worker'"
    }
  }
}

# terraform test (run from terraform/modules/fleet_config): no provider needed.

variables {
  fleet_name       = "demo"
  number_of_worker = 3
  bucket_name      = "my-shards"
  bucket_prefix    = "/bert/run1/"
}

run "names_and_tags" {
  command = apply

  assert {
    condition     = output.ventilator_name == "demo-ventilator"
    error_message = "ventilator name is <fleet>-ventilator"
  }
  assert {
    condition     = output.worker_names == ["demo-worker-000", "demo-worker-001", "demo-worker-002"]
    error_message = "worker names are <fleet>-worker-NNN by index"
  }
  assert {
    condition     = length(output.worker_tags) == var.number_of_worker
    error_message = "one tag set per worker: number_of_worker drives the count"
  }
  assert {
    condition     = alltrue([for t in output.worker_tags : t.Role == "worker" && t.Project == "mlm-pipeline" && t.Fleet == "demo"])
    error_message = "workers carry the Role/Project/Fleet tags the aws_ec2 inventory keys on"
  }
  assert {
    condition     = output.ventilator_tags.Role == "ventilator" && output.ventilator_tags.Project == "mlm-pipeline" && output.ventilator_tags.Fleet == "demo"
    error_message = "the ventilator carries Role=ventilator plus the fleet tags"
  }
}

run "zero_workers" {
  command = apply
  variables {
    number_of_worker = 0
  }
  assert {
    condition     = length(output.worker_names) == 0 && output.total_worker_processes == 0
    error_message = "number_of_worker = 0 means no worker"
  }
}

run "processes_default_to_vcpus" {
  command = apply
  variables {
    worker_vcpus = 8
  }
  assert {
    condition     = output.effective_worker_processes == 8 && output.total_worker_processes == 24
    error_message = "worker_processes = 0 means one process per vCPU"
  }
}

run "processes_explicit" {
  command = apply
  variables {
    worker_vcpus     = 8
    worker_processes = 3
  }
  assert {
    condition     = output.effective_worker_processes == 3
    error_message = "an explicit worker_processes wins over the vCPU count"
  }
  assert {
    condition     = endswith(output.worker_command, "--processes 3")
    error_message = "the worker command line passes --processes"
  }
}

run "s3_policy_only_the_prefix" {
  command = apply

  assert {
    condition     = output.output_uri == "s3://my-shards/bert/run1"
    error_message = "bucket_prefix is normalised (no leading/trailing /)"
  }
  assert {
    condition = alltrue([
      for s in jsondecode(output.s3_policy_json).Statement :
      s.Effect == "Allow" && alltrue([for r in s.Resource : r == "arn:aws:s3:::my-shards/bert/run1/*" || r == "arn:aws:s3:::my-shards"])
    ])
    error_message = "the policy names only the output prefix (objects) and the bucket (listing)"
  }
  assert {
    condition = alltrue(flatten([
      for s in jsondecode(output.s3_policy_json).Statement : [
        for a in s.Action : contains(["s3:PutObject", "s3:GetObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts", "s3:ListBucket"], a)
      ]
    ]))
    error_message = "no action beyond writing/reading shards and listing"
  }
  assert {
    condition = alltrue([
      for s in jsondecode(output.s3_policy_json).Statement :
      s.Condition.StringLike["s3:prefix"] == ["bert/run1", "bert/run1/*"] if contains(s.Action, "s3:ListBucket")
    ])
    error_message = "listing is limited to the prefix"
  }
  assert {
    condition     = !strcontains(output.s3_policy_json, "\"*\"") && !strcontains(output.s3_policy_json, "s3:*")
    error_message = "no wildcard action or resource"
  }
}

run "s3_corpus_is_read_only" {
  command = apply
  variables {
    data_dir = "s3://corpora/wiki/"
  }
  assert {
    condition = length([
      for s in jsondecode(output.s3_policy_json).Statement : s
      if contains(s.Resource, "arn:aws:s3:::corpora/wiki/*") && s.Action == ["s3:GetObject"]
    ]) == 1
    error_message = "an s3:// corpus gets GetObject only"
  }
  assert {
    condition     = !strcontains(output.ventilator_user_data, "s3://corpora")
    error_message = "no mkdir of an s3:// data location"
  }
}

run "partition" {
  command = apply
  variables {
    partition = "aws-cn"
  }
  assert {
    condition     = strcontains(output.s3_policy_json, "arn:aws-cn:s3:::my-shards/bert/run1/*")
    error_message = "ARNs follow the partition"
  }
}

run "user_data_without_package" {
  command = apply
  assert {
    condition     = startswith(output.worker_user_data, "#cloud-config\n")
    error_message = "user_data is cloud-config"
  }
  assert {
    condition     = !strcontains(output.worker_user_data, "pip") || !strcontains(output.worker_user_data, "\"install\"")
    error_message = "package_spec = null installs no package at boot"
  }
  assert {
    condition     = !output.starts_workers_on_boot && !strcontains(output.worker_user_data, "enable")
    error_message = "workers do not start on boot by default"
  }
  assert {
    condition     = contains(yamldecode(output.worker_user_data).packages, "python3-venv")
    error_message = "cloud-init installs Python and venv"
  }
}

run "user_data_installs_and_starts" {
  command = apply
  variables {
    package_spec          = "git+https://example.org/mlm-pipeline.git@v0.1.0"
    pip_extra_args        = ["--no-cache-dir"]
    start_workers_on_boot = true
    ventilator_private_ip = "10.42.1.10"
    worker_vcpus          = 4
  }
  assert {
    condition     = contains(yamldecode(output.worker_user_data).runcmd, ["/opt/mlm/venv/bin/pip", "install", "--upgrade", "--no-cache-dir", "git+https://example.org/mlm-pipeline.git@v0.1.0"])
    error_message = "cloud-init pip-installs package_spec into the venv"
  }
  assert {
    condition     = contains(yamldecode(output.worker_user_data).runcmd, ["systemctl", "enable", "--now", "mlm-worker@1.service"])
    error_message = "start_workers_on_boot enables and starts the worker unit"
  }
  assert {
    condition     = strcontains(yamldecode(output.worker_user_data).write_files[0].content, "ExecStart=/opt/mlm/venv/bin/mlm-worker --ventilator 10.42.1.10:5557 --processes 4")
    error_message = "the unit points the worker at the ventilator's private address"
  }
  assert {
    condition     = strcontains(yamldecode(output.worker_user_data).write_files[0].content, "Restart=on-failure")
    error_message = "the unit restarts on failure"
  }
  assert {
    condition     = !strcontains(lower(output.worker_user_data), "secret") && !strcontains(output.worker_user_data, "AWS_ACCESS_KEY")
    error_message = "no credentials in user_data (the instance role provides them)"
  }
}

run "no_start_without_ventilator_address" {
  command = apply
  variables {
    package_spec          = "mlm-pipeline==0.1.0"
    start_workers_on_boot = true
  }
  assert {
    condition     = !output.starts_workers_on_boot
    error_message = "without the ventilator's address the worker is installed but not started"
  }
}

run "commands" {
  command = apply
  variables {
    ventilator_private_ip = "10.42.1.10"
    vocab_file            = "/data/vocab.txt"
    job_args              = { "random-seed" = "7", "dupe-factor" = "2" }
  }
  assert {
    condition     = output.ventilator_command == "/opt/mlm/venv/bin/mlm-ventilator --data /data/corpus --output s3://my-shards/bert/run1 --vport 5557 --sink-port 5558 --vocab-file /data/vocab.txt --dupe-factor 2 --random-seed 7"
    error_message = "ventilator command line: ${output.ventilator_command}"
  }
  assert {
    condition     = output.worker_command == "/opt/mlm/venv/bin/mlm-worker --ventilator 10.42.1.10:5557 --processes 1"
    error_message = "worker command line: ${output.worker_command}"
  }
}

run "metrics_ports" {
  command = apply
  variables {
    metrics_port = 9101
  }
  assert {
    condition     = strcontains(output.ventilator_command, " --sink-port 5558 --metrics-port 9101 --sink-metrics-port 9102")
    error_message = "metrics on metrics_port (ventilator) and the next port (sink): ${output.ventilator_command}"
  }
}

run "no_metrics_by_default" {
  command = apply
  assert {
    condition     = !strcontains(output.ventilator_command, "metrics")
    error_message = "metrics are off unless metrics_port is set: ${output.ventilator_command}"
  }
}

run "metrics_ports_must_not_collide" {
  command = plan
  variables {
    metrics_port = 5556
  }
  expect_failures = [output.ventilator_command]
}

run "ports_must_differ" {
  command = plan
  variables {
    sink_port = 5557
  }
  expect_failures = [output.ventilator_command]
}

run "bad_fleet_name" {
  command = plan
  variables {
    fleet_name = "Bad_Name"
  }
  expect_failures = [var.fleet_name]
}

run "inventory_shape" {
  command = apply
  variables {
    ventilator_private_ip = "10.42.1.10"
    ventilator_public_ip  = "198.51.100.10"
    workers = [
      { private_ip = "10.42.1.20", public_ip = "198.51.100.20" },
      { private_ip = "10.42.1.21" },
    ]
  }
  assert {
    condition     = keys(yamldecode(output.inventory).all.children) == ["ventilator", "worker"]
    error_message = "inventory groups are ventilator and worker, as in the aws_ec2 inventory"
  }
  assert {
    condition     = yamldecode(output.inventory).all.children.ventilator.hosts["demo-ventilator"] == { ansible_host = "198.51.100.10", mlm_private_address = "10.42.1.10" }
    error_message = "ssh goes to the public address, workers connect to the private one"
  }
  assert {
    condition     = yamldecode(output.inventory).all.children.worker.hosts["demo-worker-001"].ansible_host == "10.42.1.21"
    error_message = "a worker without public address is reached on its private one"
  }
  assert {
    condition     = yamldecode(output.inventory).all.vars.mlm_output == "s3://my-shards/bert/run1" && yamldecode(output.inventory).all.vars.vport == 5557
    error_message = "inventory vars carry the output location and the ventilator port"
  }
}

run "root_wiring_has_no_cycle" {
  command = apply
  module {
    source = "./tests/harness"
  }
  variables {
    number_of_worker = 3
  }
  assert {
    condition     = length(yamldecode(output.inventory).all.children.worker.hosts) == 3
    error_message = "the inventory lists every worker instance"
  }
  assert {
    condition     = strcontains(output.worker_user_data, "--ventilator 10.42.1.10:5557 --processes 4")
    error_message = "workers' user_data points at the ventilator's private address"
  }
  assert {
    condition     = [for t in output.worker_tags : t.Name] == ["harness-worker-000", "harness-worker-001", "harness-worker-002"]
    error_message = "each worker instance gets its own tags"
  }
}

run "group_workers_watch_and_drain" {
  command = apply
  variables {
    ventilator_private_ip  = "10.42.0.10"
    spot_watch             = true
    autoscaling_group_name = "demo-workers"
    lifecycle_hook_name    = "demo-drain"
    cloudwatch_namespace   = "mlm-pipeline/demo"
    instance_hourly_price  = 0.14
  }
  assert {
    condition     = strcontains(output.worker_user_data, "--spot-watch --lifecycle-hook demo-drain --autoscaling-group demo-workers")
    error_message = "group workers watch IMDS and complete their drain hook"
  }
  assert {
    condition     = !contains(keys(output.worker_group_tags), "Name") && output.worker_group_tags.Role == "worker" && output.worker_group_tags.MlmLifecycleHook == "demo-drain"
    error_message = "group instances: Role=worker and the hook, no shared Name"
  }
  assert {
    condition     = strcontains(output.ventilator_command, "--cloudwatch-namespace mlm-pipeline/demo --cloudwatch-region us-east-1 --instance-hourly-price 0.14")
    error_message = "the ventilator publishes its backlog and prices the run"
  }
}

run "fixed_workers_do_not_watch" {
  command = apply
  assert {
    condition     = !strcontains(output.worker_user_data, "--spot-watch") && !strcontains(output.ventilator_command, "--cloudwatch")
    error_message = "without the group, nothing of it"
  }
}

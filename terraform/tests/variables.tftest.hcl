# Validation of the root module's variables. variables.tf is provider-free, so
# this runs against a scratch module holding only a copy of it (the test suite
# does that in tests/fleet/test_fleet_terraform.py; where the AWS provider can be
# installed, `terraform test` at terraform/ runs it too, as plan-only checks).

variables {
  bucket_name = "my-bert-shards"
  admin_cidrs = ["203.0.113.7/32"]
}

run "defaults_are_valid" {
  command = plan
}

run "ssh_never_open_to_the_world" {
  command = plan
  variables {
    admin_cidrs = ["0.0.0.0/0"]
  }
  expect_failures = [var.admin_cidrs]
}

run "ssh_never_open_to_the_world_v6" {
  command = plan
  variables {
    admin_cidrs = ["::/0"]
  }
  expect_failures = [var.admin_cidrs]
}

run "admin_cidr_must_be_a_cidr" {
  command = plan
  variables {
    admin_cidrs = ["my laptop"]
  }
  expect_failures = [var.admin_cidrs]
}

run "number_of_worker_whole" {
  command = plan
  variables {
    number_of_worker = 2.5
  }
  expect_failures = [var.number_of_worker]
}

run "number_of_worker_not_negative" {
  command = plan
  variables {
    number_of_worker = -1
  }
  expect_failures = [var.number_of_worker]
}

run "zero_workers_allowed" {
  command = plan
  variables {
    number_of_worker = 0
  }
}

run "bucket_name" {
  command = plan
  variables {
    bucket_name = "My_Bucket"
  }
  expect_failures = [var.bucket_name]
}

run "bucket_prefix" {
  command = plan
  variables {
    bucket_prefix = "has space/x"
  }
  expect_failures = [var.bucket_prefix]
}

run "fleet_name" {
  command = plan
  variables {
    fleet_name = "MLM fleet"
  }
  expect_failures = [var.fleet_name]
}

run "ubuntu_lts_only" {
  command = plan
  variables {
    ubuntu_release = "23.10"
  }
  expect_failures = [var.ubuntu_release]
}

run "ports" {
  command = plan
  variables {
    ventilator_port = 80
    sink_port       = 70000
  }
  expect_failures = [var.ventilator_port, var.sink_port]
}

run "metrics_port" {
  command = plan
  variables {
    metrics_port = 80
  }
  expect_failures = [var.metrics_port]
}

run "metrics_never_open_to_the_world" {
  command = plan
  variables {
    monitoring_cidrs = ["10.0.0.0/16", "0.0.0.0/0"]
  }
  expect_failures = [var.monitoring_cidrs]
}

run "monitoring_cidr_must_be_a_cidr" {
  command = plan
  variables {
    monitoring_cidrs = ["prometheus"]
  }
  expect_failures = [var.monitoring_cidrs]
}

run "volume_size" {
  command = plan
  variables {
    volume_size = 4
  }
  expect_failures = [var.volume_size]
}

run "subnet_id" {
  command = plan
  variables {
    subnet_id = "my-subnet"
  }
  expect_failures = [var.subnet_id]
}

run "availability_zones" {
  command = plan
  variables {
    availability_zones = ["us-east-1a", "east"]
  }
  expect_failures = [var.availability_zones]
}

run "worker_subnet_ids" {
  command = plan
  variables {
    worker_subnet_ids = ["subnet-0123456789abcdef0", "my-subnet"]
  }
  expect_failures = [var.worker_subnet_ids]
}

run "job_silence_minutes" {
  command = plan
  variables {
    job_silence_minutes = 1
  }
  expect_failures = [var.job_silence_minutes]
}

run "spot_price" {
  command = plan
  variables {
    use_spot       = true
    spot_max_price = "cheap"
  }
  expect_failures = [var.spot_max_price]
}

run "job_args_no_shell" {
  command = plan
  variables {
    job_args = { "dupe-factor" = "5; rm -rf /" }
  }
  expect_failures = [var.job_args]
}

run "reserved_tags" {
  command = plan
  variables {
    tags = { Role = "x" }
  }
  expect_failures = [var.tags]
}

run "data_dir" {
  command = plan
  variables {
    data_dir = "relative/path"
  }
  expect_failures = [var.data_dir]
}

run "s3_data_dir" {
  command = plan
  variables {
    data_dir = "s3://corpora/wiki"
  }
}

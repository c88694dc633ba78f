# Names, labels, command lines and the VMs' startup and shutdown scripts of the Google Cloud fleet
# (terraform/gcp). No provider: `terraform test` here checks them offline, and the root module passes them
# to the instance template's metadata.

locals {
  venv           = "${var.install_dir}/venv"
  job_prefix_uri = "gs://${var.bucket_name}/${trim(var.bucket_prefix, "/")}/"
  output_uri     = "gs://${var.bucket_name}/${trim(var.bucket_prefix, "/")}/out"
  data_uri       = "gs://${var.bucket_name}/${trim(var.bucket_prefix, "/")}/corpus"
  vserver        = coalesce(var.ventilator_address, "127.0.0.1")
  metric_type    = "custom.googleapis.com/mlm-pipeline/${var.fleet_name}/backlog"
  # The ventilator unit's StateDirectory: the sink journals the output's manifest there (--state-dir).
  state_directory = "mlm-pipeline"
  # A vocabulary in the bucket is copied onto the ventilator VM first (the ventilator reads a local file).
  vocab_in_bucket = var.vocab_file != null && startswith(coalesce(var.vocab_file, "-"), "gs://")
  vocab_local     = local.vocab_in_bucket ? "${var.install_dir}/${basename(var.vocab_file)}" : var.vocab_file

  # Labels: what the gcp_compute inventory (ansible/inventory/gcp_compute.yml) groups on.
  common_labels     = { project = "mlm-pipeline", fleet = var.fleet_name, managed-by = "terraform" }
  ventilator_labels = merge(local.common_labels, { role = "ventilator" })
  worker_labels     = merge(local.common_labels, { role = "worker" })

  # $$ is systemd's literal $: the unit's shell counts the vCPUs.
  processes_arg = var.worker_processes > 0 ? tostring(var.worker_processes) : "$$(nproc)"
  worker_command = join(" ", [
    "${local.venv}/bin/mlm-worker",
    "--ventilator ${local.vserver}:${var.ventilator_port}",
    "--processes ${local.processes_arg}",
    "--spot-watch --spot-watch-cloud gce",
    "--notice-drain-seconds ${var.notice_drain_seconds}",
  ])
  ventilator_command = join(" ", compact(concat([
    "${local.venv}/bin/mlm-ventilator",
    "--data ${local.data_uri}",
    "--output ${local.output_uri}",
    "--vport ${var.ventilator_port}",
    "--sink-port ${var.sink_port}",
    "--state-dir /var/lib/${local.state_directory}",
    "--metrics-port ${var.metrics_port} --sink-metrics-port ${var.metrics_port + 1}",
    "--workers 0",
    "--backlog-publisher cloud-monitoring --cloud-monitoring-project ${var.project}",
    "--cloud-monitoring-prefix custom.googleapis.com/mlm-pipeline/${var.fleet_name}",
    var.vocab_file == null ? "" : "--vocab-file ${local.vocab_local}",
    var.instance_hourly_price == null ? "" : "--instance-hourly-price ${var.instance_hourly_price}",
  ], var.job_args)))

  install = templatefile("${path.module}/templates/install.sh.tftpl", {
    venv         = local.venv
    install_dir  = var.install_dir
    user         = var.service_user
    package_spec = var.package_spec
  })
  worker_startup_script = templatefile("${path.module}/templates/worker-startup.sh.tftpl", {
    install = local.install
    user    = var.service_user
    command = local.worker_command
  })
  worker_shutdown_script = templatefile("${path.module}/templates/worker-shutdown.sh.tftpl", {
    drain_seconds = var.notice_drain_seconds
  })
  ventilator_startup_script = templatefile("${path.module}/templates/ventilator-startup.sh.tftpl", {
    install = local.install
    vocab   = local.vocab_in_bucket ? var.vocab_file : ""
    dir     = var.install_dir
    user    = var.service_user
    state   = local.state_directory
    command = local.ventilator_command
  })
}

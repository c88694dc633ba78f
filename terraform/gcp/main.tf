# The Google Cloud fleet of mlm-pipeline (seed 000's shape): one ventilator VM (with its sink) and a regional
# managed instance group of Spot worker VMs across zones, made from an instance template whose startup script
# installs a pinned release (no image to rebuild), scaled by an autoscaler on the ventilator's backlog, which
# the ventilator publishes to Cloud Monitoring (ventilator/publishers/cloud_monitoring.py).
#
# No VM has an external address: Cloud NAT reaches PyPI; the pipeline's ports are open only inside the
# network; the service accounts may read and write objects only below the job's prefix of the one bucket.
# Scripts, names and labels come from ./modules/startup (no provider: `terraform test` covers it offline).

module "startup" {
  source = "./modules/startup"

  fleet_name            = var.fleet_name
  project               = var.project
  package_spec          = var.package_spec
  bucket_name           = var.bucket_name
  bucket_prefix         = var.bucket_prefix
  ventilator_address    = google_compute_address.ventilator.address
  ventilator_port       = var.ventilator_port
  sink_port             = var.sink_port
  metrics_port          = var.metrics_port
  worker_processes      = var.worker_processes
  vocab_file            = var.vocab_file
  job_args              = var.job_args
  instance_hourly_price = var.instance_hourly_price
}

data "google_compute_zones" "available" {
  region = var.region
  status = "UP"
}

locals {
  zones          = length(var.zones) > 0 ? var.zones : data.google_compute_zones.available.names
  prefix         = trim(var.bucket_prefix, "/")
  objects        = "projects/_/buckets/${var.bucket_name}/objects/${local.prefix}/"
  pipeline_ports = [tostring(var.ventilator_port), tostring(var.sink_port), "${var.metrics_port}-${var.metrics_port + 1}"]
  # Scopes are the outer limit; IAM (below) is what grants. Only what the VMs call.
  worker_scopes = [
    "https://www.googleapis.com/auth/devstorage.read_write",
    "https://www.googleapis.com/auth/logging.write",
  ]
  ventilator_scopes = concat(local.worker_scopes, ["https://www.googleapis.com/auth/monitoring.write"])
}

# ---------------------------------------------------------------- network: private, with NAT for PyPI

resource "google_compute_network" "fleet" {
  name                    = "${var.fleet_name}-net"
  auto_create_subnetworks = false
}

resource "google_compute_subnetwork" "fleet" {
  name                     = "${var.fleet_name}-subnet"
  network                  = google_compute_network.fleet.id
  region                   = var.region
  ip_cidr_range            = var.network_cidr
  private_ip_google_access = true # Cloud Storage and Monitoring without external addresses
}

resource "google_compute_router" "fleet" {
  name    = "${var.fleet_name}-router"
  network = google_compute_network.fleet.id
  region  = var.region
}

resource "google_compute_router_nat" "fleet" {
  name                               = "${var.fleet_name}-nat"
  router                             = google_compute_router.fleet.name
  region                             = var.region
  nat_ip_allocate_option             = "AUTO_ONLY"
  source_subnetwork_ip_ranges_to_nat = "ALL_SUBNETWORKS_ALL_IP_RANGES"
}

resource "google_compute_firewall" "pipeline" {
  name          = "${var.fleet_name}-pipeline"
  network       = google_compute_network.fleet.id
  direction     = "INGRESS"
  source_ranges = [var.network_cidr] # inside the network only
  target_tags   = ["${var.fleet_name}-ventilator"]
  allow {
    protocol = "tcp"
    ports    = local.pipeline_ports
  }
}

resource "google_compute_firewall" "ssh_from_iap" {
  count = var.ssh_through_iap ? 1 : 0

  name          = "${var.fleet_name}-ssh-iap"
  network       = google_compute_network.fleet.id
  direction     = "INGRESS"
  source_ranges = ["35.235.240.0/20"] # Identity-Aware Proxy's TCP forwarding, nothing else
  target_tags   = ["${var.fleet_name}-ventilator", "${var.fleet_name}-worker"]
  allow {
    protocol = "tcp"
    ports    = ["22"]
  }
}

# ---------------------------------------------------------------- identities: the one bucket, the one prefix

resource "google_service_account" "worker" {
  account_id   = "${var.fleet_name}-worker"
  display_name = "mlm-pipeline workers of ${var.fleet_name}"
}

resource "google_service_account" "ventilator" {
  account_id   = "${var.fleet_name}-ventilator"
  display_name = "mlm-pipeline ventilator and sink of ${var.fleet_name}"
}

# Objects below the prefix (read, create, overwrite, delete, list): an IAM condition on the object's name.  A
# listing's resource is the bucket itself, so a condition on the bucket's name would admit the whole bucket's
# names: Cloud Storage's objectListPrefix attribute (the listing's prefix) admits only listings below ours.
resource "google_storage_bucket_iam_member" "objects" {
  for_each = {
    worker     = google_service_account.worker.email
    ventilator = google_service_account.ventilator.email
  }

  bucket = var.bucket_name
  role   = "roles/storage.objectUser"
  member = "serviceAccount:${each.value}"
  condition {
    title      = "${var.fleet_name}-prefix-${each.key}"
    expression = "resource.name.startsWith(\"${local.objects}\") || api.getAttribute(\"storage.googleapis.com/objectListPrefix\", \"\").startsWith(\"${local.prefix}/\")"
  }
}

resource "google_project_iam_member" "ventilator_metrics" {
  project = var.project
  role    = "roles/monitoring.metricWriter"
  member  = "serviceAccount:${google_service_account.ventilator.email}"
}

resource "google_project_iam_member" "logs" {
  for_each = {
    worker     = google_service_account.worker.email
    ventilator = google_service_account.ventilator.email
  }

  project = var.project
  role    = "roles/logging.logWriter"
  member  = "serviceAccount:${each.value}"
}

# ---------------------------------------------------------------- the ventilator (on-demand: it holds the job)

resource "google_compute_address" "ventilator" {
  name         = "${var.fleet_name}-ventilator"
  address_type = "INTERNAL"
  subnetwork   = google_compute_subnetwork.fleet.id
  region       = var.region
}

resource "google_compute_instance" "ventilator" {
  name         = "${var.fleet_name}-ventilator"
  machine_type = var.ventilator_machine_type
  zone         = local.zones[0]
  tags         = ["${var.fleet_name}-ventilator"]
  labels       = module.startup.ventilator_labels

  boot_disk {
    initialize_params {
      image = var.image
      size  = 50
    }
  }

  network_interface {
    subnetwork = google_compute_subnetwork.fleet.id
    network_ip = google_compute_address.ventilator.address
    # no access_config: no external address
  }

  metadata = {
    startup-script = module.startup.ventilator_startup_script
    enable-oslogin = "TRUE"
  }

  service_account {
    email  = google_service_account.ventilator.email
    scopes = local.ventilator_scopes
  }

  shielded_instance_config {
    enable_secure_boot = true
  }
}

# ---------------------------------------------------------------- the workers: Spot VMs in a regional group

resource "google_compute_instance_template" "worker" {
  name_prefix  = "${var.fleet_name}-worker-"
  machine_type = var.worker_machine_type
  tags         = ["${var.fleet_name}-worker"]
  labels       = module.startup.worker_labels

  scheduling {
    provisioning_model          = "SPOT"
    preemptible                 = true
    automatic_restart           = false
    on_host_maintenance         = "TERMINATE"
    instance_termination_action = "DELETE" # the group makes a new one where capacity is
  }

  disk {
    source_image = var.image
    auto_delete  = true
    boot         = true
    disk_size_gb = 50
  }

  network_interface {
    subnetwork = google_compute_subnetwork.fleet.id
    # no access_config: no external address (Cloud NAT)
  }

  metadata = {
    startup-script  = module.startup.worker_startup_script
    shutdown-script = module.startup.worker_shutdown_script
    enable-oslogin  = "TRUE"
  }

  service_account {
    email  = google_service_account.worker.email
    scopes = local.worker_scopes
  }

  shielded_instance_config {
    enable_secure_boot = true
  }

  lifecycle {
    create_before_destroy = true
  }
}

resource "google_compute_region_instance_group_manager" "workers" {
  name                      = "${var.fleet_name}-workers"
  region                    = var.region
  base_instance_name        = "${var.fleet_name}-worker"
  distribution_policy_zones = local.zones

  version {
    instance_template = google_compute_instance_template.worker.id
  }

  # A new template (a new package_spec) replaces VMs a few at a time; each drains through its shutdown script.
  # Proactive redistribution stays on: the API allows NONE only for groups no autoscaler scales, and
  # docs/fleet.md cites where. A regional group's fixed surge and unavailability are 0 or at least its zones.
  update_policy {
    type                         = "PROACTIVE"
    minimal_action               = "REPLACE"
    instance_redistribution_type = "PROACTIVE"
    max_surge_fixed              = length(local.zones)
    max_unavailable_fixed        = length(local.zones)
  }
  # The size is the autoscaler's.
  lifecycle {
    ignore_changes = [target_size]
  }
}

resource "google_compute_region_autoscaler" "workers" {
  name   = "${var.fleet_name}-workers"
  region = var.region
  target = google_compute_region_instance_group_manager.workers.id

  autoscaling_policy {
    min_replicas    = var.min_workers
    max_replicas    = var.max_workers
    cooldown_period = 120 # a worker VM's boot and install

    # A per-group metric: the whole backlog, one series (resource global), divided by what one VM takes.
    metric {
      name                       = module.startup.metric_type
      filter                     = "resource.type = \"global\""
      single_instance_assignment = var.tasks_per_worker
    }

    # Scale-in at most a tenth of the group per 10 minutes: each drains its tasks on the way out.
    scale_in_control {
      max_scaled_in_replicas {
        percent = 10
      }
      time_window_sec = 600
    }
  }
}

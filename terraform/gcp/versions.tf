terraform {
  required_version = ">= 1.6.0"

  required_providers {
    # Both ends of the range checked against the provider's documented schema (tests/data/google-provider-schema-*.json,
    # tests/fleet/test_fleet_gcp.py); the autoscaler's metric filter and single_instance_assignment are GA in
    # google_compute_region_autoscaler since 5.21.0 (google_compute_autoscaler, the zonal one, only since 6.26.0).
    google = {
      source  = "hashicorp/google"
      version = ">= 6.0.0, < 8.0.0"
    }
  }
}

provider "google" {
  project = var.project
  region  = var.region
  # Labels on everything this module creates that takes them.
  default_labels = { project = "mlm-pipeline", fleet = var.fleet_name, managed-by = "terraform" }
}

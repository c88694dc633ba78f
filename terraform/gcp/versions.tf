terraform {
  required_version = ">= 1.6.0"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 6.0, < 8.0"
    }
  }
}

provider "google" {
  project = var.project
  region  = var.region
  # Labels on everything this module creates that takes them.
  default_labels = { project = "mlm-pipeline", fleet = var.fleet_name, managed-by = "terraform" }
}

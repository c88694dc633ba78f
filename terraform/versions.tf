terraform {
  required_version = ">= 1.6.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.0, < 7.0"
    }
  }
}

provider "aws" {
  region = var.region

  # Project/Fleet/ManagedBy on everything this module creates (volumes, ENIs...).
  default_tags {
    tags = module.fleet.common_tags
  }
}

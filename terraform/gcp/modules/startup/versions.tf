terraform {
  required_version = ">= 1.6.0"
  # No provider: the scripts and names are rendered here, so `terraform test` checks them offline.
}

terraform {
  # `terraform test` with run blocks, startswith() and optional() attributes.
  required_version = ">= 1.6.0"
}

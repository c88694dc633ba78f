# Stand-in for the root module's wiring, with terraform_data (built in, no
# provider) in place of aws_instance: the ventilator takes its user_data and
# tags from module.fleet, the workers take theirs from module.fleet and the
# ventilator's private address, and the inventory is rendered from all of
# them. If that wiring were a dependency cycle, `terraform test` would fail
# here the same way `terraform plan` would on the real root module.

variable "number_of_worker" {
  type    = number
  default = 3
}

module "fleet" {
  source = "../.."

  fleet_name            = "harness"
  number_of_worker      = var.number_of_worker
  worker_vcpus          = 4
  bucket_name           = "harness-bucket"
  package_spec          = "mlm-pipeline==0.1.0"
  start_workers_on_boot = true
  ventilator_private_ip = terraform_data.ventilator.output.private_ip
  ventilator_public_ip  = terraform_data.ventilator.output.public_ip
  workers               = [for w in terraform_data.worker : { private_ip = w.output.private_ip, public_ip = w.output.public_ip }]
}

resource "terraform_data" "ventilator" {
  input = {
    private_ip = "10.42.1.10"
    public_ip  = "198.51.100.10"
    user_data  = module.fleet.ventilator_user_data
    tags       = module.fleet.ventilator_tags
  }
}

resource "terraform_data" "worker" {
  count = var.number_of_worker
  input = {
    private_ip = cidrhost("10.42.1.0/24", 20 + count.index)
    public_ip  = cidrhost("198.51.100.0/24", 20 + count.index)
    user_data  = module.fleet.worker_user_data
    tags       = module.fleet.worker_tags[count.index]
  }
}

output "inventory" {
  value = module.fleet.inventory
}

output "worker_user_data" {
  value = terraform_data.worker[0].output.user_data
}

output "worker_tags" {
  value = [for w in terraform_data.worker : w.output.tags]
}

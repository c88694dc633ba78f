output "ventilator_public_ip" {
  description = "Public address of the ventilator/sink instance (ssh, Ansible)."
  value       = aws_instance.ventilator.public_ip
}

output "ventilator_private_ip" {
  description = "Private address of the ventilator: what the workers connect to (vserver)."
  value       = aws_instance.ventilator.private_ip
}

output "worker_public_ips" {
  description = "Public addresses of the group's workers when Terraform last looked (the group changes them; the aws_ec2 inventory follows)."
  value       = data.aws_instances.workers.public_ips
}

output "worker_private_ips" {
  description = "Private addresses of the group's workers when Terraform last looked."
  value       = data.aws_instances.workers.private_ips
}

output "worker_autoscaling_group" {
  description = "Name of the workers' Auto Scaling group (aws autoscaling describe-auto-scaling-groups --auto-scaling-group-names ...)."
  value       = aws_autoscaling_group.worker.name
}

output "cloudwatch_namespace" {
  description = "Where the ventilator publishes its backlog (Backlog, PendingTasks, LeasedTasks, Workers, WorkerHosts, JobActive)."
  value       = local.cloudwatch_namespace
}

output "output_uri" {
  description = "Where the shards and manifest.jsonl go."
  value       = module.fleet.output_uri
}

output "worker_processes_per_host" {
  description = "mlm-worker --processes on each worker host."
  value       = module.fleet.effective_worker_processes
}

output "commands" {
  description = "Ready-to-run command lines."
  value = {
    ssh_ventilator = "ssh ubuntu@${coalesce(aws_instance.ventilator.public_ip, aws_instance.ventilator.private_ip)}"
    # On the ventilator host (starts the sink too; exits 0 when every task is acknowledged):
    ventilator = module.fleet.ventilator_command
    # On a worker host:
    worker = module.fleet.worker_command
    # From the laptop, in ansible/ (dynamic inventory, or the static one below):
    ansible_init       = "ansible-playbook -i inventory/aws_ec2.yml init.yaml"
    ansible_ventilator = "ansible-playbook -i inventory/aws_ec2.yml ventilating.yaml"
    ansible_workers    = "ansible-playbook -i inventory/aws_ec2.yml working.yaml"
    ansible_wait       = "ansible-playbook -i inventory/aws_ec2.yml waiting.yaml"
    ansible_stop       = "ansible-playbook -i inventory/aws_ec2.yml stopping.yaml"
    ansible_whole_job  = "ansible-playbook -i inventory/aws_ec2.yml job.yaml"
    static_inventory   = "terraform output -raw static_inventory > ../ansible/inventory/static.yml"
  }
}

output "static_inventory" {
  description = "Ansible inventory (YAML) for those who do not use the aws_ec2 plugin: same groups and variables."
  value       = module.fleet.inventory
}

output "aws_ec2_inventory" {
  description = "amazon.aws.aws_ec2 inventory configuration for this fleet's region and name (ansible/inventory/aws_ec2.yml is the default one)."
  value       = module.fleet.aws_ec2_inventory
}

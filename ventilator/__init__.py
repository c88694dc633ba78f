"""The ventilator: lists the corpus, cuts it into tasks, serves the job and leases tasks to workers."""

"""What the ventilator, the workers and the sink share: the wire protocol,
the job configuration, the task model, storage and the BERT instance logic."""

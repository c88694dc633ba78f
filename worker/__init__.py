"""Workers: pull tasks from the ventilator, write TFRecord shards, acknowledge to the sink."""

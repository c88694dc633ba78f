"""The sink: collects acknowledgements, keeps the manifest, shows throughput, tells the ventilator what is done."""

# terraform test (run from terraform/gcp/modules/startup): no provider needed.

variables {
  fleet_name         = "zh-electra"
  project            = "my-project"
  package_spec       = "mlm-pipeline[gcs,gcp]==0.1.0"
  bucket_name        = "my-corpora"
  bucket_prefix      = "/zhwiki/run1/"
  ventilator_address = "10.20.0.2"
  job_args           = ["--objective", "electra", "--word-segmenter", "jieba"]
}

run "scripts_install_the_pinned_release_and_start_the_drain_aware_worker" {
  command = apply

  assert {
    condition     = strcontains(output.worker_startup_script, "pip install --quiet --no-cache-dir \"$spec\"") && strcontains(output.worker_startup_script, "spec='mlm-pipeline[gcs,gcp]==0.1.0'")
    error_message = "the worker installs exactly package_spec"
  }
  assert {
    condition     = strcontains(output.worker_command, "--ventilator 10.20.0.2:5557") && strcontains(output.worker_command, "--spot-watch --spot-watch-cloud gce")
    error_message = "workers dial the ventilator and watch the metadata server for preemption"
  }
  assert {
    condition     = strcontains(output.worker_command, "--processes $$(nproc)")
    error_message = "worker_processes = 0: one per vCPU, counted by the unit's shell (systemd's $$ is a literal $)"
  }
  assert {
    condition     = strcontains(output.worker_shutdown_script, "--signal=SIGUSR1 mlm-worker.service")
    error_message = "the shutdown script starts the notice drain"
  }
  assert {
    condition     = output.metric_type == "custom.googleapis.com/mlm-pipeline/zh-electra/backlog"
    error_message = "the autoscaler's metric is the fleet's backlog"
  }
  assert {
    condition     = strcontains(output.ventilator_command, "--cloud-monitoring-prefix custom.googleapis.com/mlm-pipeline/zh-electra") && strcontains(output.ventilator_command, "--cloud-monitoring-project my-project")
    error_message = "the ventilator publishes the metric the autoscaler reads"
  }
  assert {
    condition     = output.output_uri == "gs://my-corpora/zhwiki/run1/out" && strcontains(output.ventilator_command, "--data gs://my-corpora/zhwiki/run1/corpus")
    error_message = "corpus and output below the one prefix the service accounts may use"
  }
  assert {
    condition     = endswith(output.ventilator_command, "--objective electra --word-segmenter jieba")
    error_message = "the job's own flags reach the ventilator"
  }
  assert {
    condition     = output.worker_labels.role == "worker" && output.worker_labels.fleet == "zh-electra" && output.ventilator_labels.role == "ventilator"
    error_message = "labels the gcp_compute inventory keys on"
  }
}

run "an_unpinned_package_is_refused" {
  command = plan
  variables {
    package_spec = "mlm-pipeline[gcs]"
  }
  expect_failures = [var.package_spec]
}

run "the_release_in_the_bucket_is_copied_first_and_built_on_the_vm" {
  command = apply
  variables {
    package_spec = "gs://my-corpora/zhwiki/run1/dist/mlm_pipeline-0.1.0.tar.gz"
  }
  assert {
    condition     = strcontains(output.worker_startup_script, "retry gs_copy \"$spec\" /opt/mlm-pipeline\n") && strcontains(output.worker_startup_script, "spec=\"mlm-pipeline[gcs,gcp] @ file:///opt/mlm-pipeline/$${spec##*/}\"")
    error_message = "a gs:// release is copied onto the VM, then installed with the fleet's extras"
  }
  assert {
    condition     = strcontains(output.worker_startup_script, "python3-dev gcc")
    error_message = "the VM gets a compiler for the kernels"
  }
}

run "a_release_outside_the_jobs_prefix_is_refused" {
  command = plan
  variables {
    package_spec = "gs://my-corpora/wheels/mlm_pipeline-0.1.0.tar.gz"
  }
  expect_failures = [output.worker_startup_script]
}

run "a_vocabulary_in_the_bucket_is_copied_for_the_ventilator" {
  command = apply
  variables {
    vocab_file = "gs://my-corpora/zhwiki/run1/vocab.txt"
  }
  assert {
    condition     = strcontains(output.ventilator_startup_script, "retry gs_copy 'gs://my-corpora/zhwiki/run1/vocab.txt' /opt/mlm-pipeline\n") && strcontains(output.ventilator_command, "--vocab-file /opt/mlm-pipeline/vocab.txt")
    error_message = "the ventilator reads a local copy of a gs:// vocabulary, copied with retries"
  }
}

run "a_vocabulary_outside_the_jobs_prefix_is_refused" {
  command = plan
  variables {
    vocab_file = "gs://my-corpora/vocab.txt"
  }
  expect_failures = [output.ventilator_startup_script]
}

run "an_argument_that_needs_quoting_is_refused" {
  command = plan
  variables {
    job_args = ["--objective", "electra", "--cls-token", "[CLS] x"]
  }
  expect_failures = [var.job_args]
}

"""What a job is: its configuration and id (config), components and their parameters (params),
settings dataclasses as command-line options (cli_settings), byte-range tasks (tasks)."""

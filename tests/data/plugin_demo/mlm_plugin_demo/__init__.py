"""Variants of mlm-pipeline's axes that live outside it (see pyproject.toml's entry points)."""

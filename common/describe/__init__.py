"""What is said about a finished output: dataset_info.json (dataset_info) and the Hugging Face
dataset card (dataset_card)."""

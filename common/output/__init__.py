"""What a run leaves in its output beside the shards' bytes: the manifest (manifest), the files it
lists (files: ShardFile) and the one-run-per-output lock (lock)."""

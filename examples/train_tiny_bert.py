"""Train a tiny BERT (2 layers, hidden 128) on CPU from the loader service.

    python -m loader --data /tmp/mlm-out --batch-size 32 --dynamic-masking --vocab-file vocab.txt &
    python examples/train_tiny_bert.py --loader 127.0.0.1:5560 --steps 300

The masked-LM loss falls from ~ln(vocabulary size): proof that the batches
are right, and a template for a real trainer.  The model is written here
with tf.keras layers (nothing downloaded); the batches are the
LoaderClient's numpy dicts.  ``--state-file`` keeps the loader's
position: run the command again and training continues with the batch that
would have come next.  Each rank of a multi-GPU job runs the same with its
own ``--rank`` and the job's ``--world-size``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, installed or not

import tensorflow as tf

from loader.client import LoaderClient


class TinyBert(tf.keras.Model):
    """BERT's encoder and masked-LM head (output embedding tied to the input one), small."""

    def __init__(self, vocab_size: int, hidden: int = 128, layers: int = 2, heads: int = 2, intermediate: int = 512,
                 max_length: int = 512):
        super().__init__()
        init = tf.keras.initializers.TruncatedNormal(stddev=0.02)
        self.tokens = tf.keras.layers.Embedding(vocab_size, hidden, embeddings_initializer=init)
        self.positions = tf.keras.layers.Embedding(max_length, hidden, embeddings_initializer=init)
        self.segments = tf.keras.layers.Embedding(2, hidden, embeddings_initializer=init)
        self.embedding_norm = tf.keras.layers.LayerNormalization(epsilon=1e-12)
        self.blocks = [(tf.keras.layers.MultiHeadAttention(heads, hidden // heads, kernel_initializer=init),
                        tf.keras.layers.LayerNormalization(epsilon=1e-12),
                        tf.keras.layers.Dense(intermediate, activation="gelu", kernel_initializer=init),
                        tf.keras.layers.Dense(hidden, kernel_initializer=init),
                        tf.keras.layers.LayerNormalization(epsilon=1e-12)) for _ in range(layers)]
        self.head = tf.keras.layers.Dense(hidden, activation="gelu", kernel_initializer=init)
        self.head_norm = tf.keras.layers.LayerNormalization(epsilon=1e-12)
        self.output_bias = self.add_weight(name="output_bias", shape=(vocab_size,), initializer="zeros")

    def call(self, batch):
        ids = tf.cast(batch["input_ids"], tf.int32)
        length = tf.shape(ids)[1]
        x = self.tokens(ids) + self.positions(tf.range(length))[None] + self.segments(
            tf.cast(batch["segment_ids"], tf.int32))
        x = self.embedding_norm(x)
        attend = tf.cast(batch["attention_mask"], tf.bool)[:, None, :]  # (batch, 1, keys): no attention to padding
        for attention, norm, up, down, out_norm in self.blocks:
            x = norm(x + attention(x, x, attention_mask=attend))
            x = out_norm(x + down(up(x)))
        picked = tf.gather(x, tf.cast(batch["masked_lm_positions"], tf.int32), batch_dims=1)
        hidden = self.head_norm(self.head(picked))
        return tf.matmul(hidden, self.tokens.embeddings, transpose_b=True) + self.output_bias


def masked_lm_loss(batch, logits):
    """run_pretraining.py's: mean cross-entropy over the real (weight 1) predictions."""
    labels = tf.cast(batch["masked_lm_ids"], tf.int32)
    weights = tf.cast(batch["masked_lm_weights"], tf.float32)
    per_position = tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    return tf.reduce_sum(per_position * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--loader", default="127.0.0.1:5560", help="The loader server, HOST:PORT.")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--vocab-size", type=int, default=30522, help="Of the vocabulary the output was made with.")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--state-file", default=None, help="Keep the loader's position here (resume on restart).")
    parser.add_argument("--curve-dir", default=None, help="CURVE keys, if the server uses --curve-dir.")
    parser.add_argument("--log-every", type=int, default=20)
    args = parser.parse_args(argv)

    state = None
    if args.state_file and os.path.exists(args.state_file):
        state = json.loads(Path(args.state_file).read_text())
    client = LoaderClient(args.loader, rank=args.rank, world_size=args.world_size, state=state,
                          curve_dir=args.curve_dir)
    info = client.info
    print(f"loader: {info.records} records, batch {info.batch_size}, {info.batches_per_epoch} batches per epoch "
          f"for this rank, {'dynamic' if info.dynamic_masking else 'stored'} masks", flush=True)

    model = TinyBert(args.vocab_size)
    optimizer = tf.keras.optimizers.Adam(args.learning_rate)

    @tf.function(reduce_retracing=True)
    def train_step(batch):
        with tf.GradientTape() as tape:
            loss = masked_lm_loss(batch, model(batch))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    losses = []
    started = time.monotonic()
    for step in range(1, args.steps + 1):
        batch = next(client)  # a dict of numpy arrays; client.tf_dataset() gives a tf.data.Dataset instead
        losses.append(float(train_step(batch)))
        if step % args.log_every == 0 or step == args.steps:
            recent = losses[-args.log_every:]
            print(f"step {step}: masked-LM loss {sum(recent) / len(recent):.3f} "
                  f"({step / (time.monotonic() - started):.1f} steps/s)", flush=True)
            if args.state_file:  # with the model's checkpoint, in a real trainer
                Path(args.state_file).write_text(json.dumps(client.state()))
    client.close()
    window = max(1, min(20, len(losses) // 4))
    print(json.dumps({"steps": len(losses), "first_loss": sum(losses[:window]) / window,
                      "last_loss": sum(losses[-window:]) / window}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Every command of the pipeline runs numpy with one BLAS thread.

numpy's OpenBLAS starts a thread per core when numpy is loaded, and those threads spin for a while before they
sleep: ~0.1 CPU-s in every process started, for nothing, since no role does linear algebra (a role's parallelism
is its processes).  On a one-document job (ventilator, sink, worker) that was ~0.4 of its ~2 CPU-s (issue #33).
Each command imports this module before anything that imports numpy (tests/test_one_blas_thread.py holds every
command to it; not ``mlm-train-vocab``, whose package loads numpy before its module, a one-off command that
trains on the tokenizers library's own threads); a user's own ``OPENBLAS_NUM_THREADS`` wins.  The loader's
library, which runs inside trainers, does not import it: a trainer's BLAS is the trainer's business.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

"""The wire between roles: what crosses a socket and how (the messages, their checked codec,
sockets and addresses, CURVE keys, a server's dispatch).  It imports nothing of the job's domain,
the steps or the axes (tests/test_layout.py)."""

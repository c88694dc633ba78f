"""What the tests share: the shared material, running the real command lines, local servers and fakes, readers."""

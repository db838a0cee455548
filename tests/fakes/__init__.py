"""Fakes for unit tests that need no root: a remote whose daemons run in-process."""

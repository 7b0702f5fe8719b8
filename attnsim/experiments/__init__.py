"""Protocols built on runs and sweeps, as functions of arrays the command line and the figures call."""

"""Pure model and rules: no I/O, no clock, standard library only.

Everything here is deterministic given its inputs, so it is tested without a
database (see tests/test_domain_*.py).
"""

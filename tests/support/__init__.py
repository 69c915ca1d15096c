"""Helpers the tests share, imported as `tests.support.X`: test-only code `src/` does not carry."""

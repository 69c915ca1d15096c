"""Helpers both storage adapters share; private to `tidegate.storage` (an import contract holds it)."""

"""Operator services: each concern's reads and controls, written once for every face.

The CLI, the API and the dashboard call these, never a store verb
(`tests/unit/test_faces_through_engine.py` holds them to it).
"""

"""Test package, so shared helpers import as ``tests.slack_standin`` from any test module."""

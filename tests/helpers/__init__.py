"""Helpers shared by the tests: fakes, example campaigns, statistical checks."""

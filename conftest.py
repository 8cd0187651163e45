"""Project-wide pytest configuration: the pytester fixture for the plugin tests."""

pytest_plugins = ["pytester"]

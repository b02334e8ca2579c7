"""Presets of the `agent` group (yaml files; a package so that the wheel ships them without setuptools warnings)."""

"""Presets of the `finetune` group (yaml files; a package so that the wheel ships them without setuptools warnings)."""

"""Hydra configs shipped inside the package, so a non-editable install finds them too.

train.yaml is the entry point; env/, agent/ and experiment/ hold named presets."""

"""Config: typed, validated views of an ml-collections config (run.py: the whole run,
model.py: the model, fields.py: the checks they share). Defaults live in configs/base.py."""

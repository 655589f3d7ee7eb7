"""Training: the loop (loop.py: train_and_evaluate), its start (start.py: the Run and its
restored state), the checks a reused run directory must pass (resume.py), the jitted steps,
optimiser, losses, evaluation of a split, model selection on the eval split and the divergence
guard."""

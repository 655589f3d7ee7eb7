"""Training: the loop (loop.py: train_and_evaluate), starting or resuming a run directory
(resume.py), the jitted steps, optimiser, losses, evaluation of a split, model selection on the
eval split and the divergence guard."""

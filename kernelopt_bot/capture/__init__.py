"""Capture a torch.compile'd model as a structured :class:`~.artifact.Artifact`."""

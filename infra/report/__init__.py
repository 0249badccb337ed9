"""Reviewer views over synthesized graphs: the diff report and the architecture diagram."""

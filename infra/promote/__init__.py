"""The promote pipeline: staging's verified image to production, gated on the worker
lease and the staging mirror flags, rolled back by itself on failure."""

"""Adapters to trainers: Ray (:mod:`profdsl.ray`)."""

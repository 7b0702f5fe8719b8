"""Data in d dimensions, never mutated by an engine: the run's random streams and the
Dataset (:mod:`.dataset`), the paper's synthetic data (:mod:`.synthetic`), user files
(:mod:`.files`) and the digits features (:mod:`.digits`)."""

from .dataset import ROLE_NAMES, DataError, Dataset, Streams, make_streams
from .synthetic import generate

__all__ = ["ROLE_NAMES", "DataError", "Dataset", "Streams", "generate", "make_streams"]

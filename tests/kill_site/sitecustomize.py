"""Arms tests.killer's step counter in every Python process started with its environment
(a Spark driver, its JVM's Python workers): on PYTHONPATH only for the runs a test kills."""

from tests.killer import arm_from_environment

arm_from_environment()

"""ccplan: topology-aware schedules for collective communication on GPU networks."""

import logging

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())

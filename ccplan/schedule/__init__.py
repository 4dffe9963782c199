"""Schedules, the independent verifier and the alpha-beta simulator."""

from ccplan.schedule.core import Schedule, Send
from ccplan.schedule.io import load_schedule, save_schedule
from ccplan.schedule.verify import Report, Violation, verify

__all__ = ["Report", "Schedule", "Send", "Violation", "load_schedule", "save_schedule", "verify"]

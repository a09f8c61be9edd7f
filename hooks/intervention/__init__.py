"""The intervention core (hooks.intervention.session): Read, Add, Ablate, Replace and Patch at any
site (hooks.sites), in one forward pass, composable, always cleaned up. Steering (hooks.steering,
hooks.steer_rows), ablation (hooks.ablation), capture (hooks.capture, hooks.token_capture) and
patching (hooks.patching) all run through it."""

from evprobe.hooks.intervention.ops import SCHEDULES, Ablate, Add, Op, Patch, Positions, Read, Replace, Schedule
from evprobe.hooks.intervention.session import Intervention, StopForward, intervene

__all__ = ["SCHEDULES", "Ablate", "Add", "Intervention", "Op", "Patch", "Positions", "Read", "Replace", "Schedule",
           "StopForward", "intervene"]

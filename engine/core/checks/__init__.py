"""Registered checks: the GPU-governance conditions a value filter cannot express.

One module per check (Checkov's one-check-per-file), each one small class with its arguments'
schema beside it, registered by `register_check` (Cloud Custodian's registry idea); adding a
check never means editing a central switch. Importing this package registers every built-in
check, and the cost estimators that read their evidence (`right-size-savings`,
`budget-overrun`). A built-in check registers with a call after its class, not as a decorator:
mypyc compiles a decorated class as a plain Python class, which cannot subclass the compiled
`Check` (docs/compiled-core.md).
"""

from __future__ import annotations

# Registration order is the order error messages and the policy schema list the estimators in:
# keep it (and append new checks at the end).
# isort: off
from engine.core.checks import has_gpu
from engine.core.checks import production
from engine.core.checks import tags_missing
from engine.core.checks import off_hours
from engine.core.checks import mig_fits
from engine.core.checks import mig_capable
from engine.core.checks import activity_below
from engine.core.checks import unencrypted
from engine.core.checks import namespace_selected
from engine.core.checks import checkpoint_missing
from engine.core.checks import right_size
from engine.core.checks import over_budget
# isort: on

BUILTIN_CHECKS = (
    has_gpu.HasGpu,
    production.Production,
    tags_missing.TagsMissing,
    off_hours.OffHours,
    mig_fits.MigFit,
    mig_capable.MigCapable,
    activity_below.ActivityBelow,
    unencrypted.Unencrypted,
    namespace_selected.NamespaceSelected,
    checkpoint_missing.CheckpointMissing,
    right_size.RightSize,
    over_budget.OverBudget,
)

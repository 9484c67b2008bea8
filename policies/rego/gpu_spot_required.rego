# gpu-spot-required, written in Rego over one normalized resource (`input: resource`).
#
# Non-production GPU compute must run on spot/preemptible capacity, or on prepaid/reserved
# capacity (paid for either way). The same verdicts as the built-in YAML policy
# (policies/gpu.yaml) on the same resources, at every door: gpuwarden's adapters have already
# read each Terraform change, cloud instance or node group into the facts this policy judges
# (its GPUs, capacity and tags, and in `input.unknown` which of them are known only after
# apply), so it does the work its YAML sibling does, no more.
#
# Each fact is three-valued: "yes", "no" or "unknown". A resource is denied when it surely holds
# GPUs, is surely not production and surely runs on-demand; the `unknown` rule reports it when
# one of those cannot be decided yet (a value known only after apply); it passes otherwise.
#
# The input keys read: id, gpu, capacity, production, unknown (gpuwarden hands over only those;
# `raw`, the native object, is never read).

package gpuwarden.spot

import rego.v1

# ----------------------------------------------------------------------------- the verdict

# As the YAML policy: its scope (has-gpu, not production) and its violation (capacity neither
# spot nor reserved). A scope fact that is surely "no" ends it; a sure pass needs only the
# capacity; a failure needs every fact sure; anything else cannot be decided yet.
verdict := "n/a" if gpus == "no"
else := "n/a" if production == "yes"
else := "pass" if on_demand == "no"
else := "fail" if {
	on_demand == "yes"
	gpus == "yes"
	production == "no"
}
else := "unknown"

deny contains msg if {
	verdict == "fail"
	msg := sprintf("%s runs GPUs on %s capacity outside production; use spot/preemptible capacity or tag it env=prod", [input.id, input.capacity])
}

unknown contains msg if {
	verdict == "unknown"
	why := concat(", ", [reason |
		some reason, state in {"its GPUs": gpus, "its capacity": on_demand, "its tags": production}
		state == "unknown"
	])
	msg := sprintf("%s: cannot decide whether non-production GPUs run on spot capacity: %s not known until apply", [input.id, why])
}

# ----------------------------------------------------------------------------- the facts

# GPUs: whole GPUs or MIG slices. Unknown when the adapter could not read them yet (an
# instance type known only after apply) and read none.
gpus := "yes" if holds_gpus
else := "unknown" if "gpu" in input.unknown
else := "no"

holds_gpus if input.gpu.count > 0

holds_gpus if input.gpu.mig_count > 0

# Capacity: "spot" and "reserved" pass; "on-demand" does not; the adapter says "unknown" when
# the plan or API does not tell.
on_demand := "unknown" if "capacity" in input.unknown
else := "unknown" if input.capacity == "unknown"
else := "no" if input.capacity in {"spot", "reserved"}
else := "yes"

# Production: gpuwarden's own verdict (`input.production`: engine/core/labels.py, the one
# definition the YAML policies and enforcement use: env/environment/stage/tier tags, `prod` or
# `prd` words, the namespace's labels when the resource has none); null while its tags are
# known only after apply.
production := "unknown" if input.production == null
else := "yes" if input.production == true
else := "no"

outside_production := {"yes": "no", "no": "yes", "unknown": "unknown"}[production]

# Unit tests for gpu_spot_required.rego: `gpuwarden policies test policies/rego`.
package gpuwarden.spot_test

import data.gpuwarden.spot
import rego.v1

# A normalized resource as gpuwarden hands it over (the keys the policy reads).
resource(changes) := object.union({
	"id": "aws_instance.a",
	"gpu": {"model": "NVIDIA A10G", "count": 1, "mig_count": 0},
	"capacity": "on-demand",
	"production": false,
	"unknown": [],
}, changes)

denied(changes) if {
	count(spot.deny) > 0 with input as resource(changes)
}

undecided(changes) if {
	count(spot.unknown) > 0 with input as resource(changes)
}

test_on_demand_gpu_instance_is_denied if {
	denied({})
	not undecided({})
}

test_spot_gpu_instance_passes if {
	not denied({"capacity": "spot"})
	not undecided({"capacity": "spot"})
}

test_reserved_capacity_passes if {
	not denied({"capacity": "reserved"})
	not undecided({"capacity": "reserved"})
}

test_production_gpu_instance_is_out_of_scope if {
	not denied({"production": true})
	not undecided({"production": true, "capacity": "unknown"})
}

test_cpu_instance_is_out_of_scope if {
	not denied({"gpu": null})
	not undecided({"gpu": null, "unknown": ["capacity"]})
}

test_mig_slices_count_as_gpus if {
	denied({"gpu": {"count": null, "mig_profile": "1g.10gb", "mig_count": 7}})
}

test_gpus_known_after_apply_are_undecided if {
	changes := {"gpu": null, "unknown": ["gpu"]}
	not denied(changes)
	undecided(changes)
}

test_tags_known_after_apply_are_undecided if {
	changes := {"production": null, "unknown": ["tags"]}
	not denied(changes)
	undecided(changes)
	some m in spot.unknown with input as resource(changes)
	contains(m, "its tags")
}

test_messages_name_the_resource if {
	some m in spot.deny with input as resource({})
	contains(m, "aws_instance.a")
}

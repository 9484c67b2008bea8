# Unit tests for gpu_spot_required.rego: `gpuwarden policies test policies/rego`.
package gpuwarden.spot_test

import data.gpuwarden.spot
import rego.v1

instance(address, after, unknown) := {
	"address": address,
	"mode": "managed",
	"type": "aws_instance",
	"name": "x",
	"change": {"actions": ["create"], "after": after, "after_unknown": unknown, "after_sensitive": {}},
}

plan(changes) := {"resource_changes": changes}

denied(changes) := found if {
	found := {m.resource | some m in spot.deny} with input as plan(changes)
}

undecided(changes) := found if {
	found := {m.resource | some m in spot.unknown} with input as plan(changes)
}

test_on_demand_gpu_instance_is_denied if {
	denied([instance("aws_instance.a", {"instance_type": "g5.xlarge", "tags_all": {}}, {})]) == {"aws_instance.a"}
}

test_spot_gpu_instance_passes if {
	changes := [instance("aws_instance.a", {"instance_type": "g5.xlarge", "tags_all": {}, "instance_market_options": [{"market_type": "spot"}]}, {})]
	denied(changes) == set()
	undecided(changes) == set()
}

test_production_gpu_instance_is_out_of_scope if {
	denied([instance("aws_instance.a", {"instance_type": "g5.xlarge", "tags_all": {"ENV": "Prod"}}, {})]) == set()
}

test_cpu_instance_is_out_of_scope if {
	denied([instance("aws_instance.a", {"instance_type": "t3.micro", "tags_all": {}}, {})]) == set()
}

test_type_known_after_apply_is_undecided if {
	changes := [instance("aws_instance.a", {"tags_all": {}}, {"instance_type": true})]
	denied(changes) == set()
	undecided(changes) == {"aws_instance.a"}
}

test_deleted_instance_is_ignored if {
	gone := json.patch(instance("aws_instance.a", {"instance_type": "g5.xlarge"}, {}), [
		{"op": "replace", "path": "/change/actions", "value": ["delete"]},
		{"op": "replace", "path": "/change/after", "value": null},
	])
	denied([gone]) == set()
}

test_messages_name_the_resource if {
	some m in spot.deny with input as plan([instance("aws_instance.a", {"instance_type": "g5.xlarge", "tags_all": {}}, {})])
	contains(m.msg, "aws_instance.a")
}

test_instance_in_a_capacity_reservation_passes if {
	changes := [instance("aws_instance.a", {"instance_type": "p5.48xlarge", "tags_all": {}, "capacity_reservation_specification": [{"capacity_reservation_preference": "", "capacity_reservation_target": [{"capacity_reservation_id": "cr-1"}]}]}, {})]
	denied(changes) == set()
	undecided(changes) == set()
}

test_capacity_block_passes_and_open_preference_alone_does_not if {
	block := instance("aws_instance.a", {"instance_type": "p5.48xlarge", "tags_all": {}, "instance_market_options": [{"market_type": "capacity-block"}]}, {})
	open := instance("aws_instance.b", {"instance_type": "p5.48xlarge", "tags_all": {}, "capacity_reservation_specification": [{"capacity_reservation_preference": "open", "capacity_reservation_target": []}]}, {})
	denied([block, open]) == {"aws_instance.b"}
}

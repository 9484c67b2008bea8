# gpu-spot-required, written in Rego over `terraform show -json` output (as conftest gives it).
#
# Non-production GPU compute must run on spot/preemptible capacity. The same verdicts as the
# built-in YAML policy (policies/gpu.yaml) on the same plans, including what Terraform only knows
# after apply: a resource whose GPUs, capacity or tags are not known yet is reported by the
# `unknown` rule, never passed or failed.
#
# Data: data.gpuwarden.catalog (`data: [builtin:catalog]`), instance types and accelerators.
# Embedded-engine note: every iteration is over a value checked to be an array or object first
# (`some x in null` stops the embedded engine, where OPA reads it as undefined).

package gpuwarden.spot

import rego.v1

catalog := data.gpuwarden.catalog

# ----------------------------------------------------------------------------- the plan

# Only input.KEY references: gpuwarden then hands the policy just those keys of the plan.
resource_changes := rcs if {
	rcs := input.resource_changes
	is_array(rcs)
} else := []

evaluated_actions := {["create"], ["update"], ["delete", "create"], ["create", "delete"]}

# What joins (a group's or instance's launch template) can find: launch templates and
# configurations with a planned object, by address. Lookup tables are complete rules
# (comprehensions), computed once per evaluation.
join_targets := {"aws_launch_template", "aws_launch_configuration"}

planned := {rc.address: slim(rc) |
	some rc in resource_changes
	is_object(rc)
	rc.type in join_targets
	is_object(rc.change.after)
}

evaluated_change(rc) if {
	is_object(rc)
	object.get(rc, "mode", "managed") == "managed"
	family[rc.type]
	rc.change.actions in evaluated_actions
	is_object(rc.change.after)
}

# The attributes this policy reads. Functions get the change trimmed to them: passing a whole
# 4 KB change to every helper costs more than the helpers themselves.
read_attributes := {
	"instance_type", "instance_types", "instance_market_options", "launch_template",
	"launch_configuration", "mixed_instances_policy", "spot_price", "capacity_type",
	"enable_managed_spot_training", "resource_config", "machine_type", "guest_accelerator",
	"scheduling", "node_config", "size", "sku", "vm_size", "priority", "tags", "tags_all",
	"tag", "tag_specifications", "labels", "terraform_labels", "effective_labels",
	"node_labels", "name", "id", "capacity_reservation_specification", "reservation_affinity",
	"queued_provisioning", "capacity_reservation_group_id",
}

slim(rc) := {
	"address": rc.address,
	"type": rc.type,
	"name": object.get(rc, "name", null),
	"module_address": object.get(rc, "module_address", null),
	"change": {
		"after": object.filter(rc.change.after, read_attributes),
		"after_unknown": unknown,
		"after_sensitive": sensitive,
	},
	# every path whose value is unknown or sensitive (a path below one is hidden too)
	"hidden_paths": [array.slice(p, 1, count(p)) | walk([unknown, sensitive], [p, v]); v == true],
	"config": config_lookup(rc.address, object.get(rc, "module_address", null), rc.type, object.get(rc, "name", null)),
} if {
	unknown := trimmed_marks(object.get(rc.change, "after_unknown", {}))
	sensitive := trimmed_marks(object.get(rc.change, "after_sensitive", {}))
}

trimmed_marks(marks) := object.filter(marks, read_attributes) if is_object(marks)
else := marks

planned_bases := {strip_index(address) | some address, _ in planned}


# ----------------------------------------------------------------------------- the verdict

# Decided in the order that needs least: no GPU or production ends it before capacity is read.
results := [{"address": rc.address, "verdict": v, "change": change} |
	some rc in resource_changes
	evaluated_change(rc)
	change := slim(rc)
	v := verdict(change)
]

verdict(rc) := after_gpus(gpus(rc), rc)

after_gpus("no", _) := "n/a"

after_gpus(g, rc) := after_production(g, production(rc), rc) if g != "no"

after_production(_, "yes", _) := "n/a"

after_production(g, p, rc) := decide(g, p, spot(rc)) if p != "yes"

decide(_, _, "yes") := "pass"

decide(_, _, "unknown") := "unknown"

decide(g, p, "no") := "fail" if [g, p] == ["yes", "no"]

decide(g, p, "no") := "unknown" if [g, p] != ["yes", "no"]

production(rc) := "unknown" if tags_hidden(rc)
else := "yes" if {
	some key, val in tags(rc)
	lower(val) in {"prod", "production"}
}
else := "no"

deny contains {"msg": msg, "resource": r.address} if {
	some r in results
	r.verdict == "fail"
	msg := sprintf("%s runs GPUs on on-demand capacity outside production; use spot/preemptible capacity or tag it env=prod", [r.address])
}

unknown contains {"msg": msg, "resource": r.address} if {
	some r in results
	r.verdict == "unknown"
	rc := r.change
	why := concat(", ", [reason |
		some reason, state in {"its GPUs": gpus(rc), "its capacity": spot(rc), "its tags": production(rc)}
		state == "unknown"
	])
	msg := sprintf("%s: cannot decide whether non-production GPUs run on spot capacity: %s known only after apply", [r.address, why])
}

# ----------------------------------------------------------------------------- paths into a change
# Functions below answer with an else-chain: the first body that holds ends the evaluation.

dig(node, path) := node[path[0]] if count(path) == 1
else := node[path[0]][path[1]] if count(path) == 2
else := node[path[0]][path[1]][path[2]] if count(path) == 3
else := node[path[0]][path[1]][path[2]][path[3]] if count(path) == 4
else := node[path[0]][path[1]][path[2]][path[3]][path[4]] if count(path) == 5
else := node[path[0]][path[1]][path[2]][path[3]][path[4]][path[5]] if count(path) == 6
else := node[path[0]][path[1]][path[2]][path[3]][path[4]][path[5]][path[6]] if count(path) == 7
else := node[path[0]][path[1]][path[2]][path[3]][path[4]][path[5]][path[6]][path[7]] if count(path) == 8

# `marks` (after_unknown) flags `path` or one of its parents.
marked(marks, path) := true if marks == true
else := true if {
	some n in numbers.range(1, count(path))
	dig(marks, array.slice(path, 0, n)) == true
}
else := false

unknown_marks(rc) := object.get(rc.change, "after_unknown", {})

sensitive_marks(rc) := object.get(rc.change, "after_sensitive", {})

# Unknown until apply, or withheld as sensitive: `path` or a parent of it is marked.
hidden(rc, path) := true if {
	some marked_path in rc.hidden_paths
	count(marked_path) <= count(path)
	array.slice(path, 0, count(marked_path)) == marked_path
}
else := false

value(rc, path) := v if {
	not hidden(rc, path)
	v := dig(rc.change.after, path)
}

text(rc, path) := v if {
	v := value(rc, path)
	is_string(v)
	v != ""
}

flag(rc, path) := v if {
	v := value(rc, path)
	is_boolean(v)
}
else := v if {
	s := value(rc, path)
	is_string(s)
	lower(s) in {"true", "false"}
	v := lower(s) == "true"
}

flag_or(rc, path, fallback) := v if v := flag(rc, path)
else := fallback

text_or(rc, path, fallback) := v if v := text(rc, path)
else := fallback

first_block_or(rc, path, fallback) := b if b := first_block(rc, path)
else := fallback

whole_number(rc, path) := max([0, v]) if {
	v := value(rc, path)
	is_number(v)
	v == floor(v)
}
else := max([0, v]) if {
	s := value(rc, path)
	is_string(s)
	regex.match(`^[-+]?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$`, s)
	v := to_number(s)
	v == floor(v)
}

number_or(rc, path, fallback) := n if n := whole_number(rc, path)
else := fallback

has(rc, key) if key in object.keys(rc.change.after)

has(rc, key) if {
	marks := unknown_marks(rc)
	is_object(marks)
	key in object.keys(marks)
}

# The first block of a nested block list (or the block itself when it is an object).
first_block(rc, path) := path if is_object(value(rc, path))
else := array.concat(path, [indexes[0]]) if {
	items := value(rc, path)
	is_array(items)
	indexes := [i | some i, item in items; is_object(item)]
	count(indexes) > 0
}

blocks(rc, path) := [path] if is_object(value(rc, path))
else := [array.concat(path, [i]) | some i, item in value(rc, path); is_object(item)] if is_array(value(rc, path))
else := []

yes_no(true) := "yes"

yes_no(false) := "no"

# ----------------------------------------------------------------------------- configuration

# Regular expressions only where there is an index to take off (they cost more than the rest).
strip_index(address) := address if not endswith(address, "]")
else := regex.replace(address, `\[(?:"(?:[^"\\]|\\.)*"|[0-9]+)\]$`, "")

index_suffix(address) := "" if not endswith(address, "]")
else := found[0] if {
	found := regex.find_n(`\[(?:"(?:[^"\\]|\\.)*"|[0-9]+)\]$`, address, 1)
	count(found) > 0
}
else := ""

module_address(rc) := rc.module_address if is_string(rc.module_address)
else := module_of(rc.address)

module_of(address) := "" if not startswith(address, "module.")
else := trim_suffix(prefix[0], ".") if {
	prefix := regex.find_n(`^(?:module\.[A-Za-z0-9_-]+(?:\[(?:"(?:[^"\\]|\\.)*"|[0-9]+)\])?\.)+`, address, 1)
	count(prefix) > 0
}
else := ""

module_prefix(rc) := "" if module_address(rc) == ""
else := concat("", [module_address(rc), "."])

module_path(address) := address if not contains(address, "[")
else := regex.replace(address, `\[(?:"(?:[^"\\]|\\.)*"|[0-9]+)\]`, "")

configurations := c if {
	c := input.configuration
	is_object(c)
} else := {}

# Each resource block of the configuration, by its module path and address. Modules are
# followed six calls deep (module.a.module.b...), enough for real configurations.
module_level(level) := [{"path": array.concat(m.path, [name]), "module": call.module} |
	some m in level
	calls := object.get(m.module, "module_calls", {})
	is_object(calls)
	some name, call in calls
	is_object(call)
	is_object(call.module)
]

modules_0 := [{"path": [], "module": root} | root := configurations.root_module; is_object(root)]

modules_1 := module_level(modules_0)

modules_2 := module_level(modules_1)

modules_3 := module_level(modules_2)

modules_4 := module_level(modules_3)

modules_5 := module_level(modules_4)

modules_6 := module_level(modules_5)

config_index := {key: trimmed_config(entry) |
	some level in [modules_0, modules_1, modules_2, modules_3, modules_4, modules_5, modules_6]
	some m in level
	entries := object.get(m.module, "resources", [])
	is_array(entries)
	some entry in entries
	is_object(entry)
	is_string(entry.address)
	object.get(entry, "mode", "managed") == "managed"
	key := concat("|", [concat(".", [concat("", ["module.", n]) | some n in m.path]), entry.address])
}

# What the policy reads of a resource block: its expressions and which provider block it uses.
trimmed_config(entry) := {
	"expressions": object.filter(expressions, read_attributes),
	"provider_config_key": object.get(entry, "provider_config_key", null),
} if {
	expressions := object.get(entry, "expressions", {})
	is_object(expressions)
}
else := {"expressions": {}, "provider_config_key": object.get(entry, "provider_config_key", null)}

# The configuration block of a change (null when the plan has none for it), looked up once.
config_lookup(address, module, kind, name) := found if {
	is_string(name)
	key := concat("", [module_path(module_or(address, module)), "|", kind, ".", name])
	found := config_index[key]
}
else := null

module_or(address, module) := module if is_string(module)
else := module_of(address)

config_of(rc) := rc.config if rc.config != null

has_config(rc) if rc.config != null

expressions(rc) := rc.config.expressions if rc.config != null
else := {}

configured(rc, path) if {
	found := dig(expressions(rc), path)
	found != null
}

# Unknown only because the configuration leaves it to the provider's default.
left_to_provider(rc, path) if {
	hidden(rc, path)
	has_config(rc)
	not configured(rc, path)
}

references(rc, path) := [r | some r in refs; is_string(r)] if {
	refs := dig(expressions(rc), array.concat(path, ["references"]))
	is_array(refs)
} else := []

# A constant setting of the provider block a resource uses; markers when not constant or when
# the plan carries no configuration; null when no provider block sets it.
provider_setting(rc, provider, path) := "__no_configuration__" if not has_config(rc)
else := "__no_configuration__" if not is_object(object.get(configurations, "provider_config", null))
else := setting if {
	key := object.get(config_of(rc), "provider_config_key", null)
	candidates := array.concat([c | some c in [key, last_part(key)]; is_string(c)], [provider])
	nodes := [node |
		some candidate in candidates
		node := dig(configurations.provider_config, array.concat([candidate, "expressions"], path))
		node != null
	]
	count(nodes) > 0
	setting := constant_or_marker(nodes[0])
}
else := null

last_part(key) := parts[count(parts) - 1] if {
	is_string(key)
	parts := split(key, ":")
}

constant_or_marker(node) := node.constant_value if {
	is_object(node)
	"constant_value" in object.keys(node)
}
else := "__not_constant__"

# ----------------------------------------------------------------------------- joins

find(address, hint) := concat("", [address, hint]) if planned[concat("", [address, hint])]
else := address if planned[address]
else := first if {
	address in planned_bases
	first := [rc.address | some rc in resource_changes; planned[rc.address]; strip_index(rc.address) == address][0]
}

referenced(rc, target, path) := hits[0] if {
	hits := [found |
		some reference in references(rc, path)
		parts := split(reference, ".")
		count(parts) >= 2
		parts[0] == target
		name := split(parts[1], "[")[0]
		found := find(sprintf("%s%s.%s", [module_prefix(rc), target, name]), index_suffix(rc.address))
	]
	count(hits) > 0
}

find_by_attribute(kind, attribute, wanted) := [other.address |
	some other in resource_changes
	planned[other.address]
	other.type == kind
	other.change.after[attribute] == wanted
][0]

# The aws_launch_template (in the plan) that the block at `path` names; "" when none.
template_address(rc, path) := hits[0] if {
	spec_present(rc, path)
	by_reference := [found |
		some key in ["id", "launch_template_id", "name", "launch_template_name"]
		found := referenced(rc, "aws_launch_template", array.concat(path, [key]))
	]
	by_value := [found |
		some key in ["name", "launch_template_name", "id", "launch_template_id"]
		literal := text(rc, array.concat(path, [key]))
		found := find_by_attribute("aws_launch_template", attribute_of(key), literal)
	]
	hits := array.concat(by_reference, by_value)
	count(hits) > 0
}
else := ""

spec_present(rc, path) if is_object(dig(rc.change.after, path))

spec_present(rc, path) if marked(object.get(rc.change, "after_unknown", {}), path)

attribute_of(key) := "name" if contains(key, "name")
else := "id"

launch_configuration_address(rc) := found if found := referenced(rc, "aws_launch_configuration", ["launch_configuration"])
else := found if found := find_by_attribute("aws_launch_configuration", "name", text(rc, ["launch_configuration"]))
else := ""

# ----------------------------------------------------------------------------- tags and labels
# Only the env / environment entries decide production, so maps keep only those keys.

env_keys := {"env", "environment"}

tag_text(v) := v if is_string(v)
else := "true" if v == true
else := "false" if v == false
else := json.marshal(v)

# The env entries of a string map (tags, labels); unknown or sensitive entries keep their key.
mapping(rc, path) := {} if hidden(rc, path)
else := env_entries(value(rc, path), sub_marks(sensitive_marks(rc), path), sub_marks(unknown_marks(rc), path)) if is_object(value(rc, path))
else := {}

sub_marks(marks, path) := m if {
	m := dig(marks, path)
	is_object(m)
}
else := {}

env_entries(items, sensitive, unknown_keys) := {key: entry |
	some key, item in items
	lower(key) in env_keys
	entry := tag_entry(object.get(sensitive, key, false), object.get(unknown_keys, key, false), item)
}

tag_entry(true, _, _) := "(sensitive)"

tag_entry(false, true, _) := "(known after apply)"

tag_entry(false, false, item) := tag_text(item) if item != null

# Provider-level default tags/labels under the resource's own.
with_defaults(own, defaults) := object.union({k: tag_text(v) | some k, v in defaults; lower(k) in env_keys; v != null}, own) if is_object(defaults)
else := own

defaults_unknown(defaults) := true if {
	not is_object(defaults)
	defaults != null
}
else := false

aws_tags(rc) := mapping(rc, ["tags_all"]) if {
	has(rc, "tags_all")
	not hidden(rc, ["tags_all"])
}
else := mapping(rc, ["tags"]) if not has(rc, "tags_all")
else := with_defaults(mapping(rc, ["tags"]), provider_setting(rc, "aws", ["default_tags", 0, "tags"]))

aws_tags_hidden(rc) := false if {
	has(rc, "tags_all")
	not hidden(rc, ["tags_all"])
}
else := hidden(rc, ["tags"]) if not has(rc, "tags_all")
else := true in [hidden(rc, ["tags"]), defaults_unknown(provider_setting(rc, "aws", ["default_tags", 0, "tags"]))]

gcp_label_key(rc) := keys[0] if {
	keys := [k | some k in ["terraform_labels", "effective_labels"]; has(rc, k); not hidden(rc, [k])]
	count(keys) > 0
}

gcp_labels(rc) := mapping(rc, [gcp_label_key(rc)]) if gcp_label_key(rc)
else := mapping(rc, ["labels"]) if not has(rc, "terraform_labels")
else := with_defaults(mapping(rc, ["labels"]), provider_setting(rc, "google", ["default_labels"]))

gcp_labels_hidden(rc) := false if gcp_label_key(rc)
else := hidden(rc, ["labels"]) if not has(rc, "terraform_labels")
else := true in [hidden(rc, ["labels"]), defaults_unknown(provider_setting(rc, "google", ["default_labels"]))]

# Tags a launch template gives the instances it launches.
instance_specs(rc) := [spec | some spec in blocks(rc, ["tag_specifications"]); instance_spec(rc, spec)]

instance_tags(rc) := object.union_n([mapping(rc, array.concat(spec, ["tags"])) | some spec in instance_specs(rc)])

instance_tags_hidden(rc) := true in [hidden(rc, array.concat(spec, ["tags"])) | some spec in instance_specs(rc)]

instance_spec(rc, spec) if not text(rc, array.concat(spec, ["resource_type"]))

instance_spec(rc, spec) if text(rc, array.concat(spec, ["resource_type"])) == "instance"

# An autoscaling group's propagated tags (`tag` blocks, or the older `tags` list of maps).
asg_tags(rc) := {key: values[count(values) - 1] |
	some pair in pairs
	key := pair[0]
	values := [p[1] | some p in pairs; p[0] == key]
} if {
	pairs := [[key, entry_value] |
		some shape in ["tag", "tags"]
		some entry in blocks(rc, [shape])
		key := text(rc, array.concat(entry, ["key"]))
		lower(key) in env_keys
		not flag(rc, array.concat(entry, ["propagate_at_launch"])) == false
		entry_value := asg_tag_value(rc, entry)
	]
}

asg_tags_hidden(rc) := count([shape |
	some shape in ["tag", "tags"]
	hidden(rc, [shape])
	not left_to_provider(rc, [shape])
]) > 0

asg_tag_value(rc, entry) := "(known after apply)" if hidden(rc, array.concat(entry, ["value"]))
else := tag_text(v) if {
	v := value(rc, array.concat(entry, ["value"]))
	truthy(v)
}
else := ""

truthy(v) if not v in {null, false, 0, "", [], {}}

# ----------------------------------------------------------------------------- GPUs

type_state(rc, path) := unknown_type if hidden(rc, path)
else := {"unknown": false, "type": parts[count(parts) - 1]} if {
	v := dig(rc.change.after, path)
	is_string(v)
	v != ""
	parts := split(v, "/")
}
else := {"unknown": false, "type": null}

unknown_type := {"unknown": true, "type": null}

catalog_gpus(instance_type) := object.get(object.get(catalog.instance_types, instance_type, {}), "gpu_count", 0) if is_string(instance_type)
else := 0

gpus_of(state, kind) := "unknown" if state.unknown
else := "yes" if catalog_gpus(catalog_type(state.type, kind)) > 0
else := "no"

# SageMaker ml.* types are specified as the EC2 type they run on.
catalog_type(instance_type, kind) := trim_prefix(instance_type, "ml.") if {
	is_string(instance_type)
	startswith(kind, "aws_sagemaker")
	startswith(instance_type, "ml.")
}
else := instance_type

# Attached GCP accelerators: total count, and whether some are not known yet.
attached(rc, base) := {"total": 0, "unknown": false} if left_to_provider(rc, array.concat(base, ["guest_accelerator"]))
else := {"total": 0, "unknown": true} if hidden(rc, array.concat(base, ["guest_accelerator"]))
else := {"total": sum(counts), "unknown": count(unreadable) > 0} if {
	accelerators := blocks(rc, array.concat(base, ["guest_accelerator"]))
	counts := [n | some a in accelerators; readable_accelerator(rc, a); n := whole_number(rc, array.concat(a, ["count"]))]
	unreadable := [a | some a in accelerators; not readable_accelerator(rc, a)]
}

readable_accelerator(rc, a) if {
	whole_number(rc, array.concat(a, ["count"]))
	not hidden(rc, array.concat(a, ["type"]))
}

gcp_gpus(rc, base, state) := "yes" if catalog_gpus(state.type) > 0
else := gcp_attached_gpus(attached(rc, base), state)

gcp_attached_gpus(found, state) := "yes" if found.total > 0
else := "unknown" if state.unknown
else := "unknown" if found.unknown
else := "no"

# ----------------------------------------------------------------------------- capacity

market_spot(rc, base) := "no" if left_to_provider(rc, array.concat(base, ["instance_market_options"]))
else := "unknown" if hidden(rc, array.concat(base, ["instance_market_options"]))
else := market_block_spot(rc, block) if block := first_block(rc, array.concat(base, ["instance_market_options"]))
else := "no"

market_block_spot(rc, block) := "unknown" if hidden(rc, array.concat(block, ["market_type"]))
else := yes_no(lower(text_or(rc, array.concat(block, ["market_type"]), "")) == "spot")

spot_price_spot(rc) := "no" if left_to_provider(rc, ["spot_price"])
else := "unknown" if hidden(rc, ["spot_price"])
else := "yes" if text(rc, ["spot_price"])
else := "no"

distribution_spot(rc, policy) := "no" if left_to_provider(rc, array.concat(policy, ["instances_distribution"]))
else := "unknown" if hidden(rc, array.concat(policy, ["instances_distribution"]))
else := distribution_values_spot(rc, block) if block := first_block(rc, array.concat(policy, ["instances_distribution"]))
else := "no"

distribution_values_spot(rc, d) := "unknown" if {
	some key in ["on_demand_base_capacity", "on_demand_percentage_above_base_capacity"]
	hidden(rc, array.concat(d, [key]))
	not left_to_provider(rc, array.concat(d, [key]))
}
else := yes_no([
	number_or(rc, array.concat(d, ["on_demand_base_capacity"]), 0),
	number_or(rc, array.concat(d, ["on_demand_percentage_above_base_capacity"]), 100),
] == [0, 0])

scheduling_spot(rc, base) := "no" if left_to_provider(rc, array.concat(base, ["scheduling"]))
else := "unknown" if hidden(rc, array.concat(base, ["scheduling"]))
else := scheduling_block_spot(rc, block) if block := first_block(rc, array.concat(base, ["scheduling"]))
else := "no"

scheduling_block_spot(rc, s) := "yes" if upper(text(rc, array.concat(s, ["provisioning_model"]))) == "SPOT"
else := "yes" if flag(rc, array.concat(s, ["preemptible"])) == true
else := "unknown" if {
	some key in ["provisioning_model", "preemptible"]
	hidden(rc, array.concat(s, [key]))
	not left_to_provider(rc, array.concat(s, [key]))
}
else := "no"

gke_spot(rc, node) := "yes" if flag(rc, array.concat(node, ["spot"])) == true
else := "yes" if flag(rc, array.concat(node, ["preemptible"])) == true
else := "unknown" if {
	some key in ["spot", "preemptible"]
	hidden(rc, array.concat(node, [key]))
	not left_to_provider(rc, array.concat(node, [key]))
}
else := "no"

priority_spot(rc) := "no" if left_to_provider(rc, ["priority"])
else := "unknown" if hidden(rc, ["priority"])
else := yes_no(lower(text_or(rc, ["priority"], "Regular")) == "spot")

flag_spot(rc, key) := "no" if left_to_provider(rc, [key])
else := "unknown" if hidden(rc, [key])
else := yes_no(flag_or(rc, [key], false))

# ----------------------------------------------------------------------------- per resource type
# gpus(rc), spot(rc), tags(rc) and tags_hidden(rc): one definition per family of types.

family := {
	"aws_instance": "aws_instance", "aws_spot_instance_request": "aws_instance",
	"aws_launch_template": "aws_launch_template", "aws_launch_configuration": "aws_launch_configuration",
	"aws_autoscaling_group": "aws_autoscaling_group", "aws_eks_node_group": "aws_eks_node_group",
	"aws_sagemaker_training_job": "aws_sagemaker_training_job",
	"google_compute_instance": "gce", "google_compute_instance_template": "gce",
	"google_compute_region_instance_template": "gce", "google_container_node_pool": "gke",
	"azurerm_linux_virtual_machine": "azure_vm", "azurerm_windows_virtual_machine": "azure_vm",
	"azurerm_linux_virtual_machine_scale_set": "azure_vm",
	"azurerm_windows_virtual_machine_scale_set": "azure_vm",
	"azurerm_virtual_machine": "azure_legacy_vm", "azurerm_kubernetes_cluster_node_pool": "aks",
}

size_key := {
	"azurerm_linux_virtual_machine": "size", "azurerm_windows_virtual_machine": "size",
	"azurerm_linux_virtual_machine_scale_set": "sku", "azurerm_windows_virtual_machine_scale_set": "sku",
}

gpus(rc) := gpus_by(family[rc.type], rc)

# Spot, or prepaid/reserved capacity (paid for either way): both pass.
spot(rc) := any_yes([reserved_by(family[rc.type], rc), spot_by(family[rc.type], rc)])

tags(rc) := tags_by(family[rc.type], rc)

tags_hidden(rc) := tags_hidden_by(family[rc.type], rc)

# ----------------------------------------------------------------------------- reserved capacity
# As engine/sources/terraform/reservations.py: "yes", "no" or "unknown". A block or attribute
# the configuration does not set is the provider's default: no reservation.

any_yes(states) := "yes" if "yes" in states
else := "unknown" if "unknown" in states
else := "no"

set_by_config(rc, path) if {
	hidden(rc, path)
	configured(rc, path)
}

# Whether the block at `path` is there.
block_state(rc, path) := "unknown" if set_by_config(rc, path)
else := "no" if hidden(rc, path)
else := "yes" if first_block(rc, path)
else := "no"

text_state(rc, path, wanted) := "unknown" if set_by_config(rc, path)
else := "no" if hidden(rc, path)
else := yes_no(upper(text_or(rc, path, "")) == wanted)

flag_state(rc, path) := "unknown" if set_by_config(rc, path)
else := "no" if hidden(rc, path)
else := yes_no(flag_or(rc, path, false))

# The state of `inner` below the block at `path` ("no" or "unknown" when the block is not there).
within_block(rc, path, inner) := block_state(rc, path) if block_state(rc, path) != "yes"
else := inner_state(rc, array.concat(first_block(rc, path), inner.path), inner)

inner_state(rc, path, inner) := block_state(rc, path) if inner.kind == "block"
else := text_state(rc, path, inner.wanted) if inner.kind == "text"
else := flag_state(rc, path)

aws_reservation_target(rc) := within_block(rc, ["capacity_reservation_specification"],
	{"kind": "block", "path": ["capacity_reservation_target"]})

aws_capacity_block(rc) := within_block(rc, ["instance_market_options"],
	{"kind": "text", "path": ["market_type"], "wanted": "CAPACITY-BLOCK"})

aws_reserved(rc) := any_yes([aws_reservation_target(rc), aws_capacity_block(rc)])

# An instance's market and reservation settings, each from its launch template when it leaves
# that block unset.
setting_source(rc, template, key) := planned[template] if {
	template != ""
	has_config(rc)
	not configured(rc, [key])
}
else := rc

reserved_by("aws_instance", rc) := any_yes([
	aws_reservation_target(setting_source(rc, template, "capacity_reservation_specification")),
	aws_capacity_block(setting_source(rc, template, "instance_market_options")),
]) if template := template_address(rc, ["launch_template", 0])

reserved_by("aws_launch_template", rc) := aws_reserved(rc)

reserved_by(kind, _) := "no" if kind in {"aws_launch_configuration", "aws_sagemaker_training_job", "azure_legacy_vm"}

# A group: its own reservation target, else its launch template's (not through a mixed policy).
reserved_by("aws_autoscaling_group", rc) := "yes" if aws_reservation_target(rc) == "yes"
else := "no" if policy_hidden(rc)
else := "no" if first_block(rc, ["mixed_instances_policy"])
else := aws_reserved(planned[source]) if {
	source := group_source(rc)
	source != ""
	planned[source].type == "aws_launch_template"
}
else := "no"

reserved_by("aws_eks_node_group", rc) := any_yes([
	text_state(rc, ["capacity_type"], "CAPACITY_BLOCK"),
	node_group_template_reserved(rc, template_address(rc, ["launch_template", 0])),
])

node_group_template_reserved(_, "") := "no"

node_group_template_reserved(_, template) := aws_reserved(planned[template]) if template != ""

# GCE: a specific reservation or DWS flex-start.
reserved_by("gce", rc) := any_yes([
	within_block(rc, ["reservation_affinity"], {"kind": "text", "path": ["type"], "wanted": "SPECIFIC_RESERVATION"}),
	within_block(rc, ["scheduling"], {"kind": "text", "path": ["provisioning_model"], "wanted": "FLEX_START"}),
])

# GKE: a specific reservation, flex-start or queued provisioning.
reserved_by("gke", rc) := "no" if default_pool(rc)
else := any_yes([
	within_block(rc, array.concat(node_path(rc), ["reservation_affinity"]),
		{"kind": "text", "path": ["consume_reservation_type"], "wanted": "SPECIFIC_RESERVATION"}),
	flag_state(rc, array.concat(node_path(rc), ["flex_start"])),
	within_block(rc, ["queued_provisioning"], {"kind": "flag", "path": ["enabled"]}),
])

# Azure: a capacity reservation group.
reserved_by(kind, rc) := azure_reserved(rc) if kind in {"azure_vm", "aks"}

azure_reserved(rc) := "unknown" if set_by_config(rc, ["capacity_reservation_group_id"])
else := "no" if hidden(rc, ["capacity_reservation_group_id"])
else := "yes" if text(rc, ["capacity_reservation_group_id"])
else := "no"

# AWS instances and spot requests (with an optional launch template in the plan).
gpus_by("aws_instance", rc) := gpus_of(instance_type_via_template(rc, template_address(rc, ["launch_template", 0])), rc.type)

spot_by("aws_instance", rc) := instance_spot(rc, template_address(rc, ["launch_template", 0]))

tags_by("aws_instance", rc) := aws_tags(rc)

tags_hidden_by("aws_instance", rc) := aws_tags_hidden(rc)

instance_type_via_template(rc, template) := type_state(planned[template], ["instance_type"]) if {
	template != ""
	left_to_provider(rc, ["instance_type"])
}
else := type_state(rc, ["instance_type"])

instance_spot(rc, template) := "yes" if rc.type == "aws_spot_instance_request"
else := market_spot(planned[template], []) if {
	template != ""
	has_config(rc)
	not configured(rc, ["instance_market_options"])
}
else := market_spot(rc, [])

# Launch templates and launch configurations.
gpus_by(kind, rc) := gpus_of(type_state(rc, ["instance_type"]), rc.type) if kind in {"aws_launch_template", "aws_launch_configuration"}

spot_by("aws_launch_template", rc) := market_spot(rc, [])

tags_by("aws_launch_template", rc) := object.union(aws_tags(rc), instance_tags(rc))

tags_hidden_by("aws_launch_template", rc) := true in [aws_tags_hidden(rc), instance_tags_hidden(rc)]

spot_by("aws_launch_configuration", rc) := spot_price_spot(rc)

tags_by("aws_launch_configuration", _) := {}

tags_hidden_by("aws_launch_configuration", _) := false

# Autoscaling groups: a mixed instances policy, a launch template or a launch configuration.
gpus_by("aws_autoscaling_group", rc) := gpus_of(group_type(rc, group_source(rc)), rc.type)

spot_by("aws_autoscaling_group", rc) := group_spot(rc, group_source(rc))

tags_by("aws_autoscaling_group", rc) := object.union(source_instance_tags(group_source(rc)), asg_tags(rc))

tags_hidden_by("aws_autoscaling_group", rc) := asg_tags_hidden(rc)

group_source(rc) := found if {
	found := template_address(rc, ["mixed_instances_policy", 0, "launch_template", 0, "launch_template_specification", 0])
	found != ""
}
else := found if {
	found := template_address(rc, ["launch_template", 0])
	found != ""
}
else := launch_configuration_address(rc)

source_instance_tags(source) := instance_tags(planned[source]) if {
	source != ""
	planned[source].type == "aws_launch_template"
}
else := {}

policy_hidden(rc) if {
	hidden(rc, ["mixed_instances_policy"])
	not left_to_provider(rc, ["mixed_instances_policy"])
}

group_type(rc, source) := unknown_type if policy_hidden(rc)
else := mixed_type(rc, policy, source) if policy := first_block(rc, ["mixed_instances_policy"])
else := unknown_type if source == ""
else := type_state(planned[source], ["instance_type"])

group_spot(rc, source) := "unknown" if policy_hidden(rc)
else := distribution_spot(rc, policy) if policy := first_block(rc, ["mixed_instances_policy"])
else := "unknown" if source == ""
else := source_spot(planned[source])

source_spot(source) := spot_price_spot(source) if source.type == "aws_launch_configuration"
else := market_spot(source, [])

mixed_type(rc, policy, source) := type_state(rc, array.concat(typed[0], ["instance_type"])) if {
	template := first_block(rc, array.concat(policy, ["launch_template"]))
	typed := [o |
		some o in blocks(rc, array.concat(template, ["override"]))
		typed_override(rc, o)
	]
	count(typed) > 0
}
else := type_state(planned[source], ["instance_type"]) if source != ""
else := unknown_type

typed_override(rc, o) if text(rc, array.concat(o, ["instance_type"]))

typed_override(rc, o) if hidden(rc, array.concat(o, ["instance_type"]))

# EKS managed node groups.
gpus_by("aws_eks_node_group", rc) := gpus_of(eks_type(rc), rc.type)

spot_by("aws_eks_node_group", rc) := "no" if left_to_provider(rc, ["capacity_type"])
else := "unknown" if hidden(rc, ["capacity_type"])
else := yes_no(upper(text_or(rc, ["capacity_type"], "ON_DEMAND")) == "SPOT")

tags_by("aws_eks_node_group", rc) := object.union(mapping(rc, ["labels"]), aws_tags(rc))

tags_hidden_by("aws_eks_node_group", rc) := true in [aws_tags_hidden(rc), hidden(rc, ["labels"])]

eks_type(rc) := unknown_type if {
	hidden(rc, ["instance_types"])
	not left_to_provider(rc, ["instance_types"])
}
else := type_state(rc, ["instance_types", 0]) if truthy(value(rc, ["instance_types"]))
else := type_state(planned[template], ["instance_type"]) if {
	template := template_address(rc, ["launch_template", 0])
	template != ""
}
else := unknown_type if first_block(rc, ["launch_template"])
else := unknown_type if marked(unknown_marks(rc), ["launch_template"])
else := {"unknown": false, "type": "t3.medium"}

# SageMaker training jobs.
gpus_by("aws_sagemaker_training_job", rc) := gpus_of(type_state(rc, array.concat(config, ["instance_type"])), rc.type) if {
	config := first_block_or(rc, ["resource_config"], ["resource_config", 0])
}

spot_by("aws_sagemaker_training_job", rc) := flag_spot(rc, "enable_managed_spot_training")

tags_by("aws_sagemaker_training_job", rc) := aws_tags(rc)

tags_hidden_by("aws_sagemaker_training_job", rc) := aws_tags_hidden(rc)

# GCE instances and instance templates.
gpus_by("gce", rc) := gcp_gpus(rc, [], type_state(rc, ["machine_type"]))

spot_by("gce", rc) := scheduling_spot(rc, [])

tags_by("gce", rc) := gcp_labels(rc)

tags_hidden_by("gce", rc) := gcp_labels_hidden(rc)

# GKE node pools: a pool without node_config runs GKE's default node (e2-medium, no GPU).
default_pool(rc) if {
	not first_block(rc, ["node_config"])
	left_to_provider(rc, ["node_config"])
}

default_pool(rc) if {
	not first_block(rc, ["node_config"])
	not hidden(rc, ["node_config"])
}

node_path(rc) := first_block_or(rc, ["node_config"], ["node_config", 0])

gpus_by("gke", rc) := "no" if default_pool(rc)
else := gcp_gpus(rc, node_path(rc), type_state(rc, array.concat(node_path(rc), ["machine_type"])))

spot_by("gke", rc) := "no" if default_pool(rc)
else := gke_spot(rc, node_path(rc))

tags_by("gke", rc) := {} if default_pool(rc)
else := object.union(mapping(rc, array.concat(node_path(rc), ["labels"])), mapping(rc, array.concat(node_path(rc), ["resource_labels"])))

tags_hidden_by("gke", rc) := false if default_pool(rc)
else := true in [hidden(rc, array.concat(node_path(rc), ["labels"])), hidden(rc, array.concat(node_path(rc), ["resource_labels"]))]

# Azure VMs, scale sets, the legacy VM resource (no spot option) and AKS node pools.
gpus_by("azure_vm", rc) := gpus_of(type_state(rc, [size_key[rc.type]]), rc.type)

gpus_by(kind, rc) := gpus_of(type_state(rc, ["vm_size"]), rc.type) if kind in {"azure_legacy_vm", "aks"}

spot_by(kind, rc) := priority_spot(rc) if kind in {"azure_vm", "aks"}

spot_by("azure_legacy_vm", _) := "no"

tags_by(kind, rc) := mapping(rc, ["tags"]) if kind in {"azure_vm", "azure_legacy_vm"}

tags_hidden_by(kind, rc) := hidden(rc, ["tags"]) if kind in {"azure_vm", "azure_legacy_vm"}

tags_by("aks", rc) := object.union(mapping(rc, ["node_labels"]), mapping(rc, ["tags"]))

tags_hidden_by("aks", rc) := true in [hidden(rc, ["node_labels"]), hidden(rc, ["tags"])]

# required-cost-tags, written in Rego over Kubernetes admission requests.
#
# GPU workloads (Pods and pod-template controllers requesting nvidia.com/gpu or MIG slices) must
# carry the cost-allocation labels in `input.parameters.required_tags` (the policy's
# `required_tags` parameter; keys match case-insensitively with '-' and '_' equal). The same
# verdicts as the built-in YAML policy on the same requests.
#
# Input: the AdmissionReview gpuwarden builds (input.request, Gatekeeper's input.review,
# input.parameters); see docs/rego.md.

package gpuwarden.cost_tags

import rego.v1

default_required := ["team", "project", "cost-center"]

required := tags if {
	tags := input.parameters.required_tags
	is_array(tags)
} else := default_required

workload := input.request.object

# ----------------------------------------------------------------------------- the pod spec

template_path := ["spec"] if workload.kind == "Pod"
else := ["spec", "jobTemplate", "spec", "template"] if workload.kind == "CronJob"
else := ["spec", "template"]

pod_template := t if {
	count(template_path) > 1
	t := object_at(workload, template_path)
}

pod_spec := workload.spec if workload.kind == "Pod"
else := s if {
	s := pod_template.spec
	is_object(s)
}

object_at(root, path) := v if {
	v := root[path[0]][path[1]]
	count(path) == 2
	is_object(v)
}
else := v if {
	v := root[path[0]][path[1]][path[2]][path[3]]
	count(path) == 4
	is_object(v)
}

# ----------------------------------------------------------------------------- GPU requests

gpu_resource(name) if name == "nvidia.com/gpu"

gpu_resource(name) if {
	startswith(name, "nvidia.com/mig-")
	count(name) > count("nvidia.com/mig-")
}

containers contains c if {
	some field in ["containers", "initContainers"]
	list := object.get(pod_spec, field, [])
	is_array(list)
	some c in list
	is_object(c)
}

# What one container asks for a GPU resource: its limit, else its request (the API server
# defaults requests to limits for extended resources).
amount(container, name) := container.resources.limits[name] if {
	is_object(container.resources.limits)
	name in object.keys(container.resources.limits)
}
else := container.resources.requests[name]

requested_names(container) := {name |
	some section in ["limits", "requests"]
	values := container.resources[section]
	is_object(values)
	some name, _ in values
	gpu_resource(name)
}

# A whole, non-negative quantity: a number, or a string Kubernetes reads as one.
whole_quantity(q) := q if {
	is_number(q)
	q >= 0
	q == floor(q)
}
else := n if {
	is_string(q)
	regex.match(`^[0-9]+$`, trim_space(q))
	n := to_number(trim_space(q))
}

# One unreadable quantity makes the whole-GPU count unknown; MIG slices still count.
malformed if {
	some container in containers
	some name in requested_names(container)
	not whole_quantity(amount(container, name))
}

requests_gpu if {
	not malformed
	some container in containers
	some name in requested_names(container)
	whole_quantity(amount(container, name)) > 0
}

requests_gpu if {
	some container in containers
	some name in requested_names(container)
	startswith(name, "nvidia.com/mig-")
	whole_quantity(amount(container, name)) > 0
}

# ----------------------------------------------------------------------------- labels

label_text(v) := v if is_string(v)
else := "true" if v == true
else := "false" if v == false
else := format_int(v, 10) if {
	is_number(v)
	v == floor(v)
}
else := sprintf("%v", [v]) if is_number(v)

labels_of(metadata) := {k: label_text(v) | some k, v in metadata.labels; label_text(v)} if is_object(metadata.labels)
else := {}

# The workload's labels, then its pod template's (the first value of a key wins).
template_metadata := m if {
	m := pod_template.metadata
	is_object(m)
} else := {}

labels := object.union(labels_of(template_metadata), labels_of(object.get(workload, "metadata", {})))

normalize(key) := replace(lower(key), "_", "-")

present := {normalize(k) | some k, v in labels; trim_space(v) != ""}

missing := [tag | some tag in required; not normalize(tag) in present]

workload_name := workload.metadata.name if is_string(workload.metadata.name)
else := workload.metadata.generateName if is_string(workload.metadata.generateName)
else := "<unnamed>"

# An unreadable GPU quantity and no GPU read otherwise: whether it holds GPUs is not known.
unknown contains {"msg": msg, "details": {"missing_tags": missing}} if {
	not requests_gpu
	malformed
	count(missing) > 0
	msg := sprintf("%s %s: cannot decide whether it requests GPUs (a GPU quantity is not a whole number); it lacks %s", [workload.kind, workload_name, concat(", ", missing)])
}

deny contains {"msg": msg, "details": {"missing_tags": missing}} if {
	requests_gpu
	count(missing) > 0
	msg := sprintf("%s %s requests GPUs without cost-allocation labels: %s", [workload.kind, workload_name, concat(", ", missing)])
}

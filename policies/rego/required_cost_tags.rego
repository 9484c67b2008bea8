# required-cost-tags, written in Rego over Kubernetes admission requests.
#
# GPU workloads (Pods, pod-template controllers, and any other kind whose spec requests
# nvidia.com/gpu or MIG slices somewhere: training jobs, Ray, LeaderWorkerSet, JobSet, Volcano,
# KServe, Spark `gpu` blocks) must carry the cost-allocation labels in `input.parameters.required_tags` (the policy's
# `required_tags` parameter; keys match case-insensitively with '-' and '_' equal). The same
# verdicts as the built-in YAML policy on the same requests.
#
# Other kinds are read generically: every `resources` block anywhere in the spec is a container's,
# and the labels are the object's and those of every pod template (`template.metadata`, Spark's
# driver/executor `labels`) in it. The YAML policy reads only the GPU templates' labels, so a
# label set only on a CPU template of a mixed job counts here and not there. A DRA claim the twin
# cannot resolve (no ResourceClaim index in an admission request) is `unknown`, never a pass.
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

native_kinds := {"Pod", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"}

# The API group of the object ("" for the core group); a Volcano Job is not a batch Job.
api_group := split(workload.apiVersion, "/")[0] if {
	is_string(workload.apiVersion)
	contains(workload.apiVersion, "/")
}
else := ""

native if {
	workload.kind in native_kinds
	api_group in {"", "apps", "batch", "extensions"}
}

generic_kind if {
	is_string(workload.kind)
	not native
	is_object(workload.spec)
}

containers contains c if {
	not generic_kind
	some field in ["containers", "initContainers"]
	list := object.get(pod_spec, field, [])
	is_array(list)
	some c in list
	is_object(c)
}

# A generic kind: each `resources` (TrainJob: `resourcesPerNode`) block in its spec stands for one container.
containers contains {"resources": r} if {
	generic_kind
	walk(workload.spec, [path, r])
	count(path) > 0
	path[count(path) - 1] in {"resources", "resourcesPerNode"}  # TrainJob: per node
	is_object(r)
}

# Spark Operator: `gpu: {name: nvidia.com/gpu, quantity: n}` on the driver or executors.
containers contains {"resources": {"limits": {g.name: g.quantity}}} if {
	generic_kind
	walk(workload.spec, [path, g])
	count(path) > 0
	path[count(path) - 1] == "gpu"
	is_object(g)
	is_string(g.name)
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

# A DRA claim (resourceClaims, resourceClaimTemplateName) anywhere in the spec.
dra_claim if {
	is_object(workload.spec)
	walk(workload.spec, [path, v])
	count(path) > 0
	path[count(path) - 1] in {"resourceClaims", "resourceClaimTemplateName", "resourceClaimName"}
	v
	not v in {[], {}, ""}
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

labels := object.union(nested_template_labels, object.union(labels_of(template_metadata), labels_of(object.get(workload, "metadata", {}))))

# A generic kind's pod templates' labels (and Spark's driver/executor `labels`).
nested_template_labels := object.union_n([labels_of(m) |
	some m in nested_template_metadata
]) if generic_kind
else := {}

nested_template_metadata contains m if {
	generic_kind
	walk(workload.spec, [path, m])
	count(path) > 1
	array.slice(path, count(path) - 2, count(path)) == ["template", "metadata"]
	is_object(m)
}

nested_template_metadata contains {"labels": l} if {
	generic_kind
	walk(workload.spec, [path, holder])
	count(path) > 0
	path[count(path) - 1] in {"driver", "executor"}
	is_object(holder)
	l := holder.labels
	is_object(l)
}

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

unknown contains {"msg": msg, "details": {"missing_tags": missing}} if {
	not requests_gpu
	not malformed
	dra_claim
	count(missing) > 0
	msg := sprintf("%s %s: cannot decide whether it requests GPUs (a DRA claim this policy cannot resolve); it lacks %s", [workload.kind, workload_name, concat(", ", missing)])
}

deny contains {"msg": msg, "details": {"missing_tags": missing}} if {
	requests_gpu
	count(missing) > 0
	msg := sprintf("%s %s requests GPUs without cost-allocation labels: %s", [workload.kind, workload_name, concat(", ", missing)])
}

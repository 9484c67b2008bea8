# Unit tests for required_cost_tags.rego: `gpuwarden policies test policies/rego`.
package gpuwarden.cost_tags_test

import data.gpuwarden.cost_tags
import rego.v1

review(obj) := {
	"request": {"operation": "CREATE", "object": obj},
	"parameters": {"required_tags": ["team", "project", "cost-center"]},
}

gpu_pod(labels) := {
	"kind": "Pod",
	"metadata": {"name": "p", "labels": labels},
	"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
}

test_unlabelled_gpu_pod_is_denied if {
	count(cost_tags.deny) == 1 with input as review(gpu_pod({}))
}

test_keys_match_case_insensitively_with_dash_and_underscore_equal if {
	count(cost_tags.deny) == 0 with input as review(gpu_pod({"Team": "a", "PROJECT": "b", "cost_center": "c"}))
}

test_empty_values_count_as_missing if {
	some m in cost_tags.deny with input as review(gpu_pod({"team": " ", "project": "b", "cost-center": "c"}))
	m.details.missing_tags == ["team"]
}

test_pods_without_gpus_are_not_judged if {
	pod := json.patch(gpu_pod({}), [{"op": "replace", "path": "/spec/containers/0/resources", "value": {}}])
	count(cost_tags.deny) == 0 with input as review(pod)
}

test_template_labels_count_for_controllers if {
	deployment := {
		"kind": "Deployment",
		"metadata": {"name": "d", "labels": {"team": "a"}},
		"spec": {"template": {
			"metadata": {"labels": {"project": "b", "cost-center": "c"}},
			"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
		}},
	}
	count(cost_tags.deny) == 0 with input as review(deployment)
}

test_required_tags_come_from_the_parameters if {
	custom := object.union(review(gpu_pod({"team": "a"})), {"parameters": {"required_tags": ["team"]}})
	count(cost_tags.deny) == 0 with input as custom
}

test_training_kinds_are_read_with_their_replica_templates if {
	job := {
		"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
		"metadata": {"name": "t", "labels": {"team": "a"}},
		"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": {
			"metadata": {"labels": {"project": "b"}},
			"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
		}}}},
	}
	some m in cost_tags.deny with input as review(job)
	m.details.missing_tags == ["cost-center"]
}

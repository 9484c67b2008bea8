# Unit tests for the Gatekeeper-style template (tests in Rego v1 beside a v0 module).
package k8srequiredlabels_test

import data.k8srequiredlabels
import rego.v1

review(labels) := {
	"review": {"object": {"kind": "Pod", "metadata": {"name": "p", "labels": labels}}},
	"parameters": {"labels": [{"key": "owner"}, {"key": "team", "allowedRegex": "^[a-z][a-z0-9-]*$"}]},
}

test_missing_label_is_a_violation if {
	some v in k8srequiredlabels.violation with input as review({"team": "ml"})
	v.details.missing_labels == {"owner"}
}

test_label_not_matching_its_regex_is_a_violation if {
	count(k8srequiredlabels.violation) == 1 with input as review({"owner": "a", "team": "ML"})
}

test_conforming_labels_pass if {
	count(k8srequiredlabels.violation) == 0 with input as review({"owner": "a", "team": "ml-platform"})
}

test_the_constraint_message_replaces_the_generated_one if {
	custom := object.union(review({}), {"parameters": {"message": "label it"}})
	{v.msg | some v in k8srequiredlabels.violation} == {"label it"} with input as custom
}
